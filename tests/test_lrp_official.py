"""alrp_d2.lrp against the official LRP-Error code (fixtures of tools/lrp_reference.py: boxes and masks, crowds, a class
without ground truth, a class never detected, images without detections or objects), to 1e-6: evaluate_coco on the
COCO files and the LRP metric object on the same detections as per-image dicts."""

from __future__ import annotations

import math

import pytest

from alrp_d2.lrp import LRP, PER_CLASS_KEYS, evaluate_coco

from .lrp_official_cases import CASES, by_class, coco_pair, metric_inputs, official

MEANS = ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN")


def assert_close(actual: float, expected: float, what: str) -> None:
    if math.isnan(expected):
        assert math.isnan(actual), what
    else:
        assert actual == pytest.approx(expected, abs=1e-6), what


def assert_equal_to_official(results, reference) -> None:
    for key in MEANS:
        assert_close(float(results[key]), reference[key], key)
    for key in PER_CLASS_KEYS:
        ours, theirs = by_class(results, key), by_class(reference, key)
        for category_id, expected in theirs.items():
            # A class without ground truth is in the file (evaluate_coco) or in the detections (LRP).
            assert_close(ours.get(category_id, math.nan), expected, f"{key} of class {category_id}")


@pytest.mark.parametrize("case", CASES)
def test_evaluate_coco_equals_official(case):
    reference = official(case)
    results = evaluate_coco(*coco_pair(case), iou_type=reference["iou_type"])
    assert results["classes"] == reference["classes"]
    assert_equal_to_official(results, reference)


@pytest.mark.parametrize("case", CASES)
def test_metric_object_equals_official(case):
    reference = official(case)
    metric = LRP(iou_type=reference["iou_type"])
    preds, target = metric_inputs(case)
    metric.update(preds[:3], target[:3])
    metric.update(preds[3:], target[3:])
    results = metric.compute()
    assert_equal_to_official(results, reference)
    expected = evaluate_coco(*coco_pair(case), iou_type=reference["iou_type"])
    assert_close(float(results["AP90"]), expected["AP90"], "AP90")
    assert_close(float(results["rho"]), expected["rho"], "rho")


def test_fixtures_hold_the_edge_cases():
    """Each case has a class without ground truth and one with ground truth but no true positive (oLRP 1, FN 1);
    crowds, images without detections and images without objects."""
    for case in CASES:
        reference = official(case)
        assert any(math.isnan(v) for v in reference["oLRP_per_class"]), case
        assert any(
            v == 100.0 and f == 100.0 for v, f in zip(reference["oLRP_per_class"], reference["oLRP_FN_per_class"])
        )
        coco_gt, coco_dt = coco_pair(case)
        assert any(a["iscrowd"] for a in coco_gt.anns.values()), case
        assert set(coco_gt.getImgIds()) - {a["image_id"] for a in coco_dt.anns.values()}, case
        assert set(coco_gt.getImgIds()) - {a["image_id"] for a in coco_gt.anns.values()}, case
