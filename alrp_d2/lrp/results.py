"""The LRP results of an evaluation, the same keys for :class:`~alrp_d2.lrp.LRP`, :func:`~alrp_d2.lrp.evaluate_coco`
and the command: the means (x100, as COCO AP; ``rho`` in [-1, 1]) and, per class, oLRP, its components and the
LRP-optimal score threshold (NaN where undefined)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .average_precision import average_precision
from .lrp_metric import LRP_TAU, ClassResult, evaluate_classes, summarise
from .matching import CandidateMatches, matches_at

AP90_IOU = 0.9
#: The dataset-level metrics (x100 but rho), in the order the evaluator logs them.
LRP_METRICS = ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90", "rho")
#: The per-class lists, aligned with ``classes``.
PER_CLASS_KEYS = ("oLRP_per_class", "oLRP_loc_per_class", "oLRP_FP_per_class", "oLRP_FN_per_class", "thresholds")


def _scaled(value: Optional[float], scale: float) -> float:
    return float("nan") if value is None else scale * value


def per_class_lists(classes: Sequence[ClassResult]) -> Dict[str, List[float]]:
    """oLRP and its components (x100) and the LRP-optimal threshold of every class; NaN for a class without ground
    truth (all) or without a true positive (the components and the threshold)."""
    lrps = [c.lrp for c in classes]
    return {
        "oLRP_per_class": [_scaled(None if r is None else r.olrp, 100.0) for r in lrps],
        "oLRP_loc_per_class": [_scaled(None if r is None else r.loc, 100.0) for r in lrps],
        "oLRP_FP_per_class": [_scaled(None if r is None else r.fp, 100.0) for r in lrps],
        "oLRP_FN_per_class": [_scaled(None if r is None else r.fn, 100.0) for r in lrps],
        "thresholds": [_scaled(None if r is None else r.threshold, 1.0) for r in lrps],
    }


def lrp_results(candidates: CandidateMatches, class_ids: Sequence[Any]) -> Dict[str, Any]:
    """The results of the candidate matches of the classes ``class_ids`` (their labels or category ids, in class
    index order): oLRP at IoU 0.5 and AP at IoU 0.9 on the same IoUs."""
    classes = evaluate_classes(matches_at(candidates, LRP_TAU), LRP_TAU)
    summary = summarise(classes)
    summary["AP90"] = average_precision(matches_at(candidates, AP90_IOU))
    return {
        **{metric: summary[metric] for metric in LRP_METRICS},
        "classes": list(class_ids),
        "num_gt_per_class": [c.num_gt for c in classes],
        **per_class_lists(classes),
    }
