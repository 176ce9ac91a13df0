"""AP Loss as a ranking criterion (Chen et al., CVPR 2019), with a separate localisation loss: the paper's AP Loss
baselines (aLRP paper Table 2, App. G)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from ..losses import RankingLossOutput, ap_loss
from ..losses.global_ranking import global_set_means
from .arguments import check_choice
from .config_keys import HeadKeys
from .localisation import LocErrorCriterion
from .ranking_criterion import CriterionOutput, CriterionSet, PositiveSource, set_fields
from .registry import RANKING_CRITERION_REGISTRY
from .targets import PositiveTargets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["AP_LOC_LOSSES", "APCriterion", "InterpolatedAPCriterion"]

#: The localisation loss beside AP Loss (MODEL.ALRP.AP_LOC_LOSS): E_loc of the decoded boxes ("giou") or the
#: head's Smooth L1 of the encoded deltas ("smooth_l1", the official AP Loss heads).
AP_LOC_LOSSES = ("giou", "smooth_l1")


@RANKING_CRITERION_REGISTRY.register()
class APCriterion(LocErrorCriterion):
    """AP Loss without interpolation (MODEL.ALRP.CRITERION "APCriterion", an ablation): ``loss_cls`` is AP Loss of the
    ranking of all (row, class) pairs, ``loss_loc`` the mean localisation loss of MODEL.ALRP.AP_LOC_LOSS, weighted
    by the head's localisation weight."""

    #: Whether the ranking errors are the official interpolated ones (:func:`alrp_d2.losses.ap_loss`).
    interpolated: ClassVar[bool] = False

    def __init__(
        self, *, delta: float = 1.0, loc_loss: str, loc_error_kind: str, tau: float, eps: Optional[float] = 1e-5
    ):
        """
        Args:
            delta: smoothness of the step function, > 0 (the paper's 1.0 by default).
            loc_loss: one of :data:`AP_LOC_LOSSES`.
            loc_error_kind, tau: E_loc with ``loc_loss`` "giou" (see :func:`alrp_d2.losses.loc_error`).
            eps: the gate of the ranking errors, N_FP >= eps (None: no gate, the official interpolated AP Loss).
        """
        check_choice(self, "loc_loss", loc_loss, AP_LOC_LOSSES)
        super().__init__(delta=delta, loc_error_kind=loc_error_kind, tau=tau)
        self.loc_loss = loc_loss
        self.eps = eps

    @classmethod
    def from_config(cls, cfg: CfgNode, keys: HeadKeys) -> Dict[str, Any]:
        loc_loss = cfg.MODEL.ALRP.AP_LOC_LOSS
        return {**super().from_config(cfg, keys), "loc_loss": loc_loss, "eps": None if cls.interpolated else 1e-5}

    @classmethod
    def config_keys(cls, keys: HeadKeys) -> Dict[str, str]:
        return {**super().config_keys(keys), "loc_loss": "MODEL.ALRP.AP_LOC_LOSS"}

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        if self.loc_loss == "smooth_l1":
            return source.encoded_box_loss(positives)
        return super().localisation_losses(positives, source)

    def __call__(self, sets: Sequence[CriterionSet], group: Any) -> List[CriterionOutput]:
        terms = ap_loss([s.ranking() for s in sets], self.interpolated, self.delta, self.eps, group)
        losses = [s.loc_losses for s in sets]
        loss_loc = global_set_means(losses, [torch.ones_like(loss) for loss in losses], group)
        return [
            CriterionOutput(loss, loc, torch.ones_like(loc), RankingLossOutput(loss, positive, negative).statistics)
            for loss, positive, negative, loc in set_fields(*terms, loss_loc)
        ]


@RANKING_CRITERION_REGISTRY.register()
class InterpolatedAPCriterion(APCriterion):
    """The official, interpolated AP Loss that trained the paper's AP Loss rows (MODEL.ALRP.CRITERION
    "InterpolatedAPCriterion"; no N_FP gate)."""

    interpolated = True
