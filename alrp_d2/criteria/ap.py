"""AP Loss as a ranking criterion (Chen et al., CVPR 2019), with a separate localisation loss: the paper's AP Loss
baselines (aLRP paper Table 2, App. G)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Dict, Optional

import torch
from torch import Tensor

from ..config_check import require_config
from ..losses import ap_loss_indexed
from ..losses.global_ranking import global_mean
from .localisation import configured_loc_error, positive_loc_errors
from .ranking_criterion import CriterionOutput, PositiveSource, RankingCriterion
from .registry import RANKING_CRITERION_REGISTRY
from .targets import PositiveTargets, Targets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["AP_LOC_LOSSES", "APCriterion", "InterpolatedAPCriterion"]

#: The localisation loss beside AP Loss (MODEL.ALRP.AP_LOC_LOSS): E_loc of the decoded boxes ("giou") or the
#: head's Smooth L1 of the encoded deltas ("smooth_l1", the official AP Loss heads).
AP_LOC_LOSSES = ("giou", "smooth_l1")


@RANKING_CRITERION_REGISTRY.register()
class APCriterion(RankingCriterion):
    """AP Loss without interpolation (MODEL.ALRP.CRITERION "APCriterion", an ablation): ``loss_cls`` is AP Loss of the
    ranking of all (row, class) pairs, ``loss_loc`` the mean localisation loss of MODEL.ALRP.AP_LOC_LOSS, weighted
    by the head's localisation weight."""

    #: Whether the ranking errors are the official interpolated ones (:func:`alrp_d2.losses.ap_loss_indexed`).
    interpolated: ClassVar[bool] = False

    def __init__(self, *, delta: float, loc_loss: str, loc_error_kind: str, tau: float, eps: Optional[float] = 1e-5):
        """
        Args:
            delta: smoothness of the step function.
            loc_loss: one of :data:`AP_LOC_LOSSES`.
            loc_error_kind, tau: E_loc with ``loc_loss`` "giou" (see :func:`alrp_d2.losses.loc_error`).
            eps: the gate of the ranking errors, N_FP >= eps (None: no gate, the official interpolated AP Loss).
        """
        super().__init__(delta=delta)
        require_config(
            loc_loss in AP_LOC_LOSSES, "MODEL.ALRP.AP_LOC_LOSS", loc_loss, f"loc_loss must be one of {AP_LOC_LOSSES}"
        )
        self.loc_loss = loc_loss
        self.loc_error_kind = loc_error_kind
        self.tau = tau
        self.eps = eps

    @classmethod
    def from_config(cls, cfg: CfgNode, *, delta: float, tau: float) -> Dict[str, Any]:
        alrp = cfg.MODEL.ALRP
        eps = None if cls.interpolated else 1e-5
        return {
            "delta": delta,
            "loc_loss": alrp.AP_LOC_LOSS,
            "loc_error_kind": configured_loc_error(cfg),
            "tau": tau,
            "eps": eps,
        }

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        if self.loc_loss == "smooth_l1":
            return source.encoded_box_loss(positives)
        return positive_loc_errors(positives, source, self.loc_error_kind, self.tau)

    def __call__(self, logits: Tensor, targets: Targets, loc_losses: Tensor, group: Any) -> CriterionOutput:
        assert isinstance(targets, PositiveTargets)
        ranking = ap_loss_indexed(
            logits, targets.flat_index(logits.shape[-1]), targets.valid, self.delta, self.eps, group, self.interpolated
        )
        loss_loc = global_mean(loc_losses, group)
        return CriterionOutput(
            ranking.loss,
            loss_loc,
            torch.ones_like(loss_loc),
            ranking.positive_gradient_magnitude,
            ranking.negative_gradient_magnitude,
        )


@RANKING_CRITERION_REGISTRY.register()
class InterpolatedAPCriterion(APCriterion):
    """The official, interpolated AP Loss that trained the paper's AP Loss rows (MODEL.ALRP.CRITERION
    "InterpolatedAPCriterion"; no N_FP gate)."""

    interpolated = True
