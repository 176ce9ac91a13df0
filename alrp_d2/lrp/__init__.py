"""The LRP metric (Oksuz et al., ECCV 2018 / TPAMI 2021) without detectron2: numpy, torch, pycocotools and Pillow only.

- :class:`LRP`: a metric object with torchmetrics' ``MeanAveragePrecision`` conventions (``update(preds, target)``,
  ``compute()``, ``reset()``), on one or several processes;
- :func:`evaluate_coco`: the same results for pycocotools ``COCO`` objects; ``python -m alrp_d2.lrp GT.json
  DETECTIONS.json`` for COCO files (neither imports torch);
- :func:`optimal_lrp`: oLRP of one class from its matches;
- :func:`evaluate_panoptic`: LRP and PQ of COCO panoptic files (``python -m alrp_d2.lrp ... --panoptic``);
- :func:`evaluate_lvis`: LRP on LVIS (federated labels, by frequency group) on LVIS files or their content;
  ``python -m alrp_d2.lrp GT.json DETECTIONS.json --lvis``.

``alrp_d2.evaluation.COCOLRPEvaluator`` (detectron2) computes its LRP metrics with this package. docs/lrp.md.
"""

from typing import Any

from .coco_api import evaluate_coco
from .lrp_metric import optimal_lrp
from .lvis_evaluation import LVIS_LRP_METRICS, evaluate_lvis
from .lvis_files import LVISFileError
from .panoptic import evaluate_panoptic
from .panoptic_files import PanopticFileError
from .results import LRP_METRICS, PER_CLASS_KEYS

__all__ = [
    "LRP",
    "LRP_METRICS",
    "LVIS_LRP_METRICS",
    "LVISFileError",
    "PER_CLASS_KEYS",
    "PanopticFileError",
    "evaluate_coco",
    "evaluate_lvis",
    "evaluate_panoptic",
    "optimal_lrp",
]


def __getattr__(name: str) -> Any:
    """``LRP`` from ``.metric`` (torch), imported on first access: the command and ``evaluate_coco`` need no torch."""
    if name == "LRP":
        from .metric import LRP

        return LRP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
