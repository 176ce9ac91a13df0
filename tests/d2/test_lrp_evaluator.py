"""COCOLRPEvaluator end to end on the hand-made dataset of test_lrp_metrics, and the LRP-threshold
predictor (threshold file, filtering, and a tiny randomly initialised RetinaNet)."""

from __future__ import annotations

import json
import logging
import math
import uuid

import numpy as np
import pytest
import torch
from detectron2.config import get_cfg
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.engine import DefaultPredictor
from detectron2.structures import Boxes, BoxMode, Instances

from alrp_d2.data.evaluated_images import first_images_dataset
from alrp_d2.evaluation import (
    LRP_THRESHOLDS_FILE,
    COCOLRPEvaluator,
    LRPThresholdPredictor,
    filter_by_class_thresholds,
    load_lrp_thresholds,
)

from ..lrp_cases import (
    CLASS_NAMES,
    HAND_DETECTIONS,
    HAND_EXPECTED_A,
    HAND_EXPECTED_AP90,
    HAND_EXPECTED_SUMMARY,
    HAND_EXPECTED_THRESHOLDS,
    hand_made_coco_dict,
)

PREDICTOR_LOGGER = "alrp_d2.evaluation.lrp_threshold_predictor"


@pytest.fixture()
def hand_made_dataset(tmp_path):
    """The hand-made COCO json registered under a fresh name and loaded once (which sets the
    contiguous class ids in the metadata, as training does)."""
    json_file = tmp_path / "hand_made.json"
    json_file.write_text(json.dumps(hand_made_coco_dict()))
    name = f"lrp_hand_made_{uuid.uuid4().hex}"
    register_coco_instances(name, {}, str(json_file), str(tmp_path))
    DatasetCatalog.get(name)
    return name


def hand_made_outputs(detections=HAND_DETECTIONS):
    """detectron2 model outputs (contiguous class ids, XYXY boxes) for images 1 and 2."""
    inputs, outputs = [], []
    for image_id in (1, 2):
        rows = [(c - 1, b, s) for i, c, b, s in detections if i == image_id]
        instances = Instances((200, 200))
        boxes = torch.tensor([b for _, b, _ in rows], dtype=torch.float32).reshape(-1, 4)
        instances.pred_boxes = Boxes(BoxMode.convert(boxes, BoxMode.XYWH_ABS, BoxMode.XYXY_ABS))
        instances.scores = torch.tensor([s for _, _, s in rows], dtype=torch.float32)
        instances.pred_classes = torch.tensor([c for c, _, _ in rows], dtype=torch.int64)
        inputs.append({"image_id": image_id})
        outputs.append({"instances": instances})
    return inputs, outputs


def evaluate(dataset_name, output_dir=None, use_fast_impl=True, detections=HAND_DETECTIONS):
    evaluator = COCOLRPEvaluator(dataset_name, output_dir=output_dir, distributed=False, use_fast_impl=use_fast_impl)
    evaluator.reset()
    evaluator.process(*hand_made_outputs(detections))
    return evaluator.evaluate()


@pytest.mark.parametrize("use_fast_impl", [True, False], ids=["COCOeval_opt", "pycocotools"])
def test_evaluator_reports_lrp_next_to_ap(hand_made_dataset, tmp_path, use_fast_impl):
    output_dir = tmp_path / "out"
    bbox = evaluate(hand_made_dataset, str(output_dir), use_fast_impl)["bbox"]
    assert {"AP", "AP50", "AP75", "AP-cat_a"} <= set(bbox)
    expected = {**HAND_EXPECTED_SUMMARY, "AP90": HAND_EXPECTED_AP90, "oLRP-cat_a": 66.0, "oLRP-cat_b": 100.0}
    assert {key: bbox[key] for key in expected} == pytest.approx(expected)
    assert "oLRP-cat_c" not in bbox  # no ground truth
    saved = json.loads((output_dir / LRP_THRESHOLDS_FILE).read_text())
    assert saved["model"] is None and saved["task"] == "bbox"  # the evaluator was not given the model
    thresholds = saved["thresholds"]
    # Keyed by category id, with the name alongside.
    assert thresholds == {
        str(i + 1): {"name": name, "threshold": pytest.approx(HAND_EXPECTED_THRESHOLDS[name])}
        for i, name in enumerate(CLASS_NAMES)
    }
    assert thresholds["1"]["threshold"] == pytest.approx(HAND_EXPECTED_A.threshold)


def test_evaluator_without_output_dir_or_predictions(hand_made_dataset, tmp_path):
    assert evaluate(hand_made_dataset)["bbox"]["oLRP"] == pytest.approx(83.0)
    nothing = evaluate(hand_made_dataset, str(tmp_path / "empty"), detections=[])["bbox"]
    assert all(math.isnan(nothing[key]) for key in ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90", "rho"))
    assert not (tmp_path / "empty" / LRP_THRESHOLDS_FILE).exists()


def write_thresholds(tmp_path, content) -> str:
    path = tmp_path / "thresholds.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_load_thresholds_in_class_order(tmp_path):
    path = write_thresholds(tmp_path, {"cat_c": 0.25, "cat_a": 0.5, "cat_b": None})
    assert load_lrp_thresholds(path, CLASS_NAMES) == [0.5, None, 0.25]


@pytest.mark.parametrize(
    "content, error, message",
    [
        ("{not json", ValueError, "not valid JSON"),
        ([0.5, None, 0.2], ValueError, "JSON object"),
        ({"cat_a": 0.5, "cat_b": None}, ValueError, r"missing \['cat_c'\]"),
        ({"cat_a": 0.5, "cat_b": None, "cat_c": 0.1, "dog": 0.3}, ValueError, r"unknown \['dog'\]"),
        ({"cat_a": "0.5", "cat_b": None, "cat_c": 0.1}, ValueError, r"a score in \[0, 1\] \(finite\) or null"),
        ('{"cat_a": NaN, "cat_b": null, "cat_c": 0.1}', ValueError, r"a score in \[0, 1\] \(finite\) or null"),
    ],
)
def test_load_thresholds_rejects_bad_files(tmp_path, content, error, message):
    with pytest.raises(error, match=message):
        load_lrp_thresholds(write_thresholds(tmp_path, content), CLASS_NAMES)


def test_load_thresholds_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_lrp_thresholds(str(tmp_path / "absent.json"), CLASS_NAMES)


def test_filter_by_class_thresholds():
    instances = Instances((10, 10))
    instances.scores = torch.tensor([0.9, 0.5, 0.49, 0.3, 0.99, 0.2])
    instances.pred_classes = torch.tensor([0, 0, 0, 2, 1, 2])
    kept = filter_by_class_thresholds(instances, [0.5, None, 0.25])
    torch.testing.assert_close(kept.scores, torch.tensor([0.9, 0.5, 0.3]))  # the threshold itself is kept
    torch.testing.assert_close(kept.pred_classes, torch.tensor([0, 0, 2]))
    assert len(filter_by_class_thresholds(instances[:0], [0.5, None, 0.25])) == 0
    with pytest.raises(ValueError, match="no threshold"):
        filter_by_class_thresholds(instances, [0.5, None])


def tiny_retinanet_cfg(dataset_name):
    """A small randomly initialised RetinaNet (ResNet-18 FPN) on the CPU, scoring every anchor."""
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = "RetinaNet"
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.BACKBONE.NAME = "build_retinanet_resnet_fpn_backbone"
    cfg.MODEL.RESNETS.DEPTH = 18
    cfg.MODEL.RESNETS.RES2_OUT_CHANNELS = 64
    cfg.MODEL.RESNETS.OUT_FEATURES = ["res3", "res4", "res5"]
    cfg.MODEL.FPN.IN_FEATURES = ["res3", "res4", "res5"]
    cfg.MODEL.FPN.OUT_CHANNELS = 32
    cfg.MODEL.RETINANET.NUM_CLASSES = len(CLASS_NAMES)
    cfg.MODEL.RETINANET.NUM_CONVS = 1
    cfg.MODEL.RETINANET.SCORE_THRESH_TEST = 0.0
    cfg.MODEL.RETINANET.PRIOR_PROB = 0.3
    cfg.INPUT.MIN_SIZE_TEST = 64
    cfg.INPUT.MAX_SIZE_TEST = 64
    cfg.DATASETS.TEST = (dataset_name,)
    return cfg


def test_predictor_keeps_detections_above_their_class_threshold(hand_made_dataset, tmp_path):
    torch.manual_seed(0)
    cfg = tiny_retinanet_cfg(hand_made_dataset)
    path = write_thresholds(tmp_path, {"cat_a": 0.3, "cat_b": None, "cat_c": 0.32})
    predictor = LRPThresholdPredictor(cfg, path)
    image = np.random.default_rng(0).integers(0, 255, size=(64, 64, 3), dtype=np.uint8)
    raw = DefaultPredictor.__call__(predictor, image)["instances"]
    kept = predictor(image)["instances"]
    assert len(raw) > len(kept) > 0
    assert set(kept.pred_classes.tolist()) <= {0, 2}
    expected = filter_by_class_thresholds(raw, [0.3, None, 0.32])
    torch.testing.assert_close(kept.scores, expected.scores)
    torch.testing.assert_close(kept.pred_boxes.tensor, expected.pred_boxes.tensor)


def test_predictor_needs_matching_class_names(hand_made_dataset, tmp_path):
    cfg = tiny_retinanet_cfg(hand_made_dataset)
    with pytest.raises(ValueError, match="do not match"):
        LRPThresholdPredictor(cfg, write_thresholds(tmp_path, {"cat_a": 0.3}))
    cfg.DATASETS.TEST = ()
    with pytest.raises(ValueError, match="DATASETS.TEST is empty"):
        LRPThresholdPredictor(cfg, write_thresholds(tmp_path, {"cat_a": 0.3}))


# ---- empty cases and classes that share a name ---------------------------------------------------


def register_hand_made(tmp_path, change) -> str:
    content = hand_made_coco_dict()
    change(content)
    json_file = tmp_path / f"{uuid.uuid4().hex}.json"
    json_file.write_text(json.dumps(content))
    name = f"lrp_variant_{uuid.uuid4().hex}"
    register_coco_instances(name, {}, str(json_file), str(tmp_path))
    DatasetCatalog.get(name)
    return name


@pytest.mark.parametrize("use_fast_impl", [True, False], ids=["COCOeval_opt", "pycocotools"])
def test_a_test_set_without_ground_truth_gives_nan_with_warnings(tmp_path, use_fast_impl):
    name = register_hand_made(tmp_path, lambda content: content.update(annotations=[]))
    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("detectron2.evaluation.coco_evaluation")
    logger.addHandler(handler)
    try:
        bbox = evaluate(name, str(tmp_path / "out"), use_fast_impl)["bbox"]
    finally:
        logger.removeHandler(handler)
    assert all(math.isnan(bbox[key]) for key in ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90", "rho"))
    assert "oLRP is undefined and reported as NaN: no class has ground truth." in messages
    saved = json.loads((tmp_path / "out" / LRP_THRESHOLDS_FILE).read_text())
    assert [entry["threshold"] for entry in saved["thresholds"].values()] == [None, None, None]


def share_a_name(content) -> None:
    content["categories"][1]["name"] = "cat_a"  # ids 1 and 2 are both "cat_a"


def test_classes_that_share_a_name_keep_their_own_results_and_thresholds(tmp_path):
    name = register_hand_made(tmp_path, share_a_name)
    bbox = evaluate(name, str(tmp_path / "out"))["bbox"]
    assert bbox["oLRP-cat_a (id 1)"] == pytest.approx(66.0) and bbox["oLRP-cat_a (id 2)"] == pytest.approx(100.0)
    path = str(tmp_path / "out" / LRP_THRESHOLDS_FILE)
    saved = json.loads(open(path).read())["thresholds"]
    assert saved["1"] == {"name": "cat_a", "threshold": pytest.approx(0.5)} and saved["2"]["threshold"] is None
    assert load_lrp_thresholds(path, ["cat_a", "cat_a", "cat_c"], [1, 2, 3]) == [pytest.approx(0.5), None, None]
    cfg = tiny_retinanet_cfg(name)
    assert LRPThresholdPredictor(cfg, path).class_thresholds == [pytest.approx(0.5), None, None]


def test_a_name_keyed_file_is_refused_when_names_are_shared(tmp_path):
    path = write_thresholds(tmp_path, {"cat_a": 0.3, "cat_c": 0.2})
    with pytest.raises(ValueError, match=r"keys its thresholds by class name.*several classes named \['cat_a'\]"):
        load_lrp_thresholds(path, ["cat_a", "cat_a", "cat_c"], [1, 2, 3])


@pytest.mark.parametrize(
    "content, message",
    [
        ({"1": {"name": "cat_b", "threshold": 0.5}, "2": {"name": "cat_a", "threshold": None},
          "3": {"name": "cat_c", "threshold": None}}, "id 1 is 'cat_b' in the file but 'cat_a' in the dataset"),
        ({"1": {"name": "cat_a", "threshold": 0.5}, "3": {"name": "cat_c", "threshold": None}}, r"missing \[2\]"),
        ({"x": {"name": "cat_a", "threshold": 0.5}}, "key 'x' is not a category id"),
        ({"1": {"name": "cat_a", "threshold": 0.5}, "cat_b": 0.2}, "mixes id-keyed entries"),
    ],
)  # fmt: skip
def test_id_keyed_files_must_belong_to_the_classes(tmp_path, content, message):
    with pytest.raises(ValueError, match=message):
        load_lrp_thresholds(write_thresholds(tmp_path, content), CLASS_NAMES, [1, 2, 3])


def box_mask(box, size=200) -> np.ndarray:
    """The pixels of an integer XYWH box."""
    x, y, w, h = (int(v) for v in box)
    mask = np.zeros((size, size), dtype=bool)
    mask[y : y + h, x : x + w] = True
    return mask


@pytest.mark.parametrize("use_fast_impl", [True, False], ids=["COCOeval_opt", "pycocotools"])
def test_segm_lrp_with_box_shaped_masks_equals_bbox_lrp(tmp_path, use_fast_impl):
    """Masks filling integer boxes have the boxes' IoUs: the segm LRP metrics and thresholds equal
    the bbox ones (the matching, the components, rho and AP90 all come from the masks' IoUs)."""
    from pycocotools import mask as mask_util

    def with_masks(content) -> None:
        for annotation in content["annotations"]:
            rle = mask_util.encode(np.asfortranarray(box_mask(annotation["bbox"])))
            annotation["segmentation"] = {"size": rle["size"], "counts": rle["counts"].decode()}

    name = register_hand_made(tmp_path, with_masks)
    detections = [(i, c, [round(v) for v in b], s) for i, c, b, s in HAND_DETECTIONS]
    inputs, outputs = hand_made_outputs(detections)
    for output, image_id in zip(outputs, (1, 2)):
        boxes = [b for i, _, b, _ in detections if i == image_id]
        output["instances"].pred_masks = torch.from_numpy(np.stack([box_mask(b) for b in boxes]))
    evaluator = COCOLRPEvaluator(
        name, tasks=("bbox", "segm"), output_dir=str(tmp_path / "out"), distributed=False, use_fast_impl=use_fast_impl
    )
    evaluator.reset()
    evaluator.process(inputs, outputs)
    results = evaluator.evaluate()
    keys = ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90", "rho", "oLRP-cat_a", "oLRP-cat_b")
    assert {k: results["segm"][k] for k in keys} == pytest.approx({k: results["bbox"][k] for k in keys})
    assert results["segm"]["oLRP-cat_a"] != pytest.approx(100.0)  # the masks do match
    bbox_thresholds = json.loads((tmp_path / "out" / LRP_THRESHOLDS_FILE).read_text())
    segm_thresholds = json.loads((tmp_path / "out" / "lrp_optimal_thresholds_segm.json").read_text())
    assert segm_thresholds["task"] == "segm" and bbox_thresholds["task"] == "bbox"
    assert segm_thresholds["thresholds"] == bbox_thresholds["thresholds"]


def warnings_of(logger_name: str, call):
    """``call()``'s result and the warnings its logger ``logger_name`` emitted."""
    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        return call(), messages
    finally:
        logger.removeHandler(handler)


def test_threshold_file_records_its_images_and_a_subset_warns(hand_made_dataset, tmp_path):
    """All images: the file says 2 of 2 and loads quietly. TEST.MAX_IMAGES 1 (first_images_dataset): 1 of the 2
    images of the dataset cut from, and the loader and the predictor warn."""
    evaluate(hand_made_dataset, str(tmp_path / "all"))
    path = str(tmp_path / "all" / LRP_THRESHOLDS_FILE)
    assert json.loads(open(path).read())["images"] == {"dataset": hand_made_dataset, "evaluated": 2, "of": 2}
    _, messages = warnings_of(PREDICTOR_LOGGER, lambda: load_lrp_thresholds(path, CLASS_NAMES, [1, 2, 3]))
    assert not any("images of" in m for m in messages)

    subset = first_images_dataset(hand_made_dataset, 1, "TEST.MAX_IMAGES")
    evaluator = COCOLRPEvaluator(subset, output_dir=str(tmp_path / "first"), distributed=False)
    evaluator.reset()
    inputs, outputs = hand_made_outputs()
    evaluator.process(inputs[:1], outputs[:1])
    evaluator.evaluate()
    path = str(tmp_path / "first" / LRP_THRESHOLDS_FILE)
    assert json.loads(open(path).read())["images"] == {"dataset": hand_made_dataset, "evaluated": 1, "of": 2}
    expected = f"computed on 1 of the 2 images of '{hand_made_dataset}'"
    _, messages = warnings_of(PREDICTOR_LOGGER, lambda: load_lrp_thresholds(path, CLASS_NAMES, [1, 2, 3]))
    assert any(expected in m for m in messages), messages
    _, messages = warnings_of(
        PREDICTOR_LOGGER, lambda: LRPThresholdPredictor(tiny_retinanet_cfg(hand_made_dataset), path)
    )
    assert any(expected in m for m in messages), messages


@pytest.mark.parametrize("images", [{"evaluated": 3, "of": 2}, {"evaluated": "1", "of": 2}, [1, 2]])
def test_a_bad_images_record_is_refused(tmp_path, images):
    thresholds = {str(i + 1): {"name": name, "threshold": None} for i, name in enumerate(CLASS_NAMES)}
    path = write_thresholds(tmp_path, {"model": None, "task": "bbox", "images": images, "thresholds": thresholds})
    with pytest.raises(ValueError, match="'images' must be"):
        load_lrp_thresholds(path, CLASS_NAMES, [1, 2, 3])
