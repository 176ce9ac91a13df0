"""LRP for panoptic segmentation (Oksuz et al., TPAMI 2021, Sec. 5.3: LRP in place of PQ), with PQ beside it, on COCO
panoptic files (pure numpy and Pillow).

Matching as PQ (Kirillov et al., CVPR 2019): a predicted and a ground-truth segment of the same class, the ground
truth not a crowd, are a TP when their IoU > 0.5, the union leaving out the prediction's VOID pixels. An unmatched
non-crowd ground truth is an FN; an unmatched prediction is an FP unless more than half of it lies on VOID and on the
crowd region of its class (the last crowd segment of that class in ``segments_info``). No area threshold: a segment
of one pixel counts as any other. Per class, from its counts over the dataset (Eq. 1 at the fixed matching)::

    LRP = (sum_{TP} (1 - IoU) / (1 - tau) + N_FP + N_FN) / (N_TP + N_FP + N_FN),   tau = 0.5

its components ``sum_{TP} (1 - IoU) / N_TP`` (localisation), ``N_FP / (N_TP + N_FP)`` and ``N_FN / (N_TP + N_FN)``,
``PQ = sum_{TP} IoU / (N_TP + N_FP / 2 + N_FN / 2)``, ``SQ = sum_{TP} IoU / N_TP`` (0 without a TP) and
``RQ = N_TP / (N_TP + N_FP / 2 + N_FN / 2)``. The means (all classes, things, stuff) are over the classes with a TP, an
FP or an FN; a component's mean over the classes where it is defined, as the official code (LRP-Error's panopticapi
fork) averages. docs/lrp.md, "Panoptic segmentation".
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from .lrp_metric import LRP_TAU
from .panoptic_files import (
    VOID,
    Categories,
    ImagePair,
    PanopticFileError,
    check_ground_truth_areas,
    check_prediction_ids,
    image_pairs,
    read_ids,
)

#: Counts per class: TP, FP, FN and the sum of the TPs' IoUs.
TP, FP, FN, IOU = range(4)
COUNT_ROWS = {"TP": TP, "FP": FP, "FN": FN}
#: The means of each group (x100), suffixed ``_th`` (things) and ``_st`` (stuff) for the groups.
PANOPTIC_METRICS = ("PQ", "SQ", "RQ", "LRP", "LRP_loc", "LRP_FP", "LRP_FN")
GROUPS = {"": None, "_th": True, "_st": False}
#: :class:`SegmentLookup`'s entry of an id that is not a segment of the image.
UNSET = np.iinfo(np.uint16).max


class SegmentLookup:
    """Each pixel's segment by one gather from a table over all 24-bit ids (no sort of the pixels): the table holds
    an image's segment indices only during :meth:`index`, 65535 everywhere else."""

    def __init__(self) -> None:
        self.table = np.full(256**3, UNSET, dtype=np.uint16)

    def index(self, png_ids: np.ndarray, segment_ids: np.ndarray) -> np.ndarray:
        """Each pixel's index in ``segment_ids``; ``len(segment_ids)`` on VOID, ``len(segment_ids) + 1`` on an id
        that ``segment_ids`` does not hold."""
        count = len(segment_ids)
        self.table[segment_ids], self.table[VOID] = np.arange(count), count
        try:
            return np.minimum(self.table[png_ids], count + 1)
        finally:
            self.table[segment_ids], self.table[VOID] = UNSET, UNSET


def overlaps(gt_ids: np.ndarray, pred_ids: np.ndarray, pair: ImagePair, lookup: SegmentLookup) -> np.ndarray:
    """The pixels of every (ground-truth, predicted) segment pair: rows the ground truth's segments, VOID and other
    ids; columns the prediction's segments, VOID and ids its JSON does not list (checked: none)."""
    rows, columns = len(pair.gt.ids) + 2, len(pair.pred.ids) + 2
    on_gt, on_pred = lookup.index(gt_ids, pair.gt.ids), lookup.index(pred_ids, pair.pred.ids)
    codes = on_gt.astype(np.int64) * columns + on_pred
    matrix = np.bincount(codes.ravel(), minlength=rows * columns).reshape(rows, columns)
    check_prediction_ids(pair, matrix[:, :-2].sum(axis=0), pred_ids[on_pred == columns - 1][:1])
    check_ground_truth_areas(pair, matrix[:-2].sum(axis=1))
    return matrix


def image_counts(matrix: np.ndarray, pair: ImagePair, num_classes: int) -> np.ndarray:
    """TP, FP, FN and the TPs' IoU sum per class (rows ``TP, FP, FN, IOU``) of one image from its :func:`overlaps`."""
    gt, pred = pair.gt, pair.pred
    inter, void = matrix[:-2, :-2], matrix[-2, :-2]
    pred_area = matrix[:, :-2].sum(axis=0)
    candidate = (inter > 0) & ~gt.crowd[:, None] & (gt.classes[:, None] == pred.classes[None, :])
    union = pred_area[None, :] + gt.areas[:, None] - inter - void[None, :]
    iou = np.where(candidate, inter / np.where(candidate, union, 1), 0.0)
    hit = candidate & (iou > 0.5)
    hit_gt, hit_pred = np.nonzero(hit)
    crowd_of_class = np.full(num_classes, -1)
    np.maximum.at(crowd_of_class, gt.classes[gt.crowd], np.flatnonzero(gt.crowd))
    crowd_row = crowd_of_class[pred.classes]
    on_crowd = np.zeros(len(pred.ids))
    on_crowd[crowd_row >= 0] = inter[crowd_row[crowd_row >= 0], np.flatnonzero(crowd_row >= 0)]
    is_fp = ~hit.any(axis=0) & ~((void + on_crowd) / np.maximum(pred_area, 1) > 0.5)
    return np.stack(
        [
            np.bincount(gt.classes[hit_gt], minlength=num_classes),
            np.bincount(pred.classes[is_fp], minlength=num_classes),
            np.bincount(gt.classes[~hit.any(axis=1) & ~gt.crowd], minlength=num_classes),
            np.bincount(gt.classes[hit_gt], iou[hit_gt, hit_pred], minlength=num_classes),
        ]
    ).astype(np.float64)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator``, NaN where the denominator is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)


def class_metrics(counts: np.ndarray) -> Dict[str, np.ndarray]:
    """PQ, SQ, RQ, LRP and its components of every class (fractions; NaN where undefined, all NaN for a class without
    TP, FP and FN) from the dataset's counts."""
    tp, fp, fn, iou = counts
    counted = tp + fp + fn > 0
    halves = tp + 0.5 * fp + 0.5 * fn
    return {
        "PQ": _ratio(iou, halves),
        "SQ": np.where(counted, np.nan_to_num(_ratio(iou, tp)), np.nan),
        "RQ": _ratio(tp, halves),
        "LRP": _ratio((tp - iou) / (1 - LRP_TAU) + fp + fn, tp + fp + fn),
        "LRP_loc": _ratio(tp - iou, tp),
        "LRP_FP": _ratio(fp, tp + fp),
        "LRP_FN": _ratio(fn, tp + fn),
    }


def _mean(values: np.ndarray) -> float:
    """The mean of the defined values, x100; NaN where none is (no class of the group counted)."""
    defined = values[~np.isnan(values)]
    return float(100.0 * defined.mean()) if len(defined) else float("nan")


def panoptic_results(counts: np.ndarray, categories: Categories) -> Dict[str, Any]:
    """The means of all classes, things and stuff (x100; NaN where no class of the group has a TP, an FP or an FN, or
    none defines the component) and the per-class lists, aligned with ``classes``."""
    per_class = class_metrics(counts)
    results: Dict[str, Any] = {}
    for suffix, isthing in GROUPS.items():
        members = np.ones(len(categories.ids), dtype=bool) if isthing is None else categories.isthing == isthing
        for metric in PANOPTIC_METRICS:
            results[metric + suffix] = _mean(per_class[metric][members])
        results["num_classes" + suffix] = int(np.count_nonzero(members & (counts[:3].sum(axis=0) > 0)))
    results["classes"] = list(categories.ids)
    results["isthing"] = categories.isthing.tolist()
    for key, row in COUNT_ROWS.items():
        results[f"{key}_per_class"] = counts[row].astype(np.int64).tolist()
    for metric in ("LRP", "LRP_loc", "LRP_FP", "LRP_FN", "PQ"):
        results[f"{metric}_per_class"] = (100.0 * per_class[metric]).tolist()
    return results


def dataset_counts(pairs: List[ImagePair], num_classes: int) -> np.ndarray:
    """The counts (rows ``TP, FP, FN, IOU``) summed over the images, each read from its two PNGs."""
    counts, lookup = np.zeros((4, num_classes)), SegmentLookup()
    for pair in pairs:
        gt_ids, pred_ids = read_ids(pair.gt_png), read_ids(pair.pred_png)
        if gt_ids.shape != pred_ids.shape:
            raise PanopticFileError(
                f"{pair.pred_png}: image_id {pair.image_id!r} is {pred_ids.shape[1]}x{pred_ids.shape[0]} pixels, its "
                f"ground truth {pair.gt_png} {gt_ids.shape[1]}x{gt_ids.shape[0]}"
            )
        counts += image_counts(overlaps(gt_ids, pred_ids, pair, lookup), pair, num_classes)
    return counts


def evaluate_panoptic(gt_json: str, gt_folder: str, pred_json: str, pred_folder: str) -> Dict[str, Any]:
    """LRP and PQ of the COCO panoptic predictions ``pred_json`` (with the PNGs of ``pred_folder``) on the ground
    truth ``gt_json`` (PNGs in ``gt_folder``): ``LRP``, ``LRP_loc``, ``LRP_FP``, ``LRP_FN``, ``PQ``, ``SQ``, ``RQ``
    (x100) and ``num_classes`` for all classes, the same suffixed ``_th`` (things) and ``_st`` (stuff); ``classes``
    (category ids, file order), ``isthing``, ``TP_per_class``, ``FP_per_class``, ``FN_per_class`` and ``LRP_per_class``,
    ``LRP_loc_per_class``, ``LRP_FP_per_class``, ``LRP_FN_per_class``, ``PQ_per_class`` (x100, NaN where undefined).
    Raises :class:`PanopticFileError` naming the file, image, segment and key of a problem."""
    categories, pairs = image_pairs(gt_json, gt_folder, pred_json, pred_folder)
    return panoptic_results(dataset_counts(pairs, len(categories.ids)), categories)
