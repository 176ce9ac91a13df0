"""Optimal LRP and the classification/localisation rank correlation (pure numpy).

LRP (Oksuz et al., "Localization Recall Precision (LRP): A New Performance Metric for Object
Detection", ECCV 2018; "One Metric to Measure them All: Localisation Recall Precision (LRP) for
Evaluating Visual Detection Tasks", TPAMI 2021, Eq. 1-2), for the detections of one class kept
above a score threshold::

    LRP = (sum_{TP} (1 - IoU) / (1 - tau) + N_FP + N_FN) / (N_TP + N_FP + N_FN)

with ``N_FN = N_GT - N_TP`` and the TP validation threshold ``tau = 0.5``. The optimal LRP
(oLRP) of a class is the minimum of LRP over the score thresholds; its components are the mean
``1 - IoU`` of the TPs, ``N_FP / (N_TP + N_FP)`` and ``N_FN / N_GT`` at that threshold.

The input is a :class:`DetectionMatches` (TP/FP flags, scores and IoUs of every detection);
:mod:`.matching` computes it, :mod:`.coco_matching` reads it out of a COCOeval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

LRP_TAU = 0.5


@dataclass(frozen=True)
class DetectionMatches:
    """COCO matching results at one IoU threshold, one entry per detection that is a TP or an
    FP (detections matched to crowd/ignored ground truths are left out, as in COCO), pooled
    over all images. ``ious`` holds the IoU with the matched ground truth (0 for FPs)."""

    class_index: np.ndarray
    scores: np.ndarray
    is_tp: np.ndarray
    ious: np.ndarray
    num_gt: np.ndarray

    def of_class(self, class_index: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(scores, is_tp, ious)`` of one class."""
        mask = self.class_index == class_index
        return self.scores[mask], self.is_tp[mask], self.ious[mask]

    def per_class(self) -> List[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(scores, is_tp, ious)`` of every class (index ``0 .. len(num_gt) - 1``), each in the given order; one
        sort for all classes instead of a pass per class."""
        order = np.argsort(self.class_index, kind="stable")
        bounds = np.searchsorted(self.class_index[order], np.arange(len(self.num_gt) + 1))
        scores, is_tp, ious = self.scores[order], self.is_tp[order], self.ious[order]
        return [(scores[a:b], is_tp[a:b], ious[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


@dataclass(frozen=True)
class OptimalLRP:
    """oLRP of one class with its components and LRP-optimal score threshold (detections with
    ``score >= threshold`` are kept). A class without a true positive at any threshold has
    ``olrp == 1`` and ``fn == 1`` (it misses every ground truth whatever the threshold), its
    ``loc``, ``fp`` and threshold ``None`` (as the official LRP-Error code)."""

    olrp: float
    loc: Optional[float]
    fp: Optional[float]
    fn: float
    threshold: Optional[float]


@dataclass(frozen=True)
class ClassResult:
    """LRP metrics of one class: ``lrp`` is ``None`` for a class without ground truth, ``rho``
    is ``None`` where the rank correlation is undefined (see :func:`rank_correlation`)."""

    num_gt: int
    lrp: Optional[OptimalLRP]
    rho: Optional[float]


def last_of_runs(sorted_values: np.ndarray) -> np.ndarray:
    """Mask of the last position of every run of equal values in a sorted array."""
    ends = np.ones(len(sorted_values), dtype=bool)
    ends[:-1] = sorted_values[:-1] != sorted_values[1:]
    return ends


def _check_class_inputs(scores: np.ndarray, is_tp: np.ndarray, ious: np.ndarray, num_gt: int, tau: float) -> None:
    if not 0.0 < tau < 1.0:
        raise ValueError(f"tau must lie in (0, 1), got {tau}")
    if not (len(scores) == len(is_tp) == len(ious)):
        raise ValueError(f"scores, is_tp and ious differ in length: {len(scores)}, {len(is_tp)}, {len(ious)}")
    if num_gt < 1:
        raise ValueError(f"LRP needs at least one ground truth, got num_gt={num_gt}")
    if not np.all(np.isfinite(scores)):
        raise ValueError("detection scores must be finite")
    if int(is_tp.sum()) > num_gt:
        raise ValueError(f"{int(is_tp.sum())} true positives for only {num_gt} ground truths")
    tp_ious = ious[is_tp]
    if np.any(~(tp_ious >= tau)) or np.any(tp_ious > 1.0):
        raise ValueError(f"true-positive IoUs must lie in [tau, 1] = [{tau}, 1]")


def optimal_lrp(
    scores: np.ndarray, is_tp: np.ndarray, ious: np.ndarray, num_gt: int, tau: float = LRP_TAU
) -> OptimalLRP:
    """oLRP of one class (TPAMI 2021, Eq. 2 minimised over thresholds, Eq. 5-7 components).

    Detections are sorted by descending score (stable); LRP is evaluated only at the last
    position of each run of tied scores, and only where at least one TP is kept (elsewhere
    LRP is exactly 1, never below its value after a TP). Among equal minima the highest
    threshold wins."""
    scores = np.asarray(scores, dtype=np.float64)
    is_tp = np.asarray(is_tp, dtype=bool)
    ious = np.asarray(ious, dtype=np.float64)
    _check_class_inputs(scores, is_tp, ious, num_gt, tau)
    order = np.argsort(-scores, kind="stable")
    sorted_scores, tp = scores[order], is_tp[order]
    num_tp = np.cumsum(tp)
    num_fp = np.arange(1, len(tp) + 1) - num_tp
    loc_error = np.cumsum(np.where(tp, 1.0 - ious[order], 0.0))
    # A score threshold only cuts between distinct scores: the ends of tied runs are the cuts.
    cuts = np.flatnonzero(last_of_runs(sorted_scores) & (num_tp > 0))
    if len(cuts) == 0:
        return OptimalLRP(olrp=1.0, loc=None, fp=None, fn=1.0, threshold=None)
    lrp = (loc_error[cuts] / (1.0 - tau) + num_fp[cuts] + (num_gt - num_tp[cuts])) / (num_fp[cuts] + num_gt)
    best = cuts[int(np.argmin(lrp))]
    tp_at, fp_at = int(num_tp[best]), int(num_fp[best])
    return OptimalLRP(
        olrp=float(lrp.min()),
        loc=float(loc_error[best] / tp_at),
        fp=fp_at / (tp_at + fp_at),
        fn=(num_gt - tp_at) / num_gt,
        threshold=float(sorted_scores[best]),
    )


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ascending ranks; tied values share the mean of the ranks they span."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    run_starts = np.ones(len(values), dtype=bool)
    run_starts[1:] = sorted_values[1:] != sorted_values[:-1]
    first = np.flatnonzero(run_starts)
    run_lengths = np.diff(np.append(first, len(values)))
    mean_rank = first + (run_lengths + 1) / 2.0
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, run_lengths)
    return ranks


def rank_correlation(scores: np.ndarray, ious: np.ndarray) -> Optional[float]:
    """Pearson correlation between the average ranks of the scores and of the IoUs of a class's
    true positives (Spearman's rho with ties at mean rank). ``None`` (undefined) with fewer
    than two TPs or when all scores or all IoUs are tied."""
    if len(scores) != len(ious):
        raise ValueError(f"scores and ious differ in length: {len(scores)} vs {len(ious)}")
    if len(scores) < 2:
        return None
    score_ranks = average_ranks(scores)
    iou_ranks = average_ranks(ious)
    score_ranks -= score_ranks.mean()
    iou_ranks -= iou_ranks.mean()
    norm = math.sqrt(float(score_ranks @ score_ranks) * float(iou_ranks @ iou_ranks))
    if norm == 0.0:
        return None
    return float(score_ranks @ iou_ranks) / norm


def evaluate_classes(matches: DetectionMatches, tau: float = LRP_TAU) -> List[ClassResult]:
    """oLRP and rho of every class. Classes without ground truth get ``lrp=None`` and
    ``rho=None``: their detections, all false positives, enter no metric."""
    results = []
    for num_gt, (scores, is_tp, ious) in zip(matches.num_gt.tolist(), matches.per_class()):
        if num_gt == 0:
            results.append(ClassResult(num_gt=0, lrp=None, rho=None))
            continue
        results.append(
            ClassResult(
                num_gt=num_gt,
                lrp=optimal_lrp(scores, is_tp, ious, num_gt, tau),
                rho=rank_correlation(scores[is_tp], ious[is_tp]),
            )
        )
    return results


def _mean_or_nan(values: Sequence[Optional[float]]) -> float:
    """The mean of the defined values (``None``: undefined), NaN when there is none."""
    defined = [value for value in values if value is not None]
    return float(np.mean(defined)) if defined else float("nan")


def summarise(classes: Sequence[ClassResult]) -> Dict[str, float]:
    """Dataset-level metrics: oLRP and its components (x100) averaged over the classes with
    ground truth (localisation and FP components over those with a TP), rho over the classes where it is
    defined. A mean over no class is NaN (e.g. no ground truth at all)."""
    with_gt = [c.lrp for c in classes if c.lrp is not None]
    return {
        "oLRP": 100.0 * _mean_or_nan([lrp.olrp for lrp in with_gt]),
        "oLRP_loc": 100.0 * _mean_or_nan([lrp.loc for lrp in with_gt]),
        "oLRP_FP": 100.0 * _mean_or_nan([lrp.fp for lrp in with_gt]),
        "oLRP_FN": 100.0 * _mean_or_nan([lrp.fn for lrp in with_gt]),
        "rho": _mean_or_nan([c.rho for c in classes]),
    }
