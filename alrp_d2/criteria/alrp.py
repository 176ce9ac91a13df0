"""aLRP Loss as a ranking criterion (Oksuz et al., NeurIPS 2020)."""

from __future__ import annotations

from typing import Any, List, Sequence

import torch

from ..losses import AlrpLossTerms, alrp_loss
from .localisation import LocErrorCriterion
from .ranking_criterion import CriterionOutput, CriterionSet, set_fields
from .registry import RANKING_CRITERION_REGISTRY

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

    def __call__(self, sets: Sequence[CriterionSet], group: Any) -> List[CriterionOutput]:
        terms = alrp_loss([s.ranking(s.loc_losses) for s in sets], self.delta, self.eps, group)
        return [
            CriterionOutput(fields[0], fields[1], torch.ones_like(fields[1]), AlrpLossTerms(*fields).statistics)
            for fields in set_fields(*terms)
        ]
