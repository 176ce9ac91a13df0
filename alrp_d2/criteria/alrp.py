"""aLRP Loss as a ranking criterion (Oksuz et al., NeurIPS 2020)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

import torch
from torch import Tensor

from ..losses import alrp_loss_indexed
from .localisation import configured_loc_error, positive_loc_errors
from .ranking_criterion import CriterionOutput, PositiveSource, RankingCriterion
from .registry import RANKING_CRITERION_REGISTRY
from .targets import PositiveTargets, Targets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["AlrpCriterion"]


@RANKING_CRITERION_REGISTRY.register()
class AlrpCriterion(RankingCriterion):
    """aLRP Loss (Eq. 11-13, App. E Alg. 2): one ranking of all (row, class) pairs whose positives' errors
    include their E_loc; ``loss_cls`` carries the whole error-driven update of the logits, ``loss_loc`` is the
    mean E_loc (self-balanced by the head, Sec. 4.2). MODEL.ALRP.CRITERION "AlrpCriterion"."""

    def __init__(self, *, delta: float, loc_error_kind: str, tau: float, eps: float = 1e-5):
        """
        Args:
            delta: smoothness of the step function (Eq. 14).
            loc_error_kind, tau: E_loc (see :func:`alrp_d2.losses.loc_error`).
            eps: the gate of the ranking errors, N_FP >= eps (App. E line 28).
        """
        super().__init__(delta=delta)
        self.loc_error_kind = loc_error_kind
        self.tau = tau
        self.eps = eps

    @classmethod
    def from_config(cls, cfg: CfgNode, *, delta: float, tau: float) -> Dict[str, Any]:
        return {"delta": delta, "loc_error_kind": configured_loc_error(cfg), "tau": tau}

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        return positive_loc_errors(positives, source, self.loc_error_kind, self.tau)

    def __call__(self, logits: Tensor, targets: Targets, loc_losses: Tensor, group: Any) -> CriterionOutput:
        assert isinstance(targets, PositiveTargets)
        terms = alrp_loss_indexed(
            logits, targets.flat_index(logits.shape[-1]), loc_losses, targets.valid, self.delta, self.eps, group
        )
        return CriterionOutput(
            terms.loss_cls,
            terms.loss_loc,
            torch.ones_like(terms.loss_loc),
            terms.positive_gradient_magnitude,
            terms.negative_gradient_magnitude,
        )
