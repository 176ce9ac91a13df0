"""Untrusted and extreme inputs: each gets a clear error naming what is wrong, or a documented result,
never a crash of native code, a memory exhaustion or a silent result (docs/robustness.md). Calls that
exhausted memory or crashed before run in a forked process with a capped address space
(:mod:`.bounded_calls`)."""

from __future__ import annotations

import io
import json
import logging
import math
import pickle
import uuid
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from detectron2.config import LazyConfig
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.structures import Boxes, Instances
from PIL import Image

import demo as demo_module
import train_net
from alrp_d2.checkpoint import AlrpCheckpointer, UnreadableCheckpointError
from alrp_d2.config import setup_cfg
from alrp_d2.data import build_alrp_mapper
from alrp_d2.data.coco_json_check import CocoJsonError, check_coco_json
from alrp_d2.data.dataset_classes import dataset_classes
from alrp_d2.data.image_errors import ImageErrorGuard
from alrp_d2.data.image_size import ImageSizeError
from alrp_d2.data.segmentation_check import coordinate_bounds
from alrp_d2.engine.lazy_run import lazy_test
from alrp_d2.engine.machine_agreement import run_description
from alrp_d2.evaluation import AlrpPredictor, COCOLRPEvaluator, load_lrp_thresholds
from alrp_d2.evaluation.coco_lrp_evaluation import NonFiniteDetectionsError
from alrp_d2.json_file import InvalidJsonError

from .bounded_calls import run_bounded
from .official_fixtures import load_converter
from .tiny_configs import tiny_retinanet_cfg

SIZE = 96  # the images of the hand-made annotation files are SIZE x SIZE


def coco_file(tmp_path, bbox=(10, 10, 40, 30), segmentation=None, image_size=(SIZE, SIZE)) -> str:
    """A COCO file of one image (id 7) with one annotation (id 70) of ``bbox``."""
    annotation = {"id": 70, "image_id": 7, "category_id": 1, "bbox": list(bbox), "area": 100.0, "iscrowd": 0}
    if segmentation is not None:
        annotation["segmentation"] = segmentation
    content = {
        "images": [{"id": 7, "file_name": "7.png", "width": image_size[0], "height": image_size[1]}],
        "annotations": [annotation],
        "categories": [{"id": 1, "name": "thing"}],
    }
    path = tmp_path / f"{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(content))
    return str(path)


# ---- annotation files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("far", [1e9, 1e12])
def test_a_polygon_point_far_outside_its_image_is_refused_at_registration(tmp_path, far):
    """pycocotools' rasteriser segfaults on a polygon coordinate of 1e9 (training, --eval-only, LazyConfig runs)."""
    polygon = [10, 10, far, 10, far, 40, 10, 40]
    path = coco_file(tmp_path, segmentation=[polygon])
    message = rf"(?s){path} has 1 problem.*annotation id 70 \(image id 7\): polygon 0 has 2 point\(s\) more than one "
    with pytest.raises(CocoJsonError, match=message + r"image size outside its 96 x 96 image"):
        check_coco_json(path, evaluated=True, masks=True)


def test_polygons_within_the_bounds_rasterise_under_the_memory_cap():
    """The bound (one image size around the image) keeps pycocotools' rasteriser safe: its extreme points rasterise
    in a capped process."""
    from pycocotools import mask as mask_util

    x_low, y_low, x_high, y_high = coordinate_bounds(SIZE, SIZE)

    def rasterise():
        polygon = [x_low, y_low, x_high, y_low, x_high, y_high, x_low, y_high]
        return int(mask_util.decode(mask_util.frPyObjects([polygon], SIZE, SIZE)).sum())

    assert run_bounded(rasterise).value == str(SIZE * SIZE)


@pytest.mark.parametrize(
    "bbox, problem",
    [
        ([500, 500, 20, 20], r"bbox \[500, 500, 20, 20\] does not overlap its 96 x 96 image"),
        ([10, 10, 1e30, 20], r"bbox \[10, 10, 1e\+30, 20\] reaches more than one image size beyond its 96 x 96 image"),
    ],
)
def test_a_box_outside_its_image_is_an_error_to_evaluate_and_a_counted_warning_to_train(
    tmp_path, caplog, bbox, problem
):
    path = coco_file(tmp_path, bbox=bbox)
    with pytest.raises(CocoJsonError, match=rf"annotation id 70 \(image id 7\): {problem}.* \(no detection can match"):
        check_coco_json(path, evaluated=True)
    with caplog.at_level(logging.WARNING, logger="alrp_d2"):
        check_coco_json(path, evaluated=False)
    assert f"{path}: 1 annotation(s) with a box outside its image or reaching more than one image size" in caplog.text


def nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "content, reason",
    [
        (nested_json(100_000).encode(), "it nests deeper than"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "it is not UTF-8 text"),
    ],
    ids=["nested", "binary"],
)
def test_a_json_file_that_cannot_be_read_is_not_valid_json(tmp_path, content, reason):
    """COCO files (--dataset, and registered ones whose classes are read) and LRP threshold files."""
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(CocoJsonError, match=rf"^{path} is not valid JSON: {reason}"):
        check_coco_json(str(path))
    with pytest.raises(ValueError, match=rf"^{path} is not valid JSON: {reason}"):
        load_lrp_thresholds(str(path), ["thing"])
    name = f"bad_json_{uuid.uuid4().hex[:8]}"
    register_coco_instances(name, {}, str(path), str(tmp_path))
    try:
        with pytest.raises(InvalidJsonError, match=rf"^{path} is not valid JSON"):
            dataset_classes(name)
    finally:
        DatasetCatalog.remove(name)


@pytest.mark.parametrize("threshold", [-5, 7])
def test_an_lrp_threshold_outside_0_1_is_refused(tmp_path, threshold):
    path = tmp_path / "thresholds.json"
    path.write_text(
        json.dumps({"model": None, "task": "bbox", "thresholds": {"1": {"name": "thing", "threshold": threshold}}})
    )
    with pytest.raises(
        ValueError, match=rf"threshold of class id 1 \('thing'\) must be a score in \[0, 1\] .*got {threshold}"
    ):
        load_lrp_thresholds(str(path), ["thing"], [1])


# ---- configs and command lines ---------------------------------------------------------------------------------


def test_the_run_description_of_shared_references_does_not_expand_them():
    """The machine-agreement digest (computed by train_net.py in every run) exhausted memory after 90-120 s on a YAML
    alias bomb, now refused before (tests/d2/test_config_bound.py); a value of shared references set in code, 2**40
    of them, is digested without expanding them."""
    cfg = setup_cfg(None)
    value = [1.0, 2.0]
    for _ in range(40):
        value = [value, value]
    cfg.MODEL.FOVEABOX.SCALE_RANGES = value
    outcome = run_bounded(lambda: run_description(cfg)["MODEL.FOVEABOX.SCALE_RANGES"])
    assert outcome.value is not None and outcome.value.startswith("'<list, sha256 "), outcome


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("MODEL.ALRP.SB_ENABLED", "None", r"MODEL.ALRP.SB_ENABLED=None: must be True or False"),
    ],
)
def test_config_values_that_cannot_work_are_refused(key, value, message):
    with pytest.raises(ValueError, match=rf"Invalid config value {message}"):
        setup_cfg(None, [key, value])


@pytest.mark.parametrize("value", ["nan", "0", "-5", "1e30"])
def test_an_unusable_dist_timeout_is_a_usage_error(capsys, value):
    with pytest.raises(SystemExit) as exit_status:
        train_net.get_parser().parse_args(["--config-file", "x.yaml", "--dist-timeout", value])
    assert exit_status.value.code == 2
    assert f"argument --dist-timeout: {value} is not a finite number in (0, 604800]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--scale", "0", "(0, 16]"),
        ("--scale", "-1", "(0, 16]"),
        ("--scale", "nan", "(0, 16]"),
        ("--scale", "1e6", "(0, 16]"),
        ("--confidence-threshold", "nan", "[0, 1]"),
        ("--confidence-threshold", "1.5", "[0, 1]"),
    ],
)
def test_unusable_demo_numbers_are_usage_errors(capsys, option, value, expected):
    arguments = ["--config-file", "x.yaml", "--input", "a.png", "--output", "out", option, value]
    with pytest.raises(SystemExit) as exit_status:
        demo_module.get_parser().parse_args(arguments)
    assert exit_status.value.code == 2
    assert f"argument {option}: {value} is not a finite number in {expected}" in capsys.readouterr().err


def test_demo_checks_only_the_test_set_and_names_opts_in_its_advice(tmp_path, capfd, caplog):
    """demo.py draws with the weights' classes: DATASETS.TRAIN (here 1 class, the model 5) is not its business. (Its
    log reaches the terminal or, once another test has set the project's logger up, pytest's log capture.)"""
    (tmp_path / "images").mkdir()
    spec = ["--dataset", "one_class", coco_file(tmp_path), str(tmp_path / "images")]
    base = ["--config-file", "configs/quickstart/alrp_retinanet_shapes.yaml", "--output", str(tmp_path / "out")]
    base += ["--input", str(tmp_path / "missing.png"), *spec, "--opts", "MODEL.RETINANET.NUM_CLASSES", "5"]
    assert demo_module.main(base + ["DATASETS.TRAIN", "('one_class',)", "DATASETS.TEST", "()"]) == 1  # missing input
    capfd.readouterr()
    caplog.clear()
    assert demo_module.main(base + ["DATASETS.TEST", "('one_class',)"]) == 2
    printed = capfd.readouterr()
    assert "add `MODEL.RETINANET.NUM_CLASSES 1` to --opts" in printed.out + printed.err + caplog.text


# ---- checkpoints -----------------------------------------------------------------------------------------------


def deflated_checkpoint(path, numel: int) -> str:
    """A torch.save archive of ``numel`` zeros whose storage entry is deflated (``numel * 4`` bytes in ~1/1000)."""
    buffer = io.BytesIO()
    torch.save({"model": {"weight": torch.zeros(numel)}, "__author__": "bomb"}, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as source, zipfile.ZipFile(path, "w") as archive:
        for entry in source.infolist():
            archive.writestr(entry.filename, source.read(entry.filename), compress_type=zipfile.ZIP_DEFLATED)
    return str(path)


def test_a_decompression_bomb_checkpoint_is_refused_before_loading(tmp_path):
    """A 5.8 MB .pth made torch.load allocate 6 GB (MODEL.WEIGHTS, resuming, predictors, the converter): the
    archive's declared sizes are checked first (here 32 MB declared in ~35 KB)."""
    converter = load_converter()
    path = deflated_checkpoint(tmp_path / "bomb.pth", 8_000_000)

    def load():
        return AlrpCheckpointer(torch.nn.Linear(2, 2)).load(path)

    outcome = run_bounded(load)
    assert outcome.error_type == UnreadableCheckpointError.__name__, outcome
    assert f"{path} declares 320" in outcome.error and "decompression bomb" in outcome.error
    outcome = run_bounded(lambda: converter.load_official_checkpoint(path))
    assert outcome.error_type == "ConversionError" and f"{path} declares 320" in outcome.error, outcome


def test_a_pkl_of_object_arrays_is_refused_naming_them(tmp_path):
    path = tmp_path / "objects.pkl"
    weights = {"weight": np.array([1, "a"], dtype=object), "bias": np.zeros(2, np.float32)}
    path.write_bytes(pickle.dumps({"model": weights, "__author__": "someone"}))
    with pytest.raises(
        UnreadableCheckpointError, match=rf"(?s){path} has 1 array\(s\) of objects.*\n  weight \(object\)"
    ):
        AlrpCheckpointer(torch.nn.Linear(2, 2)).load(str(path))


# ---- images ----------------------------------------------------------------------------------------------------


def small_test_resize_cfg():
    """The quickstart RetinaNet (detectron2's resize), tiny, its images resized to short side 64, long side <= 96."""
    cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    cfg.MODEL.RETINANET.NORM = ""
    cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = 64, 96
    cfg.INPUT.MIN_SIZE_TRAIN, cfg.INPUT.MAX_SIZE_TRAIN = (64,), 96
    return cfg


def test_an_image_of_extreme_aspect_ratio_is_an_error_naming_it(tmp_path):
    """A 4000 x 3 image crashed deep inside PIL's resize (training, the predictor, demo.py)."""
    cfg = small_test_resize_cfg()
    message = r"an image of 4000 x 3 pixels \(aspect ratio 1333:1\) would be resized to 96 x 0 pixels"
    with pytest.raises(ImageSizeError, match=f"the predictor cannot take {message}"):
        AlrpPredictor(cfg)(np.zeros((3, 4000, 3), np.uint8))
    path = tmp_path / "strip.png"
    Image.fromarray(np.zeros((3, 4000, 3), np.uint8)).save(path)
    record = {"file_name": str(path), "height": 3, "width": 4000, "image_id": 1, "annotations": []}
    mapper = ImageErrorGuard(build_alrp_mapper(cfg, is_train=True))
    with pytest.raises(ImageSizeError, match=f"{path}: {message}"):
        mapper(record)


def test_demo_reports_an_image_of_extreme_aspect_ratio_and_draws_the_others(tmp_path):
    cfg = small_test_resize_cfg()
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.zeros((3, 4000, 3), np.uint8)).save(images / "a_strip.png")
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(images / "b_photo.png")
    written, failed = demo_module.run_demo(cfg, [str(images)], str(tmp_path / "out"))
    assert [path.split("/")[-1] for path in written] == ["b_photo.png"]
    assert [(entry.split("/")[-1], "aspect ratio 1333:1" in reason) for entry, reason in failed] == [
        ("a_strip.png", True)
    ]


def test_a_lazyconfig_evaluation_names_an_image_of_extreme_aspect_ratio(tmp_path):
    """The LazyConfig path's test loader has the YAML path's guard (its resize: short side 128, long side <= 128)."""
    path = tmp_path / "strip.png"
    Image.fromarray(np.zeros((3, 4000, 3), np.uint8)).save(path)
    content = json.loads(Path(coco_file(tmp_path, image_size=(4000, 3), bbox=(10, 0, 40, 3))).read_text())
    content["images"][0]["file_name"] = path.name
    content["categories"] = [{"id": i, "name": f"class {i}"} for i in range(1, 6)]  # the quickstart model's 5
    json_file = tmp_path / "strip.json"
    json_file.write_text(json.dumps(content))
    name = f"strip_{uuid.uuid4().hex[:8]}"
    register_coco_instances(name, {}, str(json_file), str(tmp_path))
    try:
        cfg = LazyConfig.load("configs/quickstart/alrp_retinanet_shapes.py")
        cfg.dataloader.test.dataset.names = name
        cfg.dataloader.test.num_workers = 0
        cfg.train.output_dir = str(tmp_path / "out")
        message = rf"{path}: an image of 4000 x 3 pixels \(aspect ratio 1333:1\) would be resized to 128 x 0 pixels"
        with pytest.raises(ImageSizeError, match=message):
            lazy_test(cfg, torch.nn.Linear(1, 1))  # the loader fails before the model is called
    finally:
        DatasetCatalog.remove(name)


def test_an_exif_rotated_image_with_the_unrotated_size_gets_a_hint(tmp_path):
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when displayed
    Image.fromarray(np.zeros((20, 40, 3), np.uint8)).save(path, exif=exif)
    record = {"file_name": str(path), "height": 20, "width": 40, "image_id": 1, "annotations": []}
    mapper = ImageErrorGuard(build_alrp_mapper(small_test_resize_cfg(), is_train=True))
    with pytest.raises(ValueError, match=rf"{path} is stored as 40 x 20 pixels with EXIF orientation 6.*give width 20"):
        mapper(record)


# ---- evaluation ------------------------------------------------------------------------------------------------


def test_a_detection_with_a_nan_box_is_not_scored(tmp_path):
    name = f"nan_box_{uuid.uuid4().hex[:8]}"
    register_coco_instances(name, {}, coco_file(tmp_path), str(tmp_path))
    try:
        DatasetCatalog.get(name)
        evaluator = COCOLRPEvaluator(name, distributed=False)
        evaluator.reset()
        instances = Instances((SIZE, SIZE))
        instances.pred_boxes = Boxes(torch.tensor([[10.0, 10.0, 50.0, 40.0], [math.nan, 10.0, 50.0, 40.0]]))
        instances.scores = torch.tensor([0.9, 0.8])
        instances.pred_classes = torch.tensor([0, 0])
        evaluator.process([{"image_id": 7}], [{"instances": instances}])
        with pytest.raises(NonFiniteDetectionsError, match=r"1 detection\(s\) of 1 image\(s\) have a NaN or infinite"):
            evaluator.evaluate()
    finally:
        DatasetCatalog.remove(name)
