"""A criterion that balances like Rank & Sort Loss, defined outside the package: a sigmoid cross-entropy ranking
loss with a score-weighted GIoU box loss balanced by the values of every step, which also weights and balances a
head's other tasks (RS Mask R-CNN's mask loss). ``tests/d2/test_user_criterion.py`` trains RS Mask R-CNN with it
by config alone: nothing outside this file knows it."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import torch.nn.functional as F
from torch import Tensor

from alrp_d2.criteria import (
    RANKING_CRITERION_REGISTRY,
    CriterionOutput,
    CriterionSet,
    PositiveSource,
    PositiveTargets,
    RankingCriterion,
    Targets,
    value_balance,
)
from alrp_d2.losses import RankingStatistics
from alrp_d2.losses.global_ranking import global_weighted_mean
from alrp_d2.losses.localisation_error import paired_iou_giou


@RANKING_CRITERION_REGISTRY.register()
class BalancedCrossEntropyCriterion(RankingCriterion):
    """Mean sigmoid cross-entropy of the valid (row, class) pairs per positive; 1 - GIoU of the positives' boxes,
    averaged with their detached best class scores, times ``loss_cls / loss_box`` of the step."""

    allows_self_balance = False
    balances_tasks = True
    component_names = ("weight",)

    @classmethod
    def from_config(cls, cfg: Any, keys: Any) -> Dict[str, Any]:
        return {}

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        return 1.0 - paired_iou_giou(*source.decoded_boxes(positives))[1]

    def __call__(self, sets: Sequence[CriterionSet], group: Any) -> List[CriterionOutput]:
        return [self._one_set(logits, targets, loc_losses, group) for logits, targets, loc_losses in sets]

    def _one_set(self, logits: Tensor, targets: Targets, loc_losses: Tensor, group: Any) -> CriterionOutput:
        labels = logits.new_zeros(logits.shape).flatten()
        labels[targets.ranked.flat_index(logits.shape[-1])] = 1.0
        losses = F.binary_cross_entropy_with_logits(logits.flatten(), labels, reduction="none")
        valid = targets.ranked.valid.expand_as(logits).flatten()
        loss_cls = (losses * valid).sum() / max(len(targets.ranked.row), 1)
        scores = logits.detach()[targets.box.row].sigmoid().amax(dim=-1)
        loss_box = global_weighted_mean(loc_losses, scores, group)
        balance = value_balance(loss_cls.detach(), loss_box.detach())
        zero = loss_cls.detach() * 0
        return CriterionOutput(loss_cls, loss_box, balance, RankingStatistics.of(zero, zero, weight=balance), scores)

    def task_weight(self, output: CriterionOutput, task_loss: Tensor) -> Tensor:
        return value_balance(output.loss_cls.detach(), task_loss.detach())
