"""COCO's matching of detections to ground truths on flat arrays (:mod:`.annotations`), as pycocotools' ``COCOeval``
matches them for the area range 'all': per image and class, the detections by descending score (stable), at most
``max_detections`` of them, each taking the free ground truth of highest IoU at or above the threshold (regular ones
before crowds, which stay free; :func:`~.greedy_matching.greedy_assignment`). The IoUs are computed once, vectorised for
boxes (the arithmetic of pycocotools' ``bbIou``) and keypoints (OKS, :mod:`.keypoint_similarity`), per image and class
for masks (``pycocotools.mask.iou``), and reused for every threshold."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Optional, TypeVar

import numpy as np
from pycocotools import mask as mask_utils

from .annotations import AREA_ALL, Detections, GroundTruths
from .greedy_matching import greedy_assignment, matched_ious
from .keypoint_similarity import keypoint_similarities
from .lrp_metric import DetectionMatches

IOU_TYPES = ("bbox", "segm", "keypoints")
#: COCOeval's ``maxDets[-1]`` of each IoU type: the detections evaluated per image and class.
COCO_MAX_DETECTIONS = {"bbox": 100, "segm": 100, "keypoints": 20}


@dataclass(frozen=True)
class CandidateMatches:
    """The evaluated detections in COCOeval's order (``order`` indexes the given ones), the ground truths in
    COCOeval's order (``gt_order``) and the (detection, ground truth, IoU) edges of one image and class with IoU at
    or above the lowest threshold, indexed in those orders."""

    detections: Detections
    ground_truths: GroundTruths
    num_classes: int
    edge_det: np.ndarray
    edge_gt: np.ndarray
    edge_iou: np.ndarray


Rows = TypeVar("Rows", Detections, GroundTruths)


def _take(value: Any, index: np.ndarray) -> Any:
    if value is None:
        return None
    return [value[i] for i in index.tolist()] if isinstance(value, list) else value[index]


def _take_rows(rows: Rows, index: np.ndarray) -> Rows:
    """The rows ``index`` of every array (and of the masks' list) of ``rows``."""
    return replace(rows, **{field.name: _take(getattr(rows, field.name), index) for field in fields(rows)})


def _pair_keys(image: np.ndarray, label: np.ndarray, num_classes: int) -> np.ndarray:
    return image.astype(np.int64) * num_classes + label.astype(np.int64)


def _evaluated_detections(dets: Detections, num_classes: int, max_detections: int) -> np.ndarray:
    """Indices of the evaluated detections: by image and class, then by descending score (ties in the given order,
    as COCOeval's mergesort), the first ``max_detections`` of each image and class."""
    keys = _pair_keys(dets.image, dets.label, num_classes)
    order = np.lexsort((-dets.score, keys))
    sorted_keys = keys[order]
    run_start = np.ones(len(order), dtype=bool)
    run_start[1:] = sorted_keys[1:] != sorted_keys[:-1]
    first = np.maximum.accumulate(np.where(run_start, np.arange(len(order)), 0))
    return order[np.arange(len(order)) - first < max_detections]


def box_ious(det_boxes: np.ndarray, gt_boxes: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU of paired XYWH boxes as pycocotools computes it (``bbIou``); a crowd's is the intersection over the
    detection's area."""
    det_area = det_boxes[:, 2] * det_boxes[:, 3]
    gt_area = gt_boxes[:, 2] * gt_boxes[:, 3]
    width = np.minimum(det_boxes[:, 2] + det_boxes[:, 0], gt_boxes[:, 2] + gt_boxes[:, 0])
    width = width - np.maximum(det_boxes[:, 0], gt_boxes[:, 0])
    height = np.minimum(det_boxes[:, 3] + det_boxes[:, 1], gt_boxes[:, 3] + gt_boxes[:, 1])
    height = height - np.maximum(det_boxes[:, 1], gt_boxes[:, 1])
    inter = width * height
    union = np.where(crowd, det_area, det_area + gt_area - inter)
    overlap = (width > 0) & (height > 0)
    ious = np.zeros(len(inter), dtype=np.float64)
    np.divide(inter, union, out=ious, where=overlap & (union != 0))
    return ious


def _mask_ious(
    dets: Detections, gts: GroundTruths, num_classes: int, gt_start: np.ndarray, count: np.ndarray
) -> np.ndarray:
    """IoUs of every detection with every ground truth of its image and class (row-major blocks, one
    ``pycocotools.mask.iou`` call per image and class)."""
    if dets.masks is None or gts.masks is None:
        raise ValueError("segm matching needs the masks of the detections and of the ground truths")
    ious = np.zeros(int(count.sum()), dtype=np.float64)
    edge_start = np.cumsum(count) - count
    keys = _pair_keys(dets.image, dets.label, num_classes)
    run_start = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, dtype=np.int64)
    for first, end in zip(run_start.tolist(), [*run_start[1:].tolist(), len(keys)]):
        if count[first] == 0:
            continue
        gt_range = range(int(gt_start[first]), int(gt_start[first] + count[first]))
        block = mask_utils.iou(
            dets.masks[first:end], [gts.masks[g] for g in gt_range], gts.crowd[list(gt_range)].astype(np.uint8).tolist()
        )
        ious[edge_start[first] : edge_start[first] + block.size] = np.asarray(block, dtype=np.float64).ravel()
    return ious


def _keypoint_similarities(
    dets: Detections, gts: GroundTruths, edge_det: np.ndarray, edge_gt: np.ndarray, sigmas: Optional[np.ndarray]
) -> np.ndarray:
    if len(edge_det) == 0:
        return np.zeros(0)
    if dets.keypoints is None or gts.keypoints is None or sigmas is None:
        raise ValueError("keypoint matching needs the keypoints of the detections and of the ground truths and sigmas")
    return keypoint_similarities(
        dets.keypoints[edge_det, :, :2],
        gts.keypoints[edge_gt],
        gts.box[edge_gt],
        gts.area[edge_gt],
        sigmas[gts.label[edge_gt]],
    )


def candidate_matches(
    dets: Detections,
    gts: GroundTruths,
    num_classes: int,
    iou_type: str,
    max_detections: int,
    min_iou: float,
    sigmas: Optional[np.ndarray] = None,
) -> CandidateMatches:
    """The evaluated detections and ground truths in COCOeval's order and their edges with IoU >= ``min_iou``
    (keypoints: OKS with ``sigmas``, one row of K per class)."""
    if iou_type not in IOU_TYPES:
        raise ValueError(f"iou_type must be one of {IOU_TYPES}, got {iou_type!r}")
    dets = _take_rows(dets, _evaluated_detections(dets, num_classes, max_detections))
    gt_keys = _pair_keys(gts.image, gts.label, num_classes)
    gt_order = np.argsort(gt_keys, kind="stable")
    gts, gt_keys = _take_rows(gts, gt_order), gt_keys[gt_order]
    det_keys = _pair_keys(dets.image, dets.label, num_classes)
    gt_start = np.searchsorted(gt_keys, det_keys, side="left")
    count = np.searchsorted(gt_keys, det_keys, side="right") - gt_start
    edge_det = np.repeat(np.arange(len(det_keys)), count)
    edge_gt = np.repeat(gt_start, count) + np.arange(len(edge_det)) - np.repeat(np.cumsum(count) - count, count)
    if iou_type == "bbox":
        edge_iou = box_ious(dets.box[edge_det], gts.box[edge_gt], gts.crowd[edge_gt])
    elif iou_type == "keypoints":
        edge_iou = _keypoint_similarities(dets, gts, edge_det, edge_gt, sigmas)
    else:
        edge_iou = _mask_ious(dets, gts, num_classes, gt_start, count)
    kept = edge_iou >= min(min_iou, 1 - 1e-10)
    return CandidateMatches(dets, gts, num_classes, edge_det[kept], edge_gt[kept], edge_iou[kept])


def matches_at(candidates: CandidateMatches, iou_threshold: float) -> DetectionMatches:
    """COCO's matching at ``iou_threshold`` (at least the candidates' lowest IoU): TPs and FPs in COCOeval's order;
    detections matched to an ignored ground truth, and unmatched ones outside the area range 'all', left out."""
    dets, gts = candidates.detections, candidates.ground_truths
    kept = candidates.edge_iou >= min(iou_threshold, 1 - 1e-10)
    edge_det, edge_gt, edge_iou = candidates.edge_det[kept], candidates.edge_gt[kept], candidates.edge_iou[kept]
    gt_ignored = gts.ignored
    matched = greedy_assignment(edge_det, edge_gt, edge_iou, gt_ignored, gts.crowd, len(dets.score))
    has_match = matched >= 0
    ignored = (dets.area < AREA_ALL[0]) | (dets.area > AREA_ALL[1])
    ignored[has_match] = gt_ignored[matched[has_match]]
    counted = ~ignored
    return DetectionMatches(
        class_index=dets.label[counted],
        scores=dets.score[counted],
        is_tp=has_match[counted],
        ious=matched_ious(edge_det, edge_gt, edge_iou, matched, len(gt_ignored))[counted],
        num_gt=np.bincount(gts.label[~gt_ignored], minlength=candidates.num_classes),
    )
