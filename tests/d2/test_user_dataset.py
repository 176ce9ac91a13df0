"""Your own COCO-format dataset in one command: ``--dataset NAME ANNOTATIONS_JSON IMAGE_DIR`` of
train_net.py (two gloo workers) and demo.py, with category ids 1, 3, 7 (tiny model, CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from detectron2.data import DatasetCatalog, MetadataCatalog

import demo as demo_module
import train_net
from alrp_d2.config import setup_cfg
from alrp_d2.data.dataset_classes import check_dataset_classes
from alrp_d2.data.user_datasets import register_user_datasets

from .tiny_configs import tiny_retinanet_cfg

REPO_ROOT = Path(__file__).resolve().parents[2]
CATEGORIES = [{"id": 7, "name": "cross"}, {"id": 1, "name": "circle"}, {"id": 3, "name": "square"}]
IMAGE_SIZE = 64


@pytest.fixture(scope="module")
def coco_dataset(tmp_path_factory) -> tuple:
    """Four 64 x 64 images with one or two filled boxes each, annotated with category ids 1, 3, 7."""
    from PIL import Image

    root = tmp_path_factory.mktemp("my_dataset")
    (root / "images").mkdir()
    rng = np.random.default_rng(0)
    images, annotations = [], []
    for image_id in range(1, 5):
        pixels = rng.integers(0, 60, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
        for k in range(1 + image_id % 2):
            x, y = 6 + 28 * k, 10 + 4 * image_id
            pixels[y : y + 20, x : x + 22] = 200
            category = CATEGORIES[(image_id + k) % 3]["id"]
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                 "bbox": [x, y, 22, 20], "area": 440, "iscrowd": 0}
            )  # fmt: skip
        name = f"{image_id:03d}.jpg"
        Image.fromarray(pixels).save(root / "images" / name)
        images.append({"id": image_id, "file_name": name, "width": IMAGE_SIZE, "height": IMAGE_SIZE})
    json_file = root / "instances.json"
    json_file.write_text(json.dumps({"images": images, "annotations": annotations, "categories": CATEGORIES}))
    return str(json_file), str(root / "images")


def test_registration_keeps_the_class_order_of_the_ids(coco_dataset):
    counts = register_user_datasets([("ud_classes", *coco_dataset)])
    assert counts == {"ud_classes": 3}
    assert MetadataCatalog.get("ud_classes").thing_classes == ["circle", "square", "cross"]
    dicts = DatasetCatalog.get("ud_classes")
    assert {a["category_id"] for d in dicts for a in d["annotations"]} == {0, 1, 2}
    assert register_user_datasets([("ud_classes", *coco_dataset)]) == counts  # again: nothing to do
    with pytest.raises(ValueError, match="already registered"):
        register_user_datasets([("ud_classes", coco_dataset[0], str(REPO_ROOT))])


def test_class_count_must_match_the_config(coco_dataset):
    register_user_datasets([("ud_count", *coco_dataset)])
    cfg = setup_cfg(None, ["DATASETS.TRAIN", '("ud_count",)', "DATASETS.TEST", "()"])
    cfg.MODEL.META_ARCHITECTURE = "AlrpRetinaNet"
    cfg.MODEL.RETINANET.NUM_CLASSES = 5
    with pytest.raises(ValueError, match=r"'ud_count' \(DATASETS.TRAIN\) has 3 categories but MODEL.RETINANET.NUM_"):
        check_dataset_classes(cfg)
    cfg.MODEL.META_ARCHITECTURE = "GeneralizedRCNN"
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = 3
    check_dataset_classes(cfg)


def test_missing_files_are_named(coco_dataset, tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.json"):
        register_user_datasets([("ud_missing", str(tmp_path / "absent.json"), coco_dataset[1])])
    with pytest.raises(FileNotFoundError, match="absent_dir"):
        register_user_datasets([("ud_missing", coco_dataset[0], str(tmp_path / "absent_dir"))])


def test_train_evaluate_and_draw_with_the_lrp_thresholds(coco_dataset, tmp_path):
    cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    cfg.MODEL.RETINANET.NORM = ""
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.INPUT.MIN_SIZE_TRAIN, cfg.INPUT.MAX_SIZE_TRAIN = (IMAGE_SIZE,), IMAGE_SIZE
    cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = IMAGE_SIZE, IMAGE_SIZE
    cfg.MODEL.RETINANET.SCORE_THRESH_TEST = 0.0
    cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.MAX_ITER, cfg.SOLVER.WARMUP_ITERS = 2, 2, 0
    config = tmp_path / "config.yaml"
    config.write_text(cfg.dump())
    output = tmp_path / "output"
    dataset = ["--dataset", "my_train", *coco_dataset, "--dataset", "my_val", *coco_dataset]
    options = ["DATASETS.TRAIN", '("my_train",)', "DATASETS.TEST", '("my_val",)', "MODEL.RETINANET.NUM_CLASSES", "3"]
    train = [sys.executable, "train_net.py", "--config-file", str(config), *dataset, "--num-gpus", "2"]
    result = subprocess.run(
        train + ["--dist-url", "auto", *options, "OUTPUT_DIR", str(output)],
        cwd=REPO_ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    thresholds = output / "inference" / "lrp_optimal_thresholds.json"
    saved = json.loads(thresholds.read_text())["thresholds"]
    assert {key: entry["name"] for key, entry in saved.items()} == {"1": "circle", "3": "square", "7": "cross"}

    weights = str(output / "model_final.pth")
    args = train_net.get_parser().parse_args(
        ["--config-file", str(config), *dataset, "--eval-only", *options, "MODEL.WEIGHTS", weights,
         "OUTPUT_DIR", str(tmp_path / "evaluation")]
    )  # fmt: skip
    results = train_net.main(args)["bbox"]
    assert 0 <= results["oLRP"] <= 100 and "oLRP-square" in results

    drawn = tmp_path / "drawn"
    demo_arguments = ["--config-file", str(config), "--input", coco_dataset[1], "--output", str(drawn)]
    demo_arguments += ["--dataset", "my_val", *coco_dataset, "--lrp-thresholds", str(thresholds)]
    assert demo_module.main(demo_arguments + ["--opts", *options, "MODEL.WEIGHTS", weights]) == 0
    assert sorted(os.listdir(drawn)) == sorted(os.listdir(coco_dataset[1]))


def test_class_count_mismatch_stops_the_command_line(coco_dataset, tmp_path):
    dataset = ["--dataset", "my_other", *coco_dataset]
    args = train_net.get_parser().parse_args(
        ["--config-file", str(REPO_ROOT / "configs/quickstart/alrp_retinanet_shapes.yaml"), *dataset,
         "DATASETS.TRAIN", '("my_other",)']
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"'my_other' \(DATASETS.TRAIN\) has 3 categories but MODEL.RETINANET.NUM"):
        train_net.prepare_datasets(setup_cfg(args.config_file, args.opts), args)
