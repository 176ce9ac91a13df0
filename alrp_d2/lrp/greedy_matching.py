"""COCO's greedy matching of detections to ground truths at one IoU threshold, vectorised over all images and
classes (the assignment of pycocotools' ``COCOeval.evaluateImg``)."""

from __future__ import annotations

import numpy as np

from .lrp_metric import last_of_runs


def greedy_assignment(
    edge_det: np.ndarray,
    edge_gt: np.ndarray,
    edge_iou: np.ndarray,
    gt_ignored: np.ndarray,
    gt_crowd: np.ndarray,
    num_dets: int,
) -> np.ndarray:
    """The ground truth each detection matches, -1 if none.

    The edges are the (detection, ground truth, IoU) triples of one image and class with IoU at or above the
    threshold; within an image and class, a lower detection index is a higher score (COCOeval's stable order) and
    the ground truths keep COCOeval's order. COCO walks the detections by descending score; each takes, among the
    ground truths still free (crowds stay free), the regular one of highest IoU, else the ignored one of highest IoU
    (ties: the later ground truth). Every round below resolves each pending detection whose choice no earlier pending
    detection could still take; the earliest pending detection of an image and class always qualifies."""
    num_gts = len(gt_ignored)
    matched = np.full(num_dets, -1, dtype=np.int64)
    taken = np.zeros(num_gts, dtype=bool)
    order = np.lexsort((edge_gt, edge_iou, ~gt_ignored[edge_gt], edge_det))
    edge_det, edge_gt = edge_det[order], edge_gt[order]
    while len(edge_det):
        free = ~taken[edge_gt]
        edge_det, edge_gt = edge_det[free], edge_gt[free]
        if not len(edge_det):
            break
        choice = np.flatnonzero(last_of_runs(edge_det))  # highest-priority free edge per detection
        first_claim = np.full(num_gts, num_dets, dtype=np.int64)
        claimed, first = np.unique(edge_gt, return_index=True)
        first_claim[claimed] = edge_det[first]
        chosen_det, chosen_gt = edge_det[choice], edge_gt[choice]
        resolved = gt_crowd[chosen_gt] | (first_claim[chosen_gt] == chosen_det)
        matched[chosen_det[resolved]] = chosen_gt[resolved]
        taken[chosen_gt[resolved & ~gt_crowd[chosen_gt]]] = True
        pending = np.ones(num_dets, dtype=bool)
        pending[chosen_det[resolved]] = False
        keep = pending[edge_det]
        edge_det, edge_gt = edge_det[keep], edge_gt[keep]
    return matched


def matched_ious(
    edge_det: np.ndarray, edge_gt: np.ndarray, edge_iou: np.ndarray, matched: np.ndarray, num_gts: int
) -> np.ndarray:
    """IoU of each detection with its matched ground truth (0 where unmatched), looked up among the edges."""
    ious = np.zeros(len(matched), dtype=np.float64)
    det_index = np.flatnonzero(matched >= 0)
    if len(det_index) == 0:
        return ious
    edge_keys = edge_det * num_gts + edge_gt
    wanted = det_index * num_gts + matched[det_index]
    order = np.argsort(edge_keys)
    positions = order[np.minimum(np.searchsorted(edge_keys, wanted, sorter=order), len(order) - 1)]
    if len(order) == 0 or np.any(edge_keys[positions] != wanted):
        raise ValueError("a match has an IoU below the matching threshold")
    ious[det_index] = edge_iou[positions]
    return ious
