"""Rank & Sort Loss as a ranking criterion (Oksuz et al., "Rank & Sort Loss for Object Detection and Instance
Segmentation", ICCV 2021), with the semantics of the official RS heads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Sequence

from torch import Tensor

from ..losses import RankSortLossTerms, rank_sort_loss
from ..losses.global_ranking import global_set_means
from ..losses.localisation_error import LOC_ERROR_KINDS, paired_iou_giou
from .arguments import check_choice, check_delta
from .config_keys import HeadKeys
from .ranking_criterion import CriterionOutput, CriterionSet, PositiveSource, RankingCriterion, set_fields
from .registry import RANKING_CRITERION_REGISTRY
from .targets import PositiveTargets, RankSortTargets, RowLabels, Targets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["RankSortCriterion", "value_balance"]


def value_balance(value: Tensor, loss: Tensor) -> Tensor:
    """``value / loss`` (RS Loss's task-balancing coefficient), 0 where ``loss`` is 0, without a host
    synchronisation."""
    positive = loss > 0
    return (value / loss.where(positive, 1.0)).where(positive, 0.0)


@RANKING_CRITERION_REGISTRY.register()
class RankSortCriterion(RankingCriterion):
    """Rank & Sort Loss (MODEL.ALRP.CRITERION "RankSortCriterion"), as the official RS heads train: the ranking
    targets are the IoUs of the positives' predicted boxes (:class:`RankSortTargets`; a positive of IoU 0 ranks as
    a negative), the box loss of every positive (1 - GIoU, or 1 - IoU) is weighted by its detached best class score
    (``sigmoid(logit).max()`` over the classes of its row) and averaged with these weights, and it is balanced by
    the loss values of the step: ``loc_factor = (L_rank + L_sort) / L_box`` (detached, 0 when ``L_box`` is 0), logged
    as ``weight``. ``loss_cls`` is ``L_rank + L_sort`` in value; its gradient is RS Loss's (the ranking output
    carries the update of both errors). A head's other task (RS Mask R-CNN's mask loss) is weighted per positive by
    the same scores and balanced the same way: ``(L_rank + L_sort) / L_task``."""

    allows_self_balance = False
    balances_tasks = True
    component_names = ("rank", "sort", "weight")

    def __init__(self, *, delta: float = 0.5, loc_error_kind: str, eps: float = 1e-10):
        """
        Args:
            delta: smoothness of the step function, >= 0 (0: the unit step; the published 0.5 by default).
            loc_error_kind: the box loss, 1 - GIoU ("giou", mmdetection's GIoULoss) or 1 - IoU ("iou").
            eps: RS Loss's strict gates (the official 1e-10).
        """
        check_delta(self, delta, unit_step=True)
        check_choice(self, "loc_error_kind", loc_error_kind, LOC_ERROR_KINDS)
        self.delta = delta
        self.loc_error_kind = loc_error_kind
        self.eps = eps

    @classmethod
    def from_config(cls, cfg: CfgNode, keys: HeadKeys) -> Dict[str, Any]:
        return {"delta": cfg.MODEL.ALRP[keys.delta], "loc_error_kind": cfg.MODEL.ALRP.LOC_ERROR}

    def targets(self, rows: RowLabels, source: PositiveSource) -> Targets:
        return RankSortTargets.of_rows(rows, source.row_overlaps())

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        iou, giou = paired_iou_giou(*source.decoded_boxes(positives))
        return 1.0 - (giou if self.loc_error_kind == "giou" else iou)

    def __call__(self, sets: Sequence[CriterionSet], group: Any) -> List[CriterionOutput]:
        ranking = [s.ranking(_rank_sort_targets(s.targets).overlaps) for s in sets]
        terms = rank_sort_loss(ranking, self.delta, self.eps, group)
        scores = [_box_scores(s.logits, s.targets) for s in sets]
        loss_box = global_set_means([s.loc_losses for s in sets], scores, group)
        loss_cls = terms.ranking_loss + terms.sorting_loss
        balance = value_balance(loss_cls.detach(), loss_box.detach())
        outputs = []
        for (*fields, cls, box, weight), set_scores in zip(set_fields(*terms, loss_cls, loss_box, balance), scores):
            statistics = RankSortLossTerms(*fields).statistics.with_values(weight=weight)
            outputs.append(CriterionOutput(cls, box, weight, statistics, set_scores))
        return outputs

    def task_weight(self, output: CriterionOutput, task_loss: Tensor) -> Tensor:
        return value_balance(output.loss_cls.detach(), task_loss.detach())


def _rank_sort_targets(targets: Targets) -> RankSortTargets:
    assert isinstance(targets, RankSortTargets)
    return targets


def _box_scores(logits: Tensor, targets: Targets) -> Tensor:
    """(P,) the detached best class score of every box positive: the weight of its box loss."""
    return logits.detach()[targets.box.row].float().sigmoid().amax(dim=-1)
