"""What the criteria share of the localisation losses: the configured E_loc and the positives' E_loc."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from ..config_check import require_config
from ..losses import loc_error
from ..losses.localisation_error import LOC_ERROR_KINDS
from .ranking_criterion import PositiveSource
from .targets import PositiveTargets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["configured_loc_error", "positive_loc_errors"]


def configured_loc_error(cfg: CfgNode) -> str:
    """MODEL.ALRP.LOC_ERROR, one of :data:`alrp_d2.losses.localisation_error.LOC_ERROR_KINDS`."""
    kind = cfg.MODEL.ALRP.LOC_ERROR
    require_config(kind in LOC_ERROR_KINDS, "MODEL.ALRP.LOC_ERROR", kind, f"must be one of {LOC_ERROR_KINDS}")
    return kind


def positive_loc_errors(positives: PositiveTargets, source: PositiveSource, kind: str, tau: float) -> Tensor:
    """E_loc of the positives' decoded boxes against their targets (App. E line 12)."""
    pred_boxes, target_boxes = source.decoded_boxes(positives)
    return loc_error(pred_boxes, target_boxes, kind, tau)
