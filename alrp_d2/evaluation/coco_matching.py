"""The COCO matching of detections to ground truths, read out of a COCOeval for LRP.

A pycocotools ``COCOeval`` (or detectron2's ``COCOeval_opt``) on which ``evaluate()`` has run
already matched every detection at every IoU threshold. When the Python ``evalImgs`` exist the
matches are read from them, so no detection is matched twice; detectron2's C++ ``COCOeval_opt``
keeps its per-image matches in ``_evalImgs_cpp``, opaque to Python, so only the greedy
assignment at one IoU threshold is redone, vectorised, on COCOeval's own IoU matrices and
ignore flags (:func:`matches_from_iou_matrices`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from pycocotools.cocoeval import COCOeval

from .lrp_metric import LRP_TAU, DetectionMatches, last_of_runs

__all__ = ["detection_matches", "matches_from_eval_imgs", "matches_from_iou_matrices"]

Pair = Tuple[int, int]
FlatArrays = Tuple[Tuple[np.ndarray, ...], np.ndarray, np.ndarray]


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
    edge_det, edge_gt, edge_iou = _iou_edges(coco_eval, pairs, det_start, det_count, gt_start, gt_count, iou_threshold)
    det_ids, det_scores, det_areas, det_class = dets
    gt_ids, gt_ignored, gt_crowd, gt_class = gts
    return _Flattened(
        det_ids, det_scores, det_areas, det_class, gt_ids, gt_ignored, gt_crowd, gt_class, edge_det, edge_gt, edge_iou
    )


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
    det_ignored = outside.copy()
    det_ignored[has_match] = flat.gt_ignored[matched[has_match]]
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
