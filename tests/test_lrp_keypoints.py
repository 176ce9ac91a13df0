"""Keypoint LRP beyond the official fixtures: OKS equal to pycocotools' ``COCOeval.computeOks`` on every pair, sigmas
per category, COCOeval's 20 detections per image, the metric object's defaults and its errors naming the input."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest
import torch
from pycocotools.cocoeval import COCOeval

from alrp_d2.lrp import LRP, evaluate_coco
from alrp_d2.lrp.keypoint_similarity import COCO_PERSON_SIGMAS, keypoint_similarities

from .lrp_official_cases import KEYPOINTS, by_class, coco_pair


def _pycocotools_oks(case: str):
    coco_gt, coco_dt = coco_pair(case)
    coco_eval = COCOeval(coco_gt, coco_dt, "keypoints")
    with contextlib.redirect_stdout(io.StringIO()):
        coco_eval.evaluate()
    return coco_eval


@pytest.mark.parametrize("case", ["keypoints", "keypoints_tied"])
def test_oks_equals_pycocotools(case):
    """Every (detection, ground truth) OKS of COCOeval's matrices: labelled keypoints, unlabelled ones, crowds and
    objects without labelled keypoints (the doubled box)."""
    coco_eval = _pycocotools_oks(case)
    pairs, without_labelled = 0, 0
    for (image_id, category_id), expected in coco_eval.ious.items():
        if len(expected) == 0:
            continue
        dts = sorted(coco_eval._dts[image_id, category_id], key=lambda d: -d["score"])[:20]  # stable, as mergesort
        gts = coco_eval._gts[image_id, category_id]
        det_xy = np.asarray([d["keypoints"] for d in dts], dtype=np.float64).reshape(-1, KEYPOINTS, 3)[:, :, :2]
        gt_kp = np.asarray([g["keypoints"] for g in gts], dtype=np.float64).reshape(-1, KEYPOINTS, 3)
        rows, cols = np.divmod(np.arange(len(dts) * len(gts)), len(gts))
        oks = keypoint_similarities(
            det_xy[rows],
            gt_kp[cols],
            np.asarray([g["bbox"] for g in gts], dtype=np.float64)[cols],
            np.asarray([g["area"] for g in gts], dtype=np.float64)[cols],
            np.tile(COCO_PERSON_SIGMAS, (len(rows), 1)),
        )
        np.testing.assert_allclose(oks.reshape(len(dts), len(gts)), expected, rtol=0, atol=1e-12)
        pairs += len(rows)
        without_labelled += int(np.sum(gt_kp[cols, :, 2].max(axis=1) == 0))
    assert pairs > 50 and without_labelled > 0


def test_sigmas_per_category():
    """A mapping gives each category its own sigmas: each class's results are those of its sigmas given to all."""
    coco_gt, coco_dt = coco_pair("keypoints")
    sigmas = {c: COCO_PERSON_SIGMAS * (1 + 0.5 * i) for i, c in enumerate(sorted(coco_gt.getCatIds()))}
    mixed = evaluate_coco(coco_gt, coco_dt, "keypoints", keypoint_sigmas=sigmas)
    for category_id, own in sigmas.items():
        alone = evaluate_coco(coco_gt, coco_dt, "keypoints", keypoint_sigmas=own.tolist())
        for key in ("oLRP_per_class", "thresholds"):
            a, b = by_class(mixed, key)[category_id], by_class(alone, key)[category_id]
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12), (key, category_id)
    assert by_class(mixed, "oLRP_per_class") != by_class(evaluate_coco(coco_gt, coco_dt, "keypoints"), "oLRP_per_class")


def _person(offset: float = 0.0):
    """One object's keypoints on a line, all labelled, the box around them."""
    xy = torch.stack([torch.arange(KEYPOINTS, dtype=torch.float64) * 2 + 10, torch.full((KEYPOINTS,), 20.0)], dim=1)
    return torch.cat([xy + offset, torch.full((KEYPOINTS, 1), 2.0)], dim=1)


def test_keypoints_keep_cocoeval_20_detections():
    """21 detections of one class on an image: the lowest-scored, the only hit, is cut as COCOeval cuts it."""
    far = [_person(500.0 + i) for i in range(20)]
    preds = [
        {"keypoints": torch.stack([*far, _person()]), "scores": torch.linspace(0.9, 0.5, 21), "labels": torch.zeros(21)}
    ]
    target = [
        {"keypoints": _person()[None], "boxes": torch.tensor([[10.0, 20.0, 42.0, 21.0]]), "labels": torch.zeros(1)}
    ]
    default, more = LRP(iou_type="keypoints"), LRP(iou_type="keypoints", max_detections=21)
    default.update(preds, target)
    more.update(preds, target)
    assert float(default.compute()["oLRP"]) == 100.0
    assert float(more.compute()["oLRP"]) < 100.0


def test_target_area_defaults_to_the_box():
    preds = [{"keypoints": _person(0.4)[None, :, :2], "scores": torch.tensor([0.7]), "labels": torch.tensor([3])}]
    boxes = torch.tensor([[10.0, 15.0, 42.0, 25.0]])
    results = []
    for extra in ({}, {"area": torch.tensor([320.0])}, {"area": torch.tensor([2.0])}):
        metric = LRP(iou_type="keypoints")
        metric.update(preds, [{"keypoints": _person()[None], "boxes": boxes, "labels": torch.tensor([3]), **extra}])
        results.append(float(metric.compute()["oLRP_loc"]))
    assert results[0] == results[1] != results[2]


def test_sigmas_need_keypoints():
    with pytest.raises(ValueError, match="keypoint_sigmas are for iou_type='keypoints', not 'bbox'"):
        LRP(keypoint_sigmas=[0.1])
    with pytest.raises(ValueError, match="not 'segm'"):
        evaluate_coco(*coco_pair("keypoints"), "segm", keypoint_sigmas=[0.1])


@pytest.mark.parametrize(
    "kwargs, pred, truth, message",
    [
        ({}, {"keypoints": torch.zeros(1, 5, 3)}, {}, r"preds\[0\]\['keypoints'\] must have shape \(1, 17, 2 or 3\)"),
        (
            {},
            {},
            {"keypoints": torch.zeros(1, KEYPOINTS, 2)},
            r"target\[0\]\['keypoints'\] must have shape \(1, 17, 3\)",
        ),
        ({}, {}, {"boxes": None}, r"target\[0\] has no 'boxes'"),
        ({}, {"keypoints": torch.full((1, KEYPOINTS, 3), math.nan)}, {}, r"preds\[0\]\['keypoints'\] holds NaN"),
        ({}, {}, {"area": torch.tensor([-1.0])}, r"target\[0\]\['area'\] must hold a finite area >= 0"),
        ({"keypoint_sigmas": [0.1, -0.2]}, {}, {}, "keypoint_sigmas must be a non-empty sequence of positive"),
        ({"keypoint_sigmas": {1: [0.1], 2: [0.1, 0.2]}}, {}, {}, "the same number of keypoints"),
        ({"keypoint_sigmas": {7: COCO_PERSON_SIGMAS}}, {}, {}, r"no sigmas for the classes \[1\]"),
    ],
)
def test_bad_keypoint_inputs_are_named(kwargs, pred, truth, message):
    preds = {"keypoints": _person()[None], "scores": torch.tensor([0.5]), "labels": torch.tensor([1]), **pred}
    target = {
        "keypoints": _person()[None],
        "boxes": torch.tensor([[10.0, 20.0, 42.0, 21.0]]),
        "labels": torch.tensor([1]),
    }
    target = {key: value for key, value in {**target, **truth}.items() if value is not None}
    with pytest.raises(ValueError, match=message):
        metric = LRP(iou_type="keypoints", **kwargs)
        metric.update([preds], [target])
        metric.compute()
