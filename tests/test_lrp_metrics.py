"""LRP metrics (alrp_d2.lrp.lrp_metric, .coco_matching) against hand-computed values, a
brute-force reference over all score thresholds, and pycocotools' own matching. Needs numpy and pycocotools only."""

from __future__ import annotations

import contextlib
import io
from typing import Dict, List, Tuple

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from alrp_d2.lrp.coco_matching import detection_matches, matches_from_eval_imgs, matches_from_iou_matrices
from alrp_d2.lrp.lrp_metric import (
    DetectionMatches,
    OptimalLRP,
    average_ranks,
    evaluate_classes,
    optimal_lrp,
    rank_correlation,
    summarise,
)

from .lrp_cases import (
    HAND_EXPECTED_A,
    HAND_EXPECTED_SUMMARY,
    hand_made_coco_dict,
    hand_made_cocoeval,
    run_cocoeval,
)


def assert_optimal_lrp_equal(actual: OptimalLRP, expected: OptimalLRP) -> None:
    for field in ("olrp", "loc", "fp", "fn", "threshold"):
        value, reference = getattr(actual, field), getattr(expected, field)
        if reference is None:
            assert value is None, field
        else:
            assert value == pytest.approx(reference, rel=1e-9, abs=1e-12), field


def assert_matches_equal(a: DetectionMatches, b: DetectionMatches) -> None:
    for field in ("class_index", "scores", "is_tp", "ious", "num_gt"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


# ---------------------------------------------------------------------------------------------
# One class, given match results.
# ---------------------------------------------------------------------------------------------


def test_single_class_hand_computed():
    """TP(0.9), FP, TP(0.7), FP, TP(0.6) by score, 4 GTs: LRP 0.8, 0.84, 0.76*, 0.8, 0.7667."""
    result = optimal_lrp(
        scores=np.array([0.6, 0.9, 0.8, 0.5, 0.7]),
        is_tp=np.array([False, True, False, True, True]),
        ious=np.array([0.0, 0.9, 0.0, 0.6, 0.7]),
        num_gt=4,
    )
    assert_optimal_lrp_equal(result, OptimalLRP(olrp=0.76, loc=0.2, fp=1 / 3, fn=0.5, threshold=0.7))


def test_tied_scores_are_cut_only_after_the_whole_run():
    """TP(IoU 1) and FP tied at 0.9, then an FP: inside the run LRP would be 0 (1 TP, 1 GT);
    the valid cuts give 1/2 after the run and 2/3 after the last FP."""
    result = optimal_lrp(np.array([0.9, 0.9, 0.2]), np.array([True, False, False]), np.array([1.0, 0.0, 0.0]), 1)
    assert_optimal_lrp_equal(result, OptimalLRP(olrp=0.5, loc=0.0, fp=0.5, fn=0.0, threshold=0.9))
    reversed_ties = optimal_lrp(np.array([0.9, 0.9, 0.2]), np.array([False, True, False]), np.array([0.0, 1.0, 0.0]), 1)
    assert reversed_ties == result


def test_class_without_true_positive_has_olrp_one():
    no_detection = optimal_lrp(np.zeros(0), np.zeros(0, bool), np.zeros(0), num_gt=3)
    only_fps = optimal_lrp(np.array([0.9, 0.4]), np.array([False, False]), np.zeros(2), num_gt=3)
    for result in (no_detection, only_fps):
        assert_optimal_lrp_equal(result, OptimalLRP(olrp=1.0, loc=None, fp=None, fn=1.0, threshold=None))


def test_perfect_detector_has_olrp_zero():
    result = optimal_lrp(np.array([0.9, 0.8, 0.1]), np.array([True, True, False]), np.array([1.0, 1.0, 0.0]), 2)
    assert_optimal_lrp_equal(result, OptimalLRP(olrp=0.0, loc=0.0, fp=0.0, fn=0.0, threshold=0.8))


@pytest.mark.parametrize(
    "scores, is_tp, ious, num_gt, message",
    [
        ([0.5], [True], [0.7], 0, "at least one ground truth"),
        ([0.5, 0.4], [True, True], [0.7, 0.8], 1, "true positives for only"),
        ([np.nan], [False], [0.0], 1, "finite"),
        ([0.5], [True], [0.4], 1, "IoUs must lie"),
        ([0.5], [True, False], [0.7], 1, "differ in length"),
    ],
)
def test_optimal_lrp_rejects_bad_input(scores, is_tp, ious, num_gt, message):
    with pytest.raises(ValueError, match=message):
        optimal_lrp(np.array(scores), np.array(is_tp), np.array(ious), num_gt)


# ---------------------------------------------------------------------------------------------
# Brute force over all thresholds.
# ---------------------------------------------------------------------------------------------


def brute_force_olrp(
    scores: np.ndarray, is_tp: np.ndarray, ious: np.ndarray, num_gt: int, tau: float = 0.5
) -> OptimalLRP:
    """For every distinct score threshold, keep the detections at or above it, count TP/FP/FN
    and sum the TP localisation errors; the minimum LRP (the empty set has LRP 1) wins, the
    highest threshold among equal minima."""
    best = OptimalLRP(olrp=1.0, loc=None, fp=None, fn=1.0, threshold=None)
    for threshold in sorted(set(scores.tolist()), reverse=True):
        kept = scores >= threshold
        tp, fp = int(np.sum(kept & is_tp)), int(np.sum(kept & ~is_tp))
        fn = num_gt - tp
        loc_errors = 1.0 - ious[kept & is_tp]
        lrp = (float(np.sum(loc_errors / (1 - tau))) + fp + fn) / (tp + fp + fn)
        if lrp < best.olrp:
            best = OptimalLRP(
                olrp=lrp, loc=float(np.mean(loc_errors)), fp=fp / (tp + fp), fn=fn / num_gt, threshold=threshold
            )
    return best


def random_class(seed: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(0, 300))
    decimals = [1, 2, 6][seed % 3]  # many, some or hardly any tied scores
    scores = np.round(rng.random(size), decimals)
    is_tp = rng.random(size) < rng.random()
    ious = np.where(is_tp, rng.uniform(0.5, 1.0, size), 0.0)
    num_gt = int(is_tp.sum()) + int(rng.integers(1 if not is_tp.any() else 0, 50))
    return scores, is_tp, ious, num_gt


@pytest.mark.parametrize("seed", range(60))
def test_optimal_lrp_matches_brute_force(seed):
    scores, is_tp, ious, num_gt = random_class(seed)
    assert_optimal_lrp_equal(optimal_lrp(scores, is_tp, ious, num_gt), brute_force_olrp(scores, is_tp, ious, num_gt))


# ---------------------------------------------------------------------------------------------
# Rank correlation.
# ---------------------------------------------------------------------------------------------


def test_average_ranks_share_ties():
    np.testing.assert_array_equal(average_ranks(np.array([0.3, 0.1, 0.3, 0.2, 0.3])), [4, 1, 4, 2, 4])


def test_rank_correlation_hand_computed_and_undefined_cases():
    assert rank_correlation(np.array([0.9, 0.8, 0.5]), np.array([0.8, 0.95, 0.6])) == pytest.approx(0.5)
    assert rank_correlation(np.array([0.9, 0.8]), np.array([0.6, 0.7])) == pytest.approx(-1.0)
    assert rank_correlation(np.array([0.9]), np.array([0.6])) is None
    assert rank_correlation(np.array([0.9, 0.9, 0.9]), np.array([0.6, 0.7, 0.8])) is None
    assert rank_correlation(np.array([0.1, 0.9]), np.array([0.6, 0.6])) is None


@pytest.mark.parametrize("seed", range(10))
def test_rank_correlation_matches_scipy_spearman(seed):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(seed)
    scores = np.round(rng.random(50), 1)
    ious = np.round(0.5 + 0.5 * (0.5 * scores + 0.5 * rng.random(50)), 2)
    assert rank_correlation(scores, ious) == pytest.approx(stats.spearmanr(scores, ious).correlation, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Through pycocotools' COCOeval.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", [matches_from_eval_imgs, matches_from_iou_matrices])
def test_hand_made_dataset(reader):
    matches = reader(hand_made_cocoeval())
    np.testing.assert_array_equal(matches.num_gt, [4, 1, 0])
    scores, is_tp, ious = matches.of_class(0)
    order = np.argsort(-scores, kind="stable")
    np.testing.assert_allclose(scores[order], [0.9, 0.8, 0.8, 0.5, 0.4, 0.3])  # crowd detection left out
    np.testing.assert_array_equal(is_tp[order], [True, True, False, True, False, False])
    np.testing.assert_allclose(ious[order], [0.8, 0.95, 0.0, 0.6, 0.0, 0.0])

    classes = evaluate_classes(matches)
    assert_optimal_lrp_equal(classes[0].lrp, HAND_EXPECTED_A)
    assert classes[0].rho == pytest.approx(0.5)
    assert_optimal_lrp_equal(classes[1].lrp, OptimalLRP(olrp=1.0, loc=None, fp=None, fn=1.0, threshold=None))
    assert classes[1].rho is None
    assert classes[2].num_gt == 0 and classes[2].lrp is None and classes[2].rho is None
    assert summarise(classes) == pytest.approx(HAND_EXPECTED_SUMMARY)


def test_detection_matches_reuses_eval_imgs():
    coco_eval = hand_made_cocoeval()
    assert_matches_equal(detection_matches(coco_eval), matches_from_eval_imgs(coco_eval))
    coco_eval.evalImgs = []  # as after COCOeval_opt, which keeps no Python evalImgs
    assert_matches_equal(detection_matches(coco_eval), matches_from_eval_imgs(hand_made_cocoeval()))


def test_regular_ground_truth_is_preferred_to_a_crowd():
    """A regular GT inside a crowd: the first detection takes the regular GT although its crowd
    IoU is higher, the duplicate falls on the crowd (ignored), a third box only on the crowd too."""
    gt = {
        "images": [{"id": 1, "width": 100, "height": 100}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 60, 60], "area": 3600, "iscrowd": 1},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 10, 10], "area": 100, "iscrowd": 0},
        ],
        "categories": [{"id": 1, "name": "a"}],
    }
    detections = [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 10, 8], "score": 0.9},
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 10, 7], "score": 0.8},
        {"image_id": 1, "category_id": 1, "bbox": [30, 30, 10, 10], "score": 0.7},
    ]
    coco_eval = run_cocoeval(gt, detections)
    for reader in (matches_from_eval_imgs, matches_from_iou_matrices):
        matches = reader(coco_eval)
        np.testing.assert_allclose(matches.scores, [0.9])
        np.testing.assert_array_equal(matches.is_tp, [True])
        np.testing.assert_allclose(matches.ious, [0.8])
        np.testing.assert_array_equal(matches.num_gt, [1])


def random_coco(seed: int, num_images: int = 25, num_classes: int = 4) -> Tuple[Dict, List[Dict]]:
    """Random ground truths (some crowds, on odd seeds clustered so that boxes overlap a lot)
    with several jittered detections each, random boxes, and scores with ties."""
    rng = np.random.default_rng(seed)
    spread = 20 if seed % 2 else 60
    images, annotations, detections = [], [], []
    for image_id in range(1, num_images + 1):
        images.append({"id": image_id, "width": 100, "height": 100})
        for _ in range(int(rng.integers(0, 8))):
            box = np.concatenate([rng.uniform(0, spread, 2), rng.uniform(5, 40, 2)])
            category = int(rng.integers(1, num_classes + 1))
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": category,
                    "bbox": box.tolist(),
                    "area": float(box[2] * box[3]),
                    "iscrowd": int(rng.random() < 0.15),
                }
            )
            for _ in range(int(rng.integers(0, 4))):
                jitter = np.concatenate([rng.normal(0, 3, 2), box[2:] * np.exp(rng.normal(0, 0.15, 2))])
                detections.append(
                    {
                        "image_id": image_id,
                        "category_id": category,
                        "bbox": [*(box[:2] + jitter[:2]), *jitter[2:]],
                        "score": 0.0,
                    }
                )
        for _ in range(int(rng.integers(0, 6))):
            box = np.concatenate([rng.uniform(0, spread, 2), rng.uniform(5, 40, 2)])
            detections.append(
                {
                    "image_id": image_id,
                    "category_id": int(rng.integers(1, num_classes + 1)),
                    "bbox": box.tolist(),
                    "score": 0.0,
                }
            )
    for detection in detections:
        detection["score"] = float(np.round(rng.random(), 1))
    categories = [{"id": c, "name": f"c{c}"} for c in range(1, num_classes + 1)]
    return {"images": images, "annotations": annotations, "categories": categories}, detections


@pytest.mark.parametrize("seed", range(16))
def test_vectorised_matching_equals_pycocotools_and_brute_force(seed):
    """The reassignment on COCOeval's IoU matrices (the COCOeval_opt route) reproduces
    pycocotools' own evalImgs matching, also with maxDets cutting detections (odd seeds); the
    per-class oLRP equals the brute force on those matches."""
    gt, detections = random_coco(seed)
    coco_eval = run_cocoeval(gt, detections, max_dets=(1, 3, 5) if seed % 2 else (1, 10, 100))
    from_eval_imgs = matches_from_eval_imgs(coco_eval)
    assert_matches_equal(matches_from_iou_matrices(coco_eval), from_eval_imgs)
    for class_index, result in enumerate(evaluate_classes(from_eval_imgs)):
        num_gt = int(from_eval_imgs.num_gt[class_index])
        if num_gt == 0:
            assert result.lrp is None
            continue
        expected = brute_force_olrp(*from_eval_imgs.of_class(class_index), num_gt)
        assert_optimal_lrp_equal(result.lrp, expected)


def test_no_detection_of_a_class_with_ground_truth():
    """Only a detection of cat_c (no ground truth): every class with ground truth has oLRP 1 and
    misses all its ground truths (FN 1); the other components are undefined (NaN in the summary)."""
    detections = [{"image_id": 1, "category_id": 3, "bbox": [0, 30, 10, 10], "score": 0.7}]
    coco_eval = run_cocoeval(hand_made_coco_dict(), detections)
    for reader in (matches_from_eval_imgs, matches_from_iou_matrices):
        classes = evaluate_classes(reader(coco_eval))
        assert [None if c.lrp is None else c.lrp.olrp for c in classes] == [1.0, 1.0, None]
        summary = summarise(classes)
        assert summary["oLRP"] == summary["oLRP_FN"] == 100.0
        assert all(np.isnan(summary[key]) for key in ("oLRP_loc", "oLRP_FP", "rho"))


def test_summary_of_no_ground_truth_is_nan():
    empty = DetectionMatches(
        class_index=np.array([0]),
        scores=np.array([0.5]),
        is_tp=np.array([False]),
        ious=np.zeros(1),
        num_gt=np.array([0]),
    )
    summary = summarise(evaluate_classes(empty))
    assert set(summary) == {"oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "rho"}
    assert all(np.isnan(value) for value in summary.values())


def test_cocoeval_must_have_run():
    coco_gt = COCO()
    coco_gt.dataset = hand_made_coco_dict()
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt.createIndex()
        coco_eval = COCOeval(
            coco_gt, coco_gt.loadRes([{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1.0}]), "bbox"
        )
    with pytest.raises(ValueError, match="evaluate"):
        detection_matches(coco_eval)
    coco_eval.params.useCats = 0
    with pytest.raises(ValueError, match="useCats"):
        detection_matches(coco_eval)
