"""Evaluation with LRP metrics (optimal LRP, its components, AP90, rank correlation) next to COCO
AP (and LVIS's LRP next to LVIS AP), and inference filtered by the LRP-optimal per-class score thresholds.

The LRP metric (:mod:`alrp_d2.lrp`) imports without
detectron2; the evaluator and the predictor, which need detectron2, are imported on first access."""

from importlib import import_module
from typing import Any

from ..lrp import optimal_lrp

_DETECTRON2_NAMES = {
    "AlrpPredictor": ".predictor",
    "COCOLRPEvaluator": ".coco_lrp_evaluation",
    "COCOPanopticLRPEvaluator": ".panoptic_lrp_evaluation",
    "LazyPredictor": ".lazy_predictor",
    "LVISLRPEvaluator": ".lvis_lrp_evaluation",
    "LRP_THRESHOLDS_FILE": ".coco_lrp_evaluation",
    "LRPThresholdPredictor": ".lrp_threshold_predictor",
    "filter_by_class_thresholds": ".lrp_threshold_predictor",
    "load_lrp_thresholds": ".lrp_threshold_predictor",
}

__all__ = ["optimal_lrp", *_DETECTRON2_NAMES]


def __getattr__(name: str) -> Any:
    """Lazy access to the detectron2-based evaluator and predictor (PEP 562)."""
    if name not in _DETECTRON2_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_DETECTRON2_NAMES[name], __name__), name)
