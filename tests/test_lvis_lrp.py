"""LRP on LVIS (alrp_d2.lrp.evaluate_lvis and ``python -m alrp_d2.lrp --lvis``) against the official LRP-Error fork of
the LVIS API (fixtures of tools/lvis_lrp_reference.py: boxes and masks, not-exhaustive and negative categories, images
without objects or detections, a category without ground truth, one never detected, an ignored object, one of area 0,
an image over the 300-detection cap, the three frequency groups), to 1e-6; bad files named (file, entry, key)."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from alrp_d2.lrp import LVIS_LRP_METRICS, PER_CLASS_KEYS, LVISFileError, evaluate_lvis
from alrp_d2.lrp.__main__ import main

from .lvis_official_cases import LVIS_CASES, lvis_files, official_lvis


def assert_close(actual: float, expected: float, what: str) -> None:
    if math.isnan(expected):
        assert math.isnan(actual), what
    else:
        assert actual == pytest.approx(expected, abs=1e-6), what


def assert_equal_to_official(results, reference) -> None:
    assert results["classes"] == reference["classes"]
    for key in LVIS_LRP_METRICS:
        assert_close(float(results[key]), reference[key], key)
    for key in PER_CLASS_KEYS:
        for category_id, ours, theirs in zip(results["classes"], results[key], reference[key]):
            assert_close(ours, theirs, f"{key} of category {category_id}")


@pytest.mark.parametrize("case", LVIS_CASES)
def test_evaluate_lvis_equals_official(case):
    reference = official_lvis(case)
    assert_equal_to_official(evaluate_lvis(*map(str, lvis_files(case)), reference["iou_type"]), reference)


def test_loaded_content_equals_the_files():
    """Loaded content too, with numpy scores (the detections' checks then scan entry by entry: no error)."""
    gt_file, dt_file = lvis_files("lvis_masks")
    detections = [{**det, "score": np.float64(det["score"])} for det in json.loads(dt_file.read_text())]
    loaded = evaluate_lvis(json.loads(gt_file.read_text()), detections, "segm")
    assert_equal_to_official(loaded, official_lvis("lvis_masks"))


def _contents(case):
    gt_file, dt_file = lvis_files(case)
    return json.loads(gt_file.read_text()), json.loads(dt_file.read_text())


def test_fixtures_hold_the_edge_cases():
    """Each rule of LVIS's evaluation changes the fixture's oLRP: the federated labels, the 300 detections an image,
    the ignored object, the object of area 0 left out; and the fixture has a category without ground truth, one never
    detected (oLRP and FN 100), images without objects or detections and the three frequency groups."""
    gt, dt = _contents("lvis_boxes")
    base = evaluate_lvis(gt, dt)
    exhaustive = copy.deepcopy(gt)
    for image in exhaustive["images"]:
        image["not_exhaustive_category_ids"] = []
    without_negatives = copy.deepcopy(gt)
    for image in without_negatives["images"]:
        image["neg_category_ids"] = []
    not_ignored = copy.deepcopy(gt)
    for ann in not_ignored["annotations"]:
        ann.pop("ignore", None)
    with_area = copy.deepcopy(gt)
    for ann in with_area["annotations"]:
        ann["area"] = ann["area"] or ann["bbox"][2] * ann["bbox"][3]
    for changed in (exhaustive, without_negatives, not_ignored, with_area):
        assert abs(evaluate_lvis(changed, dt)["oLRP"] - base["oLRP"]) > 1e-3
    assert abs(evaluate_lvis(gt, dt, max_detections=None)["oLRP"] - base["oLRP"]) > 1e-3
    assert 0 in base["num_gt_per_class"]
    assert any(olrp == 100.0 and fn == 100.0 for olrp, fn in zip(base["oLRP_per_class"], base["oLRP_FN_per_class"]))
    annotated = {ann["image_id"] for ann in gt["annotations"]}
    detected = {det["image_id"] for det in dt}
    assert any(image["id"] not in annotated for image in gt["images"])
    assert any(image["id"] not in detected for image in gt["images"])
    labelled = {(ann["image_id"], ann["category_id"]) for ann in gt["annotations"]}
    labelled |= {(image["id"], c) for image in gt["images"] for c in image["neg_category_ids"]}
    assert any((det["image_id"], det["category_id"]) not in labelled for det in dt)
    assert set(base["frequencies"]) == {"r", "c", "f"}
    assert all(not math.isnan(base[key]) for key in LVIS_LRP_METRICS)


@pytest.mark.parametrize("case", ["lvis_boxes", "lvis_masks"])
def test_command_json_equals_official(case, capsys):
    reference = official_lvis(case)
    argv = [*map(str, lvis_files(case)), "--lvis", "--iou-type", reference["iou_type"], "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    for key in LVIS_LRP_METRICS:
        assert printed[key] == pytest.approx(reference[key], abs=1e-6), key
    assert printed["thresholds"] == pytest.approx([None if math.isnan(v) else v for v in reference["thresholds"]])


def test_command_table(capsys):
    assert main([*map(str, lvis_files("lvis_boxes")), "--lvis"]) == 0
    out = capsys.readouterr().out
    assert "oLRP_r" in out and "oLRP_large" in out and "threshold" in out
    assert f"{official_lvis('lvis_boxes')['oLRP']:.3f}" in out


GT = {
    "images": [{"id": 1, "width": 20, "height": 20, "neg_category_ids": [], "not_exhaustive_category_ids": []}],
    "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5], "area": 25}],
    "categories": [{"id": 1, "name": "a", "frequency": "f"}],
}
DET = {"image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 4], "score": 0.5}


def _changed(path, value):
    gt = copy.deepcopy(GT)
    entry = gt
    for key in path[:-1]:
        entry = entry[key]
    if value is None:
        del entry[path[-1]]
    else:
        entry[path[-1]] = value
    return gt


@pytest.mark.parametrize(
    "gt, dets, message",
    [
        (_changed(("images", 0, "neg_category_ids"), None), [DET], "images[0] (id 1): 'neg_category_ids' must be"),
        (
            _changed(("images", 0, "not_exhaustive_category_ids"), [7]),
            [DET],
            "images[0] (id 1): 'not_exhaustive_category_ids' must",
        ),
        (_changed(("categories", 0, "frequency"), "x"), [DET], "categories[0] (id 1): 'frequency' must be one of"),
        (_changed(("annotations", 0, "area"), None), [DET], "annotations[0] (id 5): 'area' must be"),
        (_changed(("annotations", 0, "image_id"), 9), [DET], "annotations[0] (id 5): image_id 9 is not an image"),
        (_changed(("annotations", 0, "ignore"), 2), [DET], "annotations[0] (id 5): 'ignore' must be 0 or 1"),
        (GT, [DET, {**DET, "category_id": 3}], "entry 1: category_id 3 is not a category of the ground truth"),
        (GT, [{**DET, "score": float("nan")}], "entry 0: 'score' must be a finite number"),
        (GT, [{**DET, "bbox": [0, 0, -1, 2]}], "entry 0: 'bbox' has a negative width"),
        (GT, {"x": 1}, "LVIS results are a list of detections"),
    ],
)
def test_bad_inputs_are_named(tmp_path, gt, dets, message):
    gt_file, dt_file = tmp_path / "gt.json", tmp_path / "dt.json"
    gt_file.write_text(json.dumps(gt))
    dt_file.write_text(json.dumps(dets))
    with pytest.raises(LVISFileError, match="^" + "(ground truth|detections): .*"):
        evaluate_lvis(gt, dets)
    with pytest.raises(LVISFileError) as error:
        evaluate_lvis(str(gt_file), str(dt_file))
    named = gt_file if message.startswith(("images", "categories", "annotations")) else dt_file
    assert str(error.value).startswith(f"{named}: ") and message in str(error.value)


def test_bad_masks_are_named():
    gt = _changed(("annotations", 0, "segmentation"), [[0, 0, 5, 0, 5, 5]])
    rle = {"size": [10, 20], "counts": "PP"}
    with pytest.raises(LVISFileError, match=r"entry 0: the RLE's size \[10, 20\] is not its image's \[height, width\]"):
        evaluate_lvis(gt, [{**DET, "segmentation": rle}], "segm")
    with pytest.raises(LVISFileError, match="annotations.0. .id 5.: has no 'segmentation'"):
        evaluate_lvis(GT, [], "segm")


def test_command_refuses_a_bad_file_with_one_line(tmp_path, capsys):
    gt_file, dt_file = tmp_path / "gt.json", tmp_path / "dt.json"
    gt_file.write_text(json.dumps(_changed(("categories", 0, "frequency"), None)))
    dt_file.write_text("[]")
    assert main([str(gt_file), str(dt_file), "--lvis"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(gt_file) in err and "categories[0] (id 1): 'frequency'" in err


def test_no_detections_and_bad_arguments():
    results = evaluate_lvis(GT, [])
    assert results["oLRP"] == 100.0 and results["oLRP_FN"] == 100.0 and math.isnan(results["oLRP_loc"])
    assert math.isnan(results["oLRP_r"]) and not math.isnan(results["oLRP_small"])
    with pytest.raises(ValueError, match="max_detections must be an integer >= 1 or None"):
        evaluate_lvis(GT, [DET], max_detections=0)
    with pytest.raises(ValueError, match="iou_type must be one of"):
        evaluate_lvis(GT, [DET], "keypoints")
