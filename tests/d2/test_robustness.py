"""Weights that do not fit the config, unreadable images, config values from the command line and
demo.py's input check (tiny models, CPU)."""

from __future__ import annotations

import logging
import os
from typing import List

import numpy as np
import pytest
import torch
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.detection_utils import SizeMismatchError
from detectron2.engine import default_argument_parser
from detectron2.modeling import build_model
from detectron2.structures import BoxMode
from detectron2.utils.events import EventStorage
from PIL import Image

import demo as demo_module
import train_net
from alrp_d2.checkpoint import IncompatibleWeightsError
from alrp_d2.config import setup_cfg, validate_alrp_config
from alrp_d2.data import build_alrp_mapper
from alrp_d2.data.image_errors import ImageErrorGuard, UnreadableImageError
from alrp_d2.data.shapes import SHAPES_CLASSES
from alrp_d2.engine import AlrpTrainer
from alrp_d2.evaluation import AlrpPredictor, LRPThresholdPredictor

from .tiny_configs import instances, tiny_batch, tiny_faster_rcnn_cfg, tiny_retinanet_cfg

IMAGE_SIZE = 64


def write_image(path, size=IMAGE_SIZE) -> str:
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path, quality=90)
    return str(path)


def dataset_dict(file_name: str, size: int = IMAGE_SIZE) -> dict:
    box = [8.0, 8.0, 40.0, 40.0]
    annotation = {"bbox": box, "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0, "iscrowd": 0}
    return {"file_name": file_name, "height": size, "width": size, "image_id": file_name, "annotations": [annotation]}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict:
    """A good JPEG, a truncated JPEG, a PNG of random bytes and a missing file."""
    root = tmp_path_factory.mktemp("images")
    good = write_image(root / "good.jpg")
    truncated = root / "truncated.jpg"
    data = open(good, "rb").read()
    truncated.write_bytes(data[: len(data) // 2])
    corrupt = root / "corrupt.png"
    corrupt.write_bytes(np.random.default_rng(1).integers(0, 255, 300, dtype=np.uint8).tobytes())
    return {"good": good, "truncated": str(truncated), "corrupt": str(corrupt), "missing": str(root / "missing.jpg")}


def training_cfg(tmp_path, num_classes: int = 3):
    cfg = tiny_retinanet_cfg()
    cfg.MODEL.RETINANET.NUM_CLASSES = num_classes
    cfg.INPUT.MIN_SIZE_TRAIN, cfg.INPUT.MAX_SIZE_TRAIN = (IMAGE_SIZE,), IMAGE_SIZE
    cfg.SOLVER.IMS_PER_BATCH = 2
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (), ()
    cfg.OUTPUT_DIR = str(tmp_path / "output")
    return cfg


# ---- weights that do not fit the config ----------------------------------------------------------


@pytest.fixture
def two_class_weights(tmp_path):
    """Weights of the tiny RetinaNet trained for 2 classes, and the shapes of their class head."""
    cfg = tiny_retinanet_cfg()
    cfg.MODEL.RETINANET.NUM_CLASSES = 2
    state = build_model(cfg).state_dict()
    path = tmp_path / "two_classes.pth"
    torch.save({"model": state}, path)
    return str(path), tuple(state["head.cls_score.weight"].shape)


def check_message(error: IncompatibleWeightsError, saved_shape, cfg) -> None:
    model_shape = tuple(build_model(cfg).state_dict()["head.cls_score.weight"].shape)
    message = str(error)
    assert f"head.cls_score.weight: {saved_shape} in the weights, {model_shape} in the model" in message
    assert "head.cls_score.bias" in message and "MODEL.ALLOW_PARTIAL_WEIGHTS" in message


def test_predictors_refuse_weights_of_another_class_count(two_class_weights, tmp_path):
    path, saved_shape = two_class_weights
    cfg = tiny_retinanet_cfg()
    cfg.MODEL.RETINANET.NUM_CLASSES = len(SHAPES_CLASSES)
    cfg.MODEL.WEIGHTS = path
    cfg.DATASETS.TEST = ("shapes_val",)
    with pytest.raises(IncompatibleWeightsError) as error:
        AlrpPredictor(cfg)
    check_message(error.value, saved_shape, cfg)
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text("{" + ", ".join(f'"{name}": 0.5' for name in SHAPES_CLASSES) + "}")
    with pytest.raises(IncompatibleWeightsError):
        LRPThresholdPredictor(cfg, str(thresholds))


def test_eval_only_refuses_weights_of_another_class_count(two_class_weights, tmp_path):
    path, saved_shape = two_class_weights
    cfg = training_cfg(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(cfg.dump())
    args = default_argument_parser().parse_args(
        ["--config-file", str(config), "--eval-only", "MODEL.WEIGHTS", path, "OUTPUT_DIR", cfg.OUTPUT_DIR]
    )
    with pytest.raises(IncompatibleWeightsError) as error:
        train_net.main(args)
    check_message(error.value, saved_shape, cfg)


def register_images(name: str, files) -> None:
    if name not in DatasetCatalog:
        DatasetCatalog.register(name, lambda: [dataset_dict(f) for f in files])
        MetadataCatalog.get(name).thing_classes = ["a", "b", "c"]


def test_training_from_other_weights_needs_the_opt_in(two_class_weights, images, tmp_path):
    path, saved_shape = two_class_weights
    register_images("robust_good", [images["good"]])
    cfg = training_cfg(tmp_path)
    cfg.DATASETS.TRAIN = ("robust_good",)
    cfg.MODEL.WEIGHTS = path
    with pytest.raises(IncompatibleWeightsError) as error:
        AlrpTrainer(cfg).resume_or_load(resume=False)
    check_message(error.value, saved_shape, cfg)

    cfg.MODEL.ALLOW_PARTIAL_WEIGHTS = True
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    saved = torch.load(path, weights_only=False)["model"]
    loaded = trainer.model.state_dict()
    assert torch.equal(loaded["head.bbox_pred.weight"], saved["head.bbox_pred.weight"])
    assert loaded["head.cls_score.weight"].shape != saved["head.cls_score.weight"].shape


# ---- unreadable images -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["truncated", "corrupt", "missing"])
def test_image_errors_name_the_file(kind, images, tmp_path):
    guard = ImageErrorGuard(build_alrp_mapper(training_cfg(tmp_path), is_train=True))
    with pytest.raises(UnreadableImageError, match="SKIP_UNREADABLE_IMAGES") as error:
        guard(dataset_dict(images[kind]))
    assert images[kind] in str(error.value)
    if kind == "truncated":
        assert "truncated" in str(error.value)


def test_size_mismatch_with_the_json_still_fails_clearly(images, tmp_path):
    guard = ImageErrorGuard(build_alrp_mapper(training_cfg(tmp_path), is_train=True), skip=True)
    with pytest.raises(SizeMismatchError, match="good.jpg"):
        guard(dataset_dict(images["good"], size=IMAGE_SIZE + 10))


def test_skipping_warns_once_per_file_with_a_count(images, tmp_path):
    guard = ImageErrorGuard(build_alrp_mapper(training_cfg(tmp_path), is_train=True), skip=True)
    # A handler on the module's logger itself: detectron2's setup_logger (run by other tests)
    # stops the "alrp_d2" logger from propagating to the root logger.
    records: List[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    image_logger = logging.getLogger("alrp_d2.data.image_errors")
    image_logger.addHandler(handler)
    try:
        for _ in range(2):
            for kind in ("truncated", "corrupt"):
                assert guard(dataset_dict(images[kind])) is None
        assert "image" in guard(dataset_dict(images["good"]))
    finally:
        image_logger.removeHandler(handler)
    warnings = [record.getMessage() for record in records]
    assert len(warnings) == 2
    assert images["truncated"] in warnings[0] and "1 unreadable image(s)" in warnings[0]
    assert images["corrupt"] in warnings[1] and "2 unreadable image(s)" in warnings[1]


def test_training_loader_skips_or_stops_on_unreadable_images(images, tmp_path):
    register_images("robust_mixed", [images["good"], images["truncated"], images["good"], images["missing"]])
    cfg = training_cfg(tmp_path)
    cfg.DATASETS.TRAIN = ("robust_mixed",)
    with pytest.raises(UnreadableImageError, match="(truncated|missing).jpg"):
        for _, _ in zip(range(4), AlrpTrainer.build_train_loader(cfg)):
            pass
    cfg.DATALOADER.SKIP_UNREADABLE_IMAGES = True
    batches = [batch for _, batch in zip(range(4), AlrpTrainer.build_train_loader(cfg))]
    assert all(d["file_name"] == images["good"] for batch in batches for d in batch)


# ---- config values from the command line ---------------------------------------------------------


def test_command_line_value_names_the_key_and_the_rule():
    """An integer for a float key is taken as a float; the criterion's rule names the key when the model is built."""
    assert setup_cfg(None, ["MODEL.ALRP.DELTA", "2"]).MODEL.ALRP.DELTA == 2.0
    delta = setup_cfg(None, ["MODEL.ALRP.DELTA", "0"]).MODEL.ALRP.DELTA
    with pytest.raises(
        ValueError, match=r"MODEL\.ALRP\.DELTA=0\.0: must be a number >= 1e-06 \(argument delta=0\.0 of AlrpCriterion"
    ):
        build_model(tiny_retinanet_cfg(DELTA=delta))


# ---- demo.py -----------------------------------------------------------------------------------


def test_demo_checks_the_inputs_before_loading_the_model(tmp_path):
    cfg = tiny_retinanet_cfg()
    cfg.MODEL.WEIGHTS = str(tmp_path / "absent.pth")  # loading it would fail
    written, failed = demo_module.run_demo(cfg, [str(tmp_path / "missing.png")], str(tmp_path / "out"))
    assert written == [] and failed == [(str(tmp_path / "missing.png"), "no such file or directory")]
    assert not (tmp_path / "out").exists()


def test_demo_refuses_weights_of_another_class_count(two_class_weights, images, tmp_path):
    path, saved_shape = two_class_weights
    cfg = tiny_retinanet_cfg()
    config = tmp_path / "config.yaml"
    config.write_text(cfg.dump())
    arguments = ["--config-file", str(config), "--output", str(tmp_path / "out"), "--input", images["good"]]
    assert demo_module.main(arguments + ["--opts", "MODEL.WEIGHTS", path]) == 2
    assert not os.path.exists(tmp_path / "out")
    cfg.MODEL.WEIGHTS = path
    with pytest.raises(IncompatibleWeightsError) as error:
        demo_module.build_predictor(cfg)
    check_message(error.value, saved_shape, cfg)


# ---- classes beyond the model's ------------------------------------------------------------------


def test_mapper_names_the_image_with_a_class_beyond_the_model(images, tmp_path):
    mapper = build_alrp_mapper(training_cfg(tmp_path, num_classes=3), is_train=True)
    record = dataset_dict(images["good"])
    assert len(mapper(record)["instances"]) == 1
    record["annotations"][0]["category_id"] = 3
    with pytest.raises(ValueError, match=r"good\.jpg: an annotation has class 3.*MODEL\.RETINANET\.NUM_CLASSES=3"):
        mapper(record)


@pytest.mark.parametrize("config", ["retinanet", "faster_rcnn"])
def test_a_class_beyond_the_model_makes_the_ranking_loss_nan(config):
    """Batches that bypass the mapper: a label beyond the background class K makes the loss NaN
    (detectron2's trainer stops), never a silently different ranking. (Class K itself is
    detectron2's background label after labelling: only the mapper can refuse it.)"""
    cfg = tiny_retinanet_cfg() if config == "retinanet" else tiny_faster_rcnn_cfg()
    model = build_model(cfg).train()
    batch = tiny_batch()
    with EventStorage():
        assert all(torch.isfinite(value) for value in model(batch).values())
        batch[0]["instances"] = instances([[10, 10, 50, 60], [60, 20, 120, 90]], [0, 4])
        losses = model(batch)
    name = "loss_retinanet_cls" if config == "retinanet" else "loss_box_cls"
    assert torch.isnan(losses[name])


def shared_references(leaf: float):
    """A config whose MODEL.FOVEABOX.SCALE_RANGES nests 2**40 references to one list (what a YAML alias bomb loads
    to; such files are refused before, tests/d2/test_config_bound.py)."""
    cfg = setup_cfg(None)
    value = [leaf, 2.0]
    for _ in range(40):
        value = [value, value]
    cfg.MODEL.FOVEABOX.SCALE_RANGES = value
    return cfg


@pytest.fixture
def deadline():
    """Fails the test that is still running after 30 s (SIGALRM) instead of hanging the suite."""
    import signal

    def expire(signum, frame):
        raise TimeoutError("still running after 30 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_the_finiteness_check_visits_shared_yaml_references_once(deadline):
    validate_alrp_config(shared_references(1.0))
    with pytest.raises(ValueError, match=r"Invalid config value MODEL.FOVEABOX.SCALE_RANGES=.*must be finite"):
        validate_alrp_config(shared_references(float("nan")))
