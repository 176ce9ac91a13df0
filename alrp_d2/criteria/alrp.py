"""aLRP Loss as a ranking criterion (Oksuz et al., NeurIPS 2020)."""

from __future__ import annotations

from typing import Any, List, Sequence

import torch
from torch import Tensor

from ..losses import AlrpLossTerms, alrp_loss_indexed, alrp_loss_sets
from .localisation import LocErrorCriterion
from .ranking_criterion import CriterionOutput, CriterionSet, set_fields
from .registry import RANKING_CRITERION_REGISTRY
from .targets import PositiveTargets, Targets

__all__ = ["AlrpCriterion"]


@RANKING_CRITERION_REGISTRY.register()
class AlrpCriterion(LocErrorCriterion):
    """aLRP Loss (Eq. 11-13, App. E Alg. 2): one ranking of all (row, class) pairs whose positives' errors
    include their E_loc; ``loss_cls`` carries the whole error-driven update of the logits, ``loss_loc`` is the
    mean E_loc (self-balanced by the head, Sec. 4.2). MODEL.ALRP.CRITERION "AlrpCriterion"."""

    def __init__(self, *, delta: float = 1.0, loc_error_kind: str, tau: float, eps: float = 1e-5):
        """
        Args:
            delta, loc_error_kind, tau: see :class:`LocErrorCriterion` (delta: the paper's 1.0 by default).
            eps: the gate of the ranking errors, N_FP >= eps (App. E line 28).
        """
        super().__init__(delta=delta, loc_error_kind=loc_error_kind, tau=tau)
        self.eps = eps

    def __call__(self, logits: Tensor, targets: Targets, loc_losses: Tensor, group: Any) -> CriterionOutput:
        assert isinstance(targets, PositiveTargets)
        terms = alrp_loss_indexed(
            logits, targets.flat_index(logits.shape[-1]), loc_losses, targets.valid, self.delta, self.eps, group
        )
        return CriterionOutput(terms.loss_cls, terms.loss_loc, torch.ones_like(terms.loss_loc), terms.statistics)

    def rank_sets(self, sets: Sequence[CriterionSet], group: Any) -> List[CriterionOutput]:
        terms = alrp_loss_sets([s.ranking(s.loc_losses) for s in sets], self.delta, self.eps, group)
        return [
            CriterionOutput(fields[0], fields[1], torch.ones_like(fields[1]), AlrpLossTerms(*fields).statistics)
            for fields in set_fields(*terms)
        ]
