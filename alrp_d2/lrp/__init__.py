"""The LRP metric (Oksuz et al., ECCV 2018 / TPAMI 2021) without detectron2: numpy, torch and pycocotools only.

- :class:`LRP`: a metric object with torchmetrics' ``MeanAveragePrecision`` conventions (``update(preds, target)``,
  ``compute()``, ``reset()``), on one or several processes;
- :func:`evaluate_coco`: the same results for pycocotools ``COCO`` objects; ``python -m alrp_d2.lrp GT.json
  DETECTIONS.json`` for COCO files (neither imports torch);
- :func:`optimal_lrp`: oLRP of one class from its matches.

``alrp_d2.evaluation.COCOLRPEvaluator`` (detectron2) computes its LRP metrics with this package. docs/lrp.md.
"""

from typing import Any

from .coco_api import evaluate_coco
from .lrp_metric import optimal_lrp
from .results import LRP_METRICS, PER_CLASS_KEYS

__all__ = ["LRP", "LRP_METRICS", "PER_CLASS_KEYS", "evaluate_coco", "optimal_lrp"]


def __getattr__(name: str) -> Any:
    """``LRP`` from ``.metric`` (torch), imported on first access: the command and ``evaluate_coco`` need no torch."""
    if name == "LRP":
        from .metric import LRP

        return LRP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
