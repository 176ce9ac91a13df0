"""Evaluation skipped: ``dataloader.evaluator=None`` or ``=null`` in a LazyConfig (detectron2's override keeps
``None`` a string) and ``DATASETS.TEST "()"`` in a YAML config evaluate nothing. Evaluation limited:
``TEST.MAX_IMAGES`` / ``train.eval_max_images`` infer the first N images of the test dataset and score them alone,
as a dataset of exactly those images; a bad limit is an error naming its key."""

from __future__ import annotations

import json
import logging

import pytest
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.modeling import build_model

from alrp_d2.config import validate_alrp_config
from alrp_d2.data.shapes import shapes_paths
from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.lazy_run import lazy_test, load_lazy_config

from .lazy_runs import REPO_ROOT
from .shifted_truth_detector import ShiftedTruthDetector
from .small_shapes import register_small_shapes
from .tiny_configs import tiny_retinanet_cfg

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.py")
COMPARED = ("AP", "AP50", "AP75", "AP90", "oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN")


@pytest.mark.parametrize("value", ["None", "null"])
def test_a_lazy_evaluator_of_none_or_null_evaluates_nothing(value):
    cfg = load_lazy_config(QUICKSTART, [f"dataloader.evaluator={value}"])
    assert lazy_test(cfg, model=None) == {}  # the model is not touched


def test_a_yaml_config_without_test_datasets_evaluates_nothing():
    cfg = tiny_retinanet_cfg()
    cfg.DATASETS.TEST = ()
    assert AlrpTrainer.test(cfg, build_model(cfg)) == {}


@pytest.fixture(scope="module")
def validation(tmp_path_factory):
    """The quickstart's shapes validation set at test scale (4 images), and a dataset of exactly its first 2 images
    (a COCO json of those images and their annotations): (name of the 4, name of the 2, ids of the 2)."""
    root = str(tmp_path_factory.mktemp("datasets"))
    _, val = register_small_shapes(root, "evalsubset", {"train": 1, "val": 4})
    first_two = [record["image_id"] for record in DatasetCatalog.get(val)[:2]]
    json_file, image_root = shapes_paths(root, "val")
    with open(json_file) as f:
        coco = json.load(f)
    coco["images"] = [image for image in coco["images"] if image["id"] in first_two]
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] in first_two]
    two_json = f"{root}/first_two.json"
    with open(two_json, "w") as f:
        json.dump(coco, f)
    if "evalsubset_val_two" not in DatasetCatalog:
        register_coco_instances("evalsubset_val_two", {}, two_json, image_root)
    return val, "evalsubset_val_two", first_two


def lazy_results(dataset: str, output_dir, *limit: str):
    cfg = load_lazy_config(
        QUICKSTART,
        [f"dataloader.test.dataset.names={dataset}", "dataloader.test.num_workers=0", f"train.output_dir={output_dir}"]
        + list(limit),
    )
    model = ShiftedTruthDetector(dataset)
    return lazy_test(cfg, model)["bbox"], model.seen


def test_a_limit_infers_and_scores_the_first_images_alone_in_both_config_systems(validation, tmp_path, caplog):
    val, val_two, first_two = validation
    caplog.set_level(logging.INFO, logger="alrp_d2")
    expected, _ = lazy_results(val_two, tmp_path / "two")
    assert 0 < expected["AP"] < 100  # shifted boxes: a metric that tells subsets apart
    everything, _ = lazy_results(val, tmp_path / "all")
    assert everything["AP"] != pytest.approx(expected["AP"])

    lazy, seen = lazy_results(val, tmp_path / "lazy", "train.eval_max_images=2")
    assert seen == first_two
    assert {k: lazy[k] for k in COMPARED} == pytest.approx({k: expected[k] for k in COMPARED})

    cfg = tiny_retinanet_cfg()
    cfg.MODEL.RETINANET.NUM_CLASSES = 5
    cfg.DATASETS.TEST, cfg.TEST.MAX_IMAGES, cfg.OUTPUT_DIR = (val,), 2, str(tmp_path / "yaml")
    cfg.DATALOADER.NUM_WORKERS = 0
    model = ShiftedTruthDetector(val)
    yaml = AlrpTrainer.test(cfg, model)["bbox"]
    assert model.seen == first_two
    assert {k: yaml[k] for k in COMPARED} == pytest.approx({k: expected[k] for k in COMPARED})
    assert caplog.text.count(f"Evaluating the first 2 of the 4 images of {val}") == 2  # one line a run


@pytest.mark.parametrize("value", [-1, 1.5, "2"])
def test_a_bad_yaml_limit_is_an_error_naming_its_key(value):
    cfg = tiny_retinanet_cfg()
    cfg.TEST.MAX_IMAGES = value
    with pytest.raises(ValueError, match=r"TEST\.MAX_IMAGES=.*integer >= 0"):
        validate_alrp_config(cfg)


@pytest.mark.parametrize("value", ["-1", "1.5", "abc"])
def test_a_bad_lazy_limit_is_an_error_naming_its_key(value):
    with pytest.raises(ValueError, match=r"train\.eval_max_images=.*(integer >= 0|must be a number)"):
        load_lazy_config(QUICKSTART, [f"train.eval_max_images={value}"])
