"""Weights and threshold files record what they were made for: checkpoints their classes (names and
dataset ids), threshold files the model, the task and the classes; --eval-only, the predictors and
demo.py compare them with what they are given and refuse a permuted or different class list showing
both lists. Checkpoints and threshold files of earlier versions load with one warning (tiny model, CPU)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from detectron2.modeling import build_model
from PIL import Image

import demo as demo_module
import train_net
from alrp_d2.checkpoint import AlrpCheckpointer, weights_fingerprint
from alrp_d2.data.dataset_classes import ClassesMismatchError, DatasetClasses, classes_record, dataset_classes
from alrp_d2.data.user_datasets import register_user_datasets
from alrp_d2.engine import AlrpTrainer
from alrp_d2.evaluation import AlrpPredictor, LRPThresholdPredictor, load_lrp_thresholds

from .tiny_configs import tiny_retinanet_cfg

REPO = Path(__file__).resolve().parents[2]
CATEGORIES = [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}, {"id": 3, "name": "cross"}]
PERMUTED = [{"id": 1, "name": "square"}, {"id": 2, "name": "circle"}, {"id": 3, "name": "cross"}]


def register(tmp_path: Path, categories) -> str:
    """A COCO dataset of two 64 x 64 images with one box each, under a fresh name."""
    images = []
    for i in (1, 2):
        Image.fromarray(np.full((64, 64, 3), 60 * i, np.uint8)).save(tmp_path / f"{i}.png")
        images.append({"id": i, "file_name": f"{i}.png", "width": 64, "height": 64})
    annotations = [
        {"id": 10 + i, "image_id": i, "category_id": i, "bbox": [8, 8, 30, 30], "area": 900, "iscrowd": 0}
        for i in (1, 2)
    ]
    name = f"provenance_{uuid.uuid4().hex[:8]}"
    json_file = tmp_path / f"{name}.json"
    json_file.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    register_user_datasets([(name, str(json_file), str(tmp_path))], evaluated=[name])
    return name


def weights(tmp_path: Path, classes=None) -> str:
    """A tiny RetinaNet's checkpoint, recording ``classes`` (a dataset name) when given."""
    cfg = tiny_retinanet_cfg()
    checkpointer = AlrpCheckpointer(
        build_model(cfg), str(tmp_path), classes=dataset_classes(classes) if classes else None
    )
    name = f"model_{uuid.uuid4().hex[:6]}"
    checkpointer.save(name)
    return str(tmp_path / f"{name}.pth")


def predictor_cfg(weights_path: str, test: str):
    cfg = tiny_retinanet_cfg()
    cfg.MODEL.WEIGHTS = weights_path
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (), (test,)
    cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = 64, 64
    return cfg


def test_checkpoints_record_the_training_classes(tmp_path):
    train = register(tmp_path, CATEGORIES)
    saved = torch.load(weights(tmp_path, train), weights_only=True)
    assert saved["classes"] == {"dataset": train, "names": ["circle", "square", "cross"], "category_ids": [1, 2, 3]}
    cfg = tiny_retinanet_cfg()
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (train,), ()
    cfg.DATALOADER.NUM_WORKERS, cfg.OUTPUT_DIR = 0, str(tmp_path / "run")
    assert AlrpTrainer(cfg).checkpointer.classes == dataset_classes(train)


def test_eval_only_refuses_a_test_set_with_permuted_ids_without_a_train_set(tmp_path):
    """DATASETS.TRAIN empty: only the checkpoint's record can tell that the classes are swapped."""
    train, test = register(tmp_path, CATEGORIES), register(tmp_path, PERMUTED)
    cfg = predictor_cfg(weights(tmp_path, train), test)
    cfg.OUTPUT_DIR = str(tmp_path / "evaluation")
    config = tmp_path / "config.yaml"
    config.write_text(cfg.dump())
    args = train_net.get_parser().parse_args(["--config-file", str(config), "--eval-only"])
    with pytest.raises(ClassesMismatchError) as error:
        train_net.main(args)
    message = str(error.value)
    assert f"(dataset '{train}'): [(1, 'circle'), (2, 'square'), (3, 'cross')]" in message
    assert f"{test}: [(1, 'square'), (2, 'circle'), (3, 'cross')]" in message
    with pytest.raises(ClassesMismatchError, match="was made for other classes"):
        AlrpPredictor(cfg)


def test_eval_only_ignores_the_train_set_of_the_config(tmp_path):
    """The quickstart's shapes_train (5 classes) stays in DATASETS.TRAIN of 3-class weights: no
    advice to set NUM_CLASSES 5; the test set is evaluated."""
    train, test = register(tmp_path, CATEGORIES), register(tmp_path, CATEGORIES)
    quickstart = str(REPO / "configs/quickstart/alrp_retinanet_shapes.yaml")
    options = ["MODEL.RETINANET.NUM_CLASSES", "3", "MODEL.RETINANET.NUM_CONVS", "1", "MODEL.FPN.OUT_CHANNELS", "16"]
    options += ["MODEL.RETINANET.NORM", "", "MODEL.RESNETS.NORM", "BN", "DATASETS.TEST", f'("{test}",)']
    options += ["DATALOADER.NUM_WORKERS", "1"]
    options += ["MODEL.WEIGHTS", weights(tmp_path, train), "OUTPUT_DIR", str(tmp_path / "evaluation")]
    args = train_net.get_parser().parse_args(["--config-file", quickstart, "--eval-only", *options])
    train_net.prepare_datasets(setup_from(args), args)
    assert "oLRP" in train_net.main(args)["bbox"]


def setup_from(args):
    from alrp_d2.config import setup_cfg

    return setup_cfg(args.config_file, args.opts)


def test_weights_without_a_record_load_with_one_warning(tmp_path, caplog):
    test = register(tmp_path, CATEGORIES)
    cfg = predictor_cfg(weights(tmp_path), test)
    with caplog.at_level(logging.WARNING, logger="alrp_d2.checkpoint"):
        AlrpPredictor(cfg)
    records = [r for r in caplog.records if "does not record the classes it was trained on" in r.getMessage()]
    assert len(records) == 1 and cfg.MODEL.WEIGHTS in records[0].getMessage()


def thresholds_file(tmp_path: Path, model, task="bbox", categories=CATEGORIES) -> str:
    path = tmp_path / f"thresholds_{uuid.uuid4().hex[:6]}.json"
    entries = {str(c["id"]): {"name": c["name"], "threshold": 0.3} for c in categories}
    path.write_text(json.dumps({"model": model, "task": task, "thresholds": entries}))
    return str(path)


def test_threshold_files_must_be_of_the_model_the_task_and_the_classes(tmp_path, caplog):
    train = register(tmp_path, CATEGORIES)
    cfg = predictor_cfg(weights(tmp_path, train), train)
    own = {"architecture": cfg.MODEL.META_ARCHITECTURE, "weights_sha256": weights_fingerprint(AlrpPredictor(cfg).model)}
    assert LRPThresholdPredictor(cfg, thresholds_file(tmp_path, own)).class_thresholds == [0.3] * 3
    other = dict(own, weights_sha256="0" * 64)
    with pytest.raises(ValueError, match=r"holds the LRP-optimal thresholds of another model:\n  the file's: .*'0000"):
        LRPThresholdPredictor(cfg, thresholds_file(tmp_path, other))
    with pytest.raises(ValueError, match=r"of the 'segm' task, not of 'bbox': use the evaluator's lrp_optimal_thr"):
        LRPThresholdPredictor(cfg, thresholds_file(tmp_path, own, task="segm"))
    with pytest.raises(ClassesMismatchError, match=r"id 1 is 'square' in the file but 'circle' in the dataset"):
        LRPThresholdPredictor(cfg, thresholds_file(tmp_path, own, categories=PERMUTED))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"1": {"name": "circle", "threshold": 0.3}, "2": {"name": "square", "threshold": None},
                               "3": {"name": "cross", "threshold": 0.1}}))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="alrp_d2.evaluation.lrp_threshold_predictor"):
        assert load_lrp_thresholds(str(old), ["circle", "square", "cross"], [1, 2, 3]) == [0.3, None, 0.1]
    assert "records neither the model nor the task" in caplog.text


def test_evaluation_writes_the_model_into_the_threshold_file(tmp_path):
    train = register(tmp_path, CATEGORIES)
    cfg = predictor_cfg(weights(tmp_path, train), train)
    cfg.OUTPUT_DIR = str(tmp_path / "evaluation")
    cfg.DATALOADER.NUM_WORKERS = 1
    cfg.MODEL.RETINANET.SCORE_THRESH_TEST = 0.0
    predictor = AlrpPredictor(cfg)
    AlrpTrainer.test(cfg, predictor.model)
    path = str(tmp_path / "evaluation" / "inference" / "lrp_optimal_thresholds.json")
    saved = json.loads(Path(path).read_text())
    assert saved["task"] == "bbox" and saved["model"] == {
        "architecture": "AlrpRetinaNet",
        "weights_sha256": weights_fingerprint(predictor.model),
    }
    assert len(LRPThresholdPredictor(cfg, path).class_thresholds) == 3


def test_demo_refuses_weights_of_other_classes_showing_both_lists(tmp_path, caplog, capsys):
    train, test = register(tmp_path, CATEGORIES), register(tmp_path, PERMUTED)
    cfg = predictor_cfg(weights(tmp_path, train), test)
    config = tmp_path / "config.yaml"
    config.write_text(cfg.dump())
    arguments = ["--config-file", str(config), "--input", str(tmp_path / "1.png"), "--output", str(tmp_path / "out")]
    assert demo_module.main(arguments) == 2
    # demo.main's first call of detectron2's setup_logger logs to stdout; later calls leave the logs to propagate.
    assert f"{test}: [(1, 'square'), (2, 'circle'), (3, 'cross')]" in caplog.text + capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_a_record_needs_names_and_matching_ids():
    classes = DatasetClasses("a", ("x", "y"), (4, 7))
    assert classes_record(classes) == {"dataset": "a", "names": ["x", "y"], "category_ids": [4, 7]}
