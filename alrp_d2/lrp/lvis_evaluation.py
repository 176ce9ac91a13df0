"""LRP on LVIS as the official LRP-Error fork of the LVIS API computes it (its ``LVISEval.accumulate`` and
``summarize``): federated matching at IoU 0.5 (:mod:`.lvis_matching`), oLRP of every category with ground truth
(TPAMI 2021, Eq. 2 minimised over the score thresholds; :func:`~.lrp_metric.optimal_lrp`), and its means over the
categories, by frequency group (rare, common, frequent) and by area range."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .lrp_metric import LRP_TAU, ClassResult, OptimalLRP, optimal_lrp
from .lvis_files import FREQUENCY_GROUPS, IOU_TYPES, Source, check_ground_truth, check_results, read_source
from .lvis_matching import LVIS_AREA_RANGES, LVIS_MAX_DETECTIONS, federated_candidates, federated_matches
from .results import PER_CLASS_KEYS, per_class_lists

#: The means of :func:`evaluate_lvis` (x100), in the order the command and the evaluator print them.
LVIS_LRP_METRICS = (
    "oLRP",
    "oLRP_loc",
    "oLRP_FP",
    "oLRP_FN",
    "oLRP_r",
    "oLRP_c",
    "oLRP_f",
    "oLRP_small",
    "oLRP_medium",
    "oLRP_large",
)
#: The per-category lists of :func:`evaluate_lvis`, aligned with ``classes``.
LVIS_PER_CLASS_KEYS = ("frequencies", "num_gt_per_class", *PER_CLASS_KEYS)


def _optimal_lrps(matches: Any) -> List[Optional[OptimalLRP]]:
    """oLRP of every category (``None`` without ground truth in the area range)."""
    return [
        optimal_lrp(scores, is_tp, ious, num_gt, LRP_TAU) if num_gt > 0 else None
        for num_gt, (scores, is_tp, ious) in zip(matches.num_gt.tolist(), matches.per_class())
    ]


def _mean(values: Sequence[Optional[float]]) -> float:
    """The mean (x100) of the defined values, NaN when there is none (the official code's -1)."""
    defined = [value for value in values if value is not None]
    return 100.0 * sum(defined) / len(defined) if defined else float("nan")


def _summary(lrps: Sequence[Optional[OptimalLRP]], frequencies: Sequence[str]) -> Dict[str, float]:
    """oLRP and its components over the categories with ground truth (the localisation and FP components over those
    with a TP), and oLRP by frequency group."""
    defined = [lrp for lrp in lrps if lrp is not None]
    summary = {
        "oLRP": _mean([lrp.olrp for lrp in defined]),
        "oLRP_loc": _mean([lrp.loc for lrp in defined]),
        "oLRP_FP": _mean([lrp.fp for lrp in defined]),
        "oLRP_FN": _mean([lrp.fn for lrp in defined]),
    }
    for group in FREQUENCY_GROUPS:
        in_group = [lrp for lrp, frequency in zip(lrps, frequencies) if frequency == group and lrp is not None]
        summary[f"oLRP_{group}"] = _mean([lrp.olrp for lrp in in_group])
    return summary


def evaluate_lvis(
    ground_truth: Source,
    detections: Source,
    iou_type: str = "bbox",
    max_detections: Optional[int] = LVIS_MAX_DETECTIONS,
) -> Dict[str, Any]:
    """LRP of LVIS results ``detections`` (a results file's path, or its list of detections) on the LVIS ground
    truth ``ground_truth`` (an annotation file's path, or its content), with the boxes' (``iou_type="bbox"``) or the
    masks' (``"segm"``) IoUs and at most ``max_detections`` detections an image (None: all).

    Returns :data:`LVIS_LRP_METRICS` (x100; area 'all' but ``oLRP_small``, ``oLRP_medium``, ``oLRP_large``; NaN where
    no category qualifies), ``classes`` (the category ids, sorted) and per category :data:`LVIS_PER_CLASS_KEYS` (area
    'all'; x100 but the threshold; NaN where undefined). A file that cannot be evaluated is an
    :class:`~.lvis_files.LVISFileError` naming it, the entry and the key."""
    if iou_type not in IOU_TYPES:
        raise ValueError(f"iou_type must be one of {IOU_TYPES}, got {iou_type!r}")
    if max_detections is not None and (not isinstance(max_detections, int) or max_detections < 1):
        raise ValueError(f"max_detections must be an integer >= 1 or None (all), got {max_detections!r}")
    content = check_ground_truth(*read_source(ground_truth, "ground truth"), iou_type)
    results = check_results(*read_source(detections, "detections"), content, iou_type)
    categories = sorted(content["categories"], key=lambda category: category["id"])
    frequencies = [category["frequency"] for category in categories]
    candidates, ignore, not_exhaustive = federated_candidates(content, results, iou_type, max_detections)
    per_area = {}
    for area, area_range in LVIS_AREA_RANGES.items():
        matches = federated_matches(candidates, ignore, not_exhaustive, area_range)
        per_area[area] = (matches.num_gt, _optimal_lrps(matches))
    num_gt, lrps = per_area["all"]
    summary = _summary(lrps, frequencies)
    for area in ("small", "medium", "large"):
        summary[f"oLRP_{area}"] = _mean([None if lrp is None else lrp.olrp for lrp in per_area[area][1]])
    classes = [ClassResult(num_gt=int(n), lrp=lrp, rho=None) for n, lrp in zip(num_gt.tolist(), lrps)]
    return {
        **{metric: summary[metric] for metric in LVIS_LRP_METRICS},
        "classes": [category["id"] for category in categories],
        "frequencies": frequencies,
        "num_gt_per_class": [c.num_gt for c in classes],
        **per_class_lists(classes),
    }
