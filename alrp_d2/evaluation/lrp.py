"""Optimal LRP and the classification/localisation rank correlation from COCO matching results.

LRP (Oksuz et al., "Localization Recall Precision (LRP): A New Performance Metric for Object
Detection", ECCV 2018; "One Metric to Measure them All: Localisation Recall Precision (LRP) for
Evaluating Visual Detection Tasks", TPAMI 2021, Eq. 1-2), for the detections of one class kept
above a score threshold::

    LRP = (sum_{TP} (1 - IoU) / (1 - tau) + N_FP + N_FN) / (N_TP + N_FP + N_FN)

with ``N_FN = N_GT - N_TP`` and the TP validation threshold ``tau = 0.5``. The optimal LRP
(oLRP) of a class is the minimum of LRP over the score thresholds; its components are the mean
``1 - IoU`` of the TPs, ``N_FP / (N_TP + N_FP)`` and ``N_FN / N_GT`` at that threshold.

Only numpy is needed here; the matching is read from a pycocotools ``COCOeval`` (or detectron2's
``COCOeval_opt``) on which ``evaluate()`` has run, so no detection is matched twice when the
Python ``evalImgs`` exist, and only the greedy assignment at one IoU threshold is redone,
vectorised, on COCOeval's own IoU matrices and ignore flags when they do not (the C++
``COCOeval_opt`` keeps its per-image matches in ``_evalImgs_cpp``, opaque to Python).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from pycocotools.cocoeval import COCOeval

Pair = Tuple[int, int]
FlatArrays = Tuple[Tuple[np.ndarray, ...], np.ndarray, np.ndarray]

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


@dataclass(frozen=True)
class OptimalLRP:
    """oLRP of one class with its components and LRP-optimal score threshold (detections with
    ``score >= threshold`` are kept). The components and the threshold are ``None`` when the
    class has no true positive at any threshold (then ``olrp == 1``)."""

    olrp: float
    loc: Optional[float]
    fp: Optional[float]
    fn: Optional[float]
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
        return OptimalLRP(olrp=1.0, loc=None, fp=None, fn=None, threshold=None)
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
    for class_index, num_gt in enumerate(matches.num_gt.tolist()):
        if num_gt == 0:
            results.append(ClassResult(num_gt=0, lrp=None, rho=None))
            continue
        scores, is_tp, ious = matches.of_class(class_index)
        results.append(
            ClassResult(
                num_gt=num_gt,
                lrp=optimal_lrp(scores, is_tp, ious, num_gt, tau),
                rho=rank_correlation(scores[is_tp], ious[is_tp]),
            )
        )
    return results


def _mean_or_nan(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def summarise(classes: Sequence[ClassResult]) -> Dict[str, float]:
    """Dataset-level metrics: oLRP and its components (x100) averaged over the classes with
    ground truth (components over those with a TP), rho averaged over the classes where it is
    defined. A mean over no class is NaN (e.g. no ground truth at all)."""
    with_gt = [c.lrp for c in classes if c.lrp is not None]
    with_tp = [lrp for lrp in with_gt if lrp.threshold is not None]
    return {
        "oLRP": 100.0 * _mean_or_nan([lrp.olrp for lrp in with_gt]),
        "oLRP_loc": 100.0 * _mean_or_nan([lrp.loc for lrp in with_tp]),
        "oLRP_FP": 100.0 * _mean_or_nan([lrp.fp for lrp in with_tp]),
        "oLRP_FN": 100.0 * _mean_or_nan([lrp.fn for lrp in with_tp]),
        "rho": _mean_or_nan([c.rho for c in classes if c.rho is not None]),
    }


# --------------------------------------------------------------------------------------------
# Reading the matching out of a COCOeval on which evaluate() has run.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Flattened:
    """COCOeval's prepared detections (score-sorted, cut at maxDets, i.e. in the row order of
    ``ious``) and ground truths (in the column order of ``ious``), concatenated over the
    evaluated (image, category) pairs, with the IoU entries at or above the threshold."""

    det_ids: np.ndarray
    det_scores: np.ndarray
    det_areas: np.ndarray
    det_class: np.ndarray
    gt_ids: np.ndarray
    gt_ignored: np.ndarray
    gt_crowd: np.ndarray
    gt_class: np.ndarray
    edge_det: np.ndarray
    edge_gt: np.ndarray
    edge_iou: np.ndarray


def _column(records: List[Dict[str, Any]], key: str, dtype: Any) -> np.ndarray:
    return np.fromiter(map(itemgetter(key), records), dtype=dtype, count=len(records))


def _area_all(params: Any) -> Tuple[float, float]:
    if "all" not in params.areaRngLbl:
        raise ValueError(f"COCOeval params have no 'all' area range: {params.areaRngLbl}")
    low, high = params.areaRng[params.areaRngLbl.index("all")]
    return float(low), float(high)


def _evaluated_pairs(coco_eval: COCOeval) -> List[Pair]:
    if not coco_eval.params.useCats:
        raise ValueError("LRP is computed per category: COCOeval must run with params.useCats=1")
    if not coco_eval.ious:
        raise ValueError("COCOeval.evaluate() must run before LRP is computed")
    return list(coco_eval.ious.keys())


def _flatten_detections(coco_eval: COCOeval, pairs: List[Pair], class_of_pair: np.ndarray) -> FlatArrays:
    """Detections of every pair sorted by descending score (stable, as COCOeval sorts them)
    and cut at ``maxDets[-1]``; returns the flat arrays and each pair's start and count."""
    per_pair = [coco_eval._dts.get(pair, ()) for pair in pairs]
    counts = np.fromiter(map(len, per_pair), dtype=np.int64, count=len(pairs))
    records = list(itertools.chain.from_iterable(per_pair))
    scores = _column(records, "score", np.float64)
    pair_of_det = np.repeat(np.arange(len(pairs)), counts)
    order = np.lexsort((-scores, pair_of_det))
    # pair_of_det is non-decreasing, so each pair keeps its index range in ``order`` and
    # ``rank[i]`` is the score rank, within its pair, of the detection ``order[i]``.
    rank = np.arange(len(records)) - np.repeat(np.cumsum(counts) - counts, counts)
    kept = order[rank < coco_eval.params.maxDets[-1]]
    kept_counts = np.minimum(counts, coco_eval.params.maxDets[-1])
    arrays = (
        _column(records, "id", np.int64)[kept],
        scores[kept],
        _column(records, "area", np.float64)[kept],
        class_of_pair[pair_of_det[kept]],
    )
    return arrays, np.cumsum(kept_counts) - kept_counts, kept_counts


def _flatten_ground_truths(coco_eval: COCOeval, pairs: List[Pair], class_of_pair: np.ndarray) -> FlatArrays:
    """Ground truths of every pair in COCOeval's order; ``ignored`` follows COCOeval (its
    ``ignore`` flag, i.e. crowd, or an area outside the 'all' range)."""
    per_pair = [coco_eval._gts.get(pair, ()) for pair in pairs]
    counts = np.fromiter(map(len, per_pair), dtype=np.int64, count=len(pairs))
    records = list(itertools.chain.from_iterable(per_pair))
    low, high = _area_all(coco_eval.params)
    areas = _column(records, "area", np.float64)
    ignored = _column(records, "ignore", bool) | (areas < low) | (areas > high)
    arrays = (
        _column(records, "id", np.int64),
        ignored,
        _column(records, "iscrowd", bool),
        class_of_pair[np.repeat(np.arange(len(pairs)), counts)],
    )
    return arrays, np.cumsum(counts) - counts, counts


def _iou_edges(
    coco_eval: COCOeval,
    pairs: List[Pair],
    det_start: np.ndarray,
    det_count: np.ndarray,
    gt_start: np.ndarray,
    gt_count: np.ndarray,
    iou_threshold: float,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(detection, ground truth, IoU) triples with IoU >= threshold, from COCOeval's matrices
    (rows: the pair's score-sorted detections, columns: its ground truths)."""
    both = np.flatnonzero((det_count > 0) & (gt_count > 0))
    matrices = [np.asarray(coco_eval.ious[pairs[p]], dtype=np.float64) for p in both.tolist()]
    expected = [(int(det_count[p]), int(gt_count[p])) for p in both.tolist()]
    if [m.shape for m in matrices] != expected:
        raise ValueError("COCOeval.ious do not match its prepared detections and ground truths")
    flat = np.concatenate([m.ravel() for m in matrices]) if matrices else np.zeros(0)
    sizes = det_count[both] * gt_count[both]
    starts = np.cumsum(sizes) - sizes
    entries = np.flatnonzero(flat >= min(iou_threshold, 1 - 1e-10))
    which = np.searchsorted(starts, entries, side="right") - 1
    pair = both[which]
    local = entries - starts[which]
    row, col = np.divmod(local, gt_count[pair])
    return det_start[pair] + row, gt_start[pair] + col, flat[entries]


def _flatten(coco_eval: COCOeval, iou_threshold: float) -> _Flattened:
    pairs = _evaluated_pairs(coco_eval)
    class_index = {cat_id: i for i, cat_id in enumerate(coco_eval.params.catIds)}
    class_of_pair = np.fromiter((class_index[cat] for _, cat in pairs), dtype=np.int64, count=len(pairs))
    dets, det_start, det_count = _flatten_detections(coco_eval, pairs, class_of_pair)
    gts, gt_start, gt_count = _flatten_ground_truths(coco_eval, pairs, class_of_pair)
    edges = _iou_edges(coco_eval, pairs, det_start, det_count, gt_start, gt_count, iou_threshold)
    return _Flattened(*dets, *gts, *edges)


def _greedy_assignment(flat: _Flattened) -> np.ndarray:
    """COCO's greedy matching at one IoU threshold, vectorised over all images and classes.

    COCO walks the detections of an image and class by descending score; each takes, among the
    ground truths still free (crowds stay free), the regular one of highest IoU, else the
    ignored one of highest IoU (ties: the later ground truth). Every round below resolves each
    pending detection whose choice no earlier pending detection could still take; the earliest
    pending detection of a pair always qualifies. Returns the matched ground truth per
    detection, -1 if none."""
    matched = np.full(len(flat.det_ids), -1, dtype=np.int64)
    taken = np.zeros(len(flat.gt_ids), dtype=bool)
    order = np.lexsort((flat.edge_gt, flat.edge_iou, ~flat.gt_ignored[flat.edge_gt], flat.edge_det))
    edge_det, edge_gt = flat.edge_det[order], flat.edge_gt[order]
    while len(edge_det):
        free = ~taken[edge_gt]
        edge_det, edge_gt = edge_det[free], edge_gt[free]
        if not len(edge_det):
            break
        choice = np.flatnonzero(last_of_runs(edge_det))  # highest-priority free edge per detection
        first_claim = np.full(len(flat.gt_ids), len(flat.det_ids), dtype=np.int64)
        claimed, first = np.unique(edge_gt, return_index=True)
        first_claim[claimed] = edge_det[first]
        chosen_det, chosen_gt = edge_det[choice], edge_gt[choice]
        resolved = flat.gt_crowd[chosen_gt] | (first_claim[chosen_gt] == chosen_det)
        matched[chosen_det[resolved]] = chosen_gt[resolved]
        taken[chosen_gt[resolved & ~flat.gt_crowd[chosen_gt]]] = True
        pending = np.ones(len(flat.det_ids), dtype=bool)
        pending[chosen_det[resolved]] = False
        keep = pending[edge_det]
        edge_det, edge_gt = edge_det[keep], edge_gt[keep]
    return matched


def _matched_ious(flat: _Flattened, matched: np.ndarray) -> np.ndarray:
    """IoU of each detection with its matched ground truth (0 where unmatched)."""
    ious = np.zeros(len(matched), dtype=np.float64)
    det_index = np.flatnonzero(matched >= 0)
    if len(det_index) == 0:
        return ious
    num_gts = len(flat.gt_ids)
    edge_keys = flat.edge_det * num_gts + flat.edge_gt
    wanted = det_index * num_gts + matched[det_index]
    order = np.argsort(edge_keys)
    positions = order[np.minimum(np.searchsorted(edge_keys, wanted, sorter=order), len(order) - 1)]
    if len(order) == 0 or np.any(edge_keys[positions] != wanted):
        raise ValueError("a COCO match has an IoU below the matching threshold in COCOeval.ious")
    ious[det_index] = flat.edge_iou[positions]
    return ious


def _build_matches(
    flat: _Flattened, matched: np.ndarray, det_ignored: np.ndarray, num_classes: int
) -> DetectionMatches:
    ious = _matched_ious(flat, matched)
    counted = ~det_ignored
    return DetectionMatches(
        class_index=flat.det_class[counted],
        scores=flat.det_scores[counted],
        is_tp=(matched >= 0)[counted],
        ious=ious[counted],
        num_gt=np.bincount(flat.gt_class[~flat.gt_ignored], minlength=num_classes),
    )


def matches_from_iou_matrices(coco_eval: COCOeval, iou_threshold: float = LRP_TAU) -> DetectionMatches:
    """Matching at ``iou_threshold`` for the 'all' area range and ``maxDets[-1]`` detections per
    image, redone by :func:`_greedy_assignment` on COCOeval's IoU matrices, prepared detections
    and ground-truth ignore flags (the route for detectron2's ``COCOeval_opt``)."""
    flat = _flatten(coco_eval, iou_threshold)
    matched = _greedy_assignment(flat)
    low, high = _area_all(coco_eval.params)
    outside = (flat.det_areas < low) | (flat.det_areas > high)
    has_match = matched >= 0
    det_ignored = np.where(has_match, flat.gt_ignored[np.maximum(matched, 0)], outside)
    return _build_matches(flat, matched, det_ignored, len(coco_eval.params.catIds))


def _iou_threshold_index(params: Any, iou_threshold: float) -> Optional[int]:
    hits = np.flatnonzero(np.isclose(np.asarray(params.iouThrs, dtype=np.float64), iou_threshold))
    return int(hits[0]) if len(hits) else None


def _has_python_eval_imgs(coco_eval: COCOeval, iou_threshold: float) -> bool:
    eval_imgs = getattr(coco_eval, "evalImgs", None)
    return (
        isinstance(eval_imgs, list)
        and len(eval_imgs) > 0
        and _iou_threshold_index(coco_eval.params, iou_threshold) is not None
    )


def _index_of_ids(known_ids: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
    """Position of each of ``ids`` in ``known_ids`` (unique annotation ids)."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(known_ids)
    positions = np.minimum(np.searchsorted(known_ids, ids, sorter=order), max(len(order) - 1, 0))
    if len(order) == 0 or np.any(known_ids[order[positions]] != ids):
        raise ValueError(f"COCOeval.evalImgs refer to {what} ids missing from COCOeval's prepared annotations")
    return order[positions]


def _concatenate(arrays: List[Any], dtype: Any) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype=dtype)


def _eval_imgs_of_area_all(coco_eval: COCOeval) -> List[Dict[str, Any]]:
    """The non-empty ``evalImgs`` entries of the 'all' area range (laid out category, area,
    image as in ``COCOeval.evaluate``)."""
    params = coco_eval.params
    num_areas, num_images = len(params.areaRng), len(params.imgIds)
    area = params.areaRngLbl.index("all")
    return [
        entry
        for k in range(len(params.catIds))
        for entry in coco_eval.evalImgs[(k * num_areas + area) * num_images : (k * num_areas + area + 1) * num_images]
        if entry is not None and len(entry["dtIds"])
    ]


def matches_from_eval_imgs(coco_eval: COCOeval, iou_threshold: float = LRP_TAU) -> DetectionMatches:
    """Matching at ``iou_threshold`` read from the Python COCOeval's ``evalImgs`` ('all' area
    range, ``maxDets[-1]``): ``dtMatches`` and ``dtIgnore`` as COCOeval computed them; only the
    matched IoU is looked up in ``ious``."""
    if not _has_python_eval_imgs(coco_eval, iou_threshold):
        raise ValueError(f"COCOeval has no Python evalImgs with IoU threshold {iou_threshold}")
    flat = _flatten(coco_eval, iou_threshold)
    t = _iou_threshold_index(coco_eval.params, iou_threshold)
    entries = _eval_imgs_of_area_all(coco_eval)
    dt_ids = _concatenate([e["dtIds"] for e in entries], np.int64)
    gt_of_dt = _concatenate([e["dtMatches"][t] for e in entries], np.int64)
    ignored = _concatenate([e["dtIgnore"][t] for e in entries], bool)
    det_index = _index_of_ids(flat.det_ids, dt_ids, "detection")
    if len(det_index) != len(flat.det_ids) or len(np.unique(det_index)) != len(det_index):
        raise ValueError("COCOeval.evalImgs and COCOeval._dts disagree on the evaluated detections")
    has_match = gt_of_dt > 0
    matched = np.full(len(flat.det_ids), -1, dtype=np.int64)
    matched[det_index[has_match]] = _index_of_ids(flat.gt_ids, gt_of_dt[has_match], "ground-truth")
    det_ignored = np.zeros(len(flat.det_ids), dtype=bool)
    det_ignored[det_index] = ignored
    return _build_matches(flat, matched, det_ignored, len(coco_eval.params.catIds))


def detection_matches(coco_eval: COCOeval, iou_threshold: float = LRP_TAU) -> DetectionMatches:
    """The matching COCOeval made at ``iou_threshold``: read from ``evalImgs`` when the Python
    COCOeval kept them, otherwise (``COCOeval_opt``) reassigned on COCOeval's IoU matrices."""
    if _has_python_eval_imgs(coco_eval, iou_threshold):
        return matches_from_eval_imgs(coco_eval, iou_threshold)
    return matches_from_iou_matrices(coco_eval, iou_threshold)
