"""COCO's average precision at one IoU threshold (pycocotools ``COCOeval.accumulate``: precision made monotone, read
at 101 recall thresholds, averaged over them and over the classes with ground truth), here for AP90."""

from __future__ import annotations

import numpy as np

from .lrp_metric import DetectionMatches

#: COCO's recall thresholds 0, 0.01, ..., 1 (as pycocotools builds them).
RECALL_THRESHOLDS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)


def class_precisions(scores: np.ndarray, is_tp: np.ndarray, num_gt: int) -> np.ndarray:
    """The interpolated precision of one class at the 101 recall thresholds (0 beyond the highest recall); the
    detections in COCOeval's order, sorted here by descending score with ties kept in that order."""
    if len(scores) == 0:
        return np.zeros(len(RECALL_THRESHOLDS))
    order = np.argsort(-scores, kind="mergesort")
    tp = np.cumsum(is_tp[order]).astype(np.float64)
    fp = np.cumsum(~is_tp[order]).astype(np.float64)
    recall = tp / num_gt
    precision = np.maximum.accumulate((tp / (fp + tp + np.spacing(1)))[::-1])[::-1]
    at = np.searchsorted(recall, RECALL_THRESHOLDS, side="left")
    return np.where(at < len(precision), precision[np.minimum(at, len(precision) - 1)], 0.0)


def average_precision(matches: DetectionMatches) -> float:
    """COCO AP (x100) of the matches at their IoU threshold; NaN when no class has ground truth."""
    per_class = [
        class_precisions(scores, is_tp, int(num_gt))
        for num_gt, (scores, is_tp, _) in zip(matches.num_gt.tolist(), matches.per_class())
        if num_gt > 0
    ]
    return float(np.mean(np.concatenate(per_class)) * 100) if per_class else float("nan")
