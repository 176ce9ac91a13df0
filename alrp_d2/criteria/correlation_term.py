"""Correlation Loss (Kahraman, Oksuz, Kalkan, Akbas, AAAI 2023) as a term added to a head's loss: 1 - the
correlation of the positives' scores with the IoUs of their predicted boxes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

import torch
from torch import Tensor

from ..checks.errors import naming_config_keys, require_argument
from ..checks.hyperparameter_ranges import weight_problem
from ..losses.correlation_loss import CORRELATION_KINDS, correlation_loss, correlation_loss_per_level
from ..losses.global_ranking import RankingGroup, exchange_checked
from ..losses.localisation_error import paired_iou_giou
from .arguments import check_choice
from .ranking_criterion import PositiveSource
from .targets import PositiveTargets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["CorrelationTerm", "correlation_terms"]


class CorrelationTerm:
    """``weight * (1 - corr(scores, IoUs))`` of a head's positives (``loss_<head>_corr``), as the official Corr
    heads: the scores are the sigmoid scores of the positives' ground-truth classes, the IoUs those of their
    decoded boxes with their targets (detached, clamped at 1e-6), ``corr`` Spearman's (of soft ranks), Lin's
    concordance or Pearson's (:func:`alrp_d2.losses.correlation_loss`). With ``per_level`` it is the mean over
    the pyramid levels with at least 2 positives of each level's loss (the official ``use_loss_single``), else
    one correlation of all positives (a box head's proposals are one level). With a ranking group, the
    positives of all workers (O(P) communication)."""

    name = "corr"

    def __init__(self, kind: str, weight: float, per_level: bool = True):
        """
        Args:
            kind: one of :data:`alrp_d2.losses.CORRELATION_KINDS`.
            weight: the term's weight.
            per_level: the mean of the pyramid levels' losses, or one loss of all positives.
        """
        check_choice(self, "kind", kind, CORRELATION_KINDS)
        problem = weight_problem(weight, zero=True)
        require_argument(problem is None, "CorrelationTerm", "weight", weight, str(problem))
        self.kind = kind
        self.weight = weight
        self.per_level = per_level

    def __call__(
        self, logits: Tensor, positives: PositiveTargets, source: PositiveSource, group: Optional[RankingGroup]
    ) -> Tensor:
        scores = logits.reshape(-1)[positives.flat_index(logits.shape[-1])].sigmoid()
        dtype = scores.dtype
        pred_boxes, target_boxes = source.decoded_boxes(positives)
        ious = paired_iou_giou(pred_boxes.detach(), target_boxes)[0]
        levels = source.levels(positives) if self.per_level else None
        if group is not None:
            scores, ious, levels = _gathered(scores, ious, levels, group)
        # In float64 (P values): the result then depends on the order of the positives' sums by far less than the
        # network's float32 arithmetic, on one worker or gathered from many.
        scores64, ious64 = scores.double(), ious.double()
        if levels is None:
            loss = correlation_loss(scores64, ious64, self.kind)
        else:
            loss = correlation_loss_per_level(scores64, ious64, levels, source.num_levels, self.kind)
        return self.weight * loss.to(dtype)

    def __repr__(self) -> str:
        return f"CorrelationTerm(kind={self.kind!r}, weight={self.weight}, per_level={self.per_level})"


def _gathered(scores: Tensor, ious: Tensor, levels: Optional[Tensor], group: RankingGroup) -> Any:
    """The scores (this worker's differentiable), IoUs and levels of the positives of every worker."""
    _, exchange = exchange_checked(lambda: len(scores), scores.device, group)
    assert exchange is not None
    columns = [scores.detach().double(), ious.double()] + ([] if levels is None else [levels.double()])
    table = exchange.gather(torch.stack(columns, dim=1))
    all_scores = exchange.with_local(table[:, 0], scores)
    return all_scores, table[:, 1], None if levels is None else table[:, 2].long()


def correlation_terms(cfg: CfgNode) -> List[CorrelationTerm]:
    """The Correlation Loss term of MODEL.ALRP.CORR_KIND, CORR_WEIGHT and CORR_PER_LEVEL, none with weight 0 (the
    keys are checked all the same, by the term's constructor)."""
    alrp = cfg.MODEL.ALRP
    with naming_config_keys(cfg, {"kind": "MODEL.ALRP.CORR_KIND", "weight": "MODEL.ALRP.CORR_WEIGHT"}):
        term = CorrelationTerm(alrp.CORR_KIND, alrp.CORR_WEIGHT, alrp.CORR_PER_LEVEL)
    return [term] if alrp.CORR_WEIGHT > 0 else []
