"""The COCO matching of detections to ground truths, read out of a COCOeval for LRP.

A pycocotools ``COCOeval`` (or detectron2's ``COCOeval_opt``) on which ``evaluate()`` has run
already matched every detection at every IoU threshold. When the Python ``evalImgs`` exist the
matches are read from them, so no detection is matched twice; detectron2's C++ ``COCOeval_opt``
keeps its per-image matches in ``_evalImgs_cpp``, opaque to Python, so only the greedy
assignment at one IoU threshold is redone, vectorised (:mod:`.greedy_matching`), on COCOeval's own IoU matrices and
ignore flags (:func:`matches_from_iou_matrices`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from pycocotools.cocoeval import COCOeval

from .greedy_matching import greedy_assignment, matched_ious
from .lrp_metric import LRP_TAU, DetectionMatches

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


def _build_matches(
    flat: _Flattened, matched: np.ndarray, det_ignored: np.ndarray, num_classes: int
) -> DetectionMatches:
    ious = matched_ious(flat.edge_det, flat.edge_gt, flat.edge_iou, matched, len(flat.gt_ids))
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
    image, redone by :func:`~.greedy_matching.greedy_assignment` on COCOeval's IoU matrices, prepared detections
    and ground-truth ignore flags (the route for detectron2's ``COCOeval_opt``)."""
    flat = _flatten(coco_eval, iou_threshold)
    matched = greedy_assignment(
        flat.edge_det, flat.edge_gt, flat.edge_iou, flat.gt_ignored, flat.gt_crowd, len(flat.det_ids)
    )
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
