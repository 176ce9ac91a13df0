"""What the criteria share of the localisation losses: the configured E_loc, the positives' E_loc and the base of the
criteria whose localisation loss it is (aLRP Loss, AP Loss)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from torch import Tensor

from ..config.checks import require_config
from ..losses import loc_error
from ..losses.localisation_error import LOC_ERROR_KINDS
from .arguments import check_choice, check_delta, check_tau
from .config_keys import HeadKeys, configured_delta, configured_tau
from .ranking_criterion import PositiveSource, RankingCriterion
from .targets import PositiveTargets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["LocErrorCriterion", "configured_loc_error", "positive_loc_errors"]


def configured_loc_error(cfg: CfgNode) -> str:
    """MODEL.ALRP.LOC_ERROR, one of :data:`alrp_d2.losses.localisation_error.LOC_ERROR_KINDS`."""
    kind = cfg.MODEL.ALRP.LOC_ERROR
    require_config(kind in LOC_ERROR_KINDS, "MODEL.ALRP.LOC_ERROR", kind, f"must be one of {LOC_ERROR_KINDS}")
    return kind


def positive_loc_errors(positives: PositiveTargets, source: PositiveSource, kind: str, tau: float) -> Tensor:
    """E_loc of the positives' decoded boxes against their targets (App. E line 12)."""
    pred_boxes, target_boxes = source.decoded_boxes(positives)
    return loc_error(pred_boxes, target_boxes, kind, tau)


class LocErrorCriterion(RankingCriterion):
    """A criterion of a smoothed ranking (delta > 0) whose localisation loss is the positives' E_loc (Sec. 2.2)."""

    def __init__(self, *, delta: float, loc_error_kind: str, tau: float):
        """
        Args:
            delta: smoothness of the step function (Eq. 14), > 0.
            loc_error_kind, tau: E_loc (see :func:`alrp_d2.losses.loc_error`).
        """
        check_delta(self, delta)
        check_choice(self, "loc_error_kind", loc_error_kind, LOC_ERROR_KINDS)
        check_tau(self, tau)
        self.delta = delta
        self.loc_error_kind = loc_error_kind
        self.tau = tau

    @classmethod
    def from_config(cls, cfg: CfgNode, keys: HeadKeys) -> Dict[str, Any]:
        return {
            "delta": configured_delta(cfg, keys),
            "loc_error_kind": configured_loc_error(cfg),
            "tau": configured_tau(cfg, keys),
        }

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        return positive_loc_errors(positives, source, self.loc_error_kind, self.tau)
