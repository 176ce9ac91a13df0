"""What the criteria share of the localisation losses: the configured E_loc, the positives' E_loc and the base of the
criteria whose localisation loss it is (aLRP Loss, AP Loss)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from torch import Tensor

from ..losses import loc_error
from ..losses.localisation_error import LOC_ERROR_KINDS
from .arguments import check_choice, check_delta, check_tau
from .config_keys import HeadKeys
from .ranking_criterion import PositiveSource, RankingCriterion
from .targets import PositiveTargets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["LocErrorCriterion", "positive_loc_errors"]


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
        alrp = cfg.MODEL.ALRP
        return {"delta": alrp[keys.delta], "loc_error_kind": alrp.LOC_ERROR, "tau": alrp[keys.tau]}

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        return positive_loc_errors(positives, source, self.loc_error_kind, self.tau)
