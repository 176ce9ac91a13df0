"""The ranking losses of alrp-d2 in detectron2's LazyConfigs: a head's loss as a ``LazyCall`` node, and the switch of a
detectron2 R-CNN (``model_zoo.get_config("common/models/mask_rcnn_fpn.py").model`` or any config built on it) to
ranking-loss heads. docs/lazyconfig.md shows them on detectron2's own configs.

A dense detector switches by its class and one argument::

    model._target_ = AlrpRetinaNet
    model.ranking_loss = alrp_loss("retinanet")
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from detectron2.config import LazyCall as L
from detectron2.utils.registry import locate
from omegaconf import DictConfig

from .criteria import CorrelationTerm
from .criteria.registry import ranking_criterion, ranking_criterion_class
from .modeling import AlrpFastRCNNOutputLayers, AlrpROIHeads, AlrpRPN, HeadRankingLoss, RankSortMaskHead

__all__ = ["alrp_loss", "ap_loss", "correlation", "rank_sort_loss", "ranked_rcnn", "registered_criterion"]

LossOf = Callable[..., DictConfig]


def registered_criterion(name: str, **arguments: Any) -> DictConfig:
    """The ``LazyCall`` of the criterion registered as ``name`` (the project's or a user's, registered in
    :data:`~alrp_d2.criteria.RANKING_CRITERION_REGISTRY`) with its constructor ``arguments``."""
    return L(ranking_criterion)(name=name, **arguments)


def alrp_loss(
    name: str, *, delta: float = 1.0, tau: float = 0.5, loc_error_kind: str = "giou", loc_weight: float = 50.0, **kwargs
) -> DictConfig:
    """aLRP Loss of head ``name`` (paper Sec. 4), self-balanced from ``loc_weight`` (Sec. 4.2); ``kwargs``: further
    :class:`HeadRankingLoss` arguments (``loss_weight``, ``ranking``, ``terms``, ``self_balanced``)."""
    kwargs.setdefault("self_balanced", True)
    criterion = registered_criterion("AlrpCriterion", delta=delta, loc_error_kind=loc_error_kind, tau=tau)
    return L(HeadRankingLoss)(name=name, criterion=criterion, loc_weight=loc_weight, **kwargs)


def ap_loss(
    name: str, *, loc_loss: str = "smooth_l1", delta: float = 1.0, tau: float = 0.5, loc_weight: float = 1.0, **kwargs
) -> DictConfig:
    """The official, interpolated AP Loss of head ``name`` with the localisation loss ``loc_loss`` and a constant
    ``loc_weight`` (the paper's AP Loss rows, App. G)."""
    criterion = registered_criterion(
        "InterpolatedAPCriterion", delta=delta, loc_loss=loc_loss, loc_error_kind="giou", tau=tau, eps=None
    )
    return L(HeadRankingLoss)(name=name, criterion=criterion, loc_weight=loc_weight, self_balanced=False, **kwargs)


def rank_sort_loss(name: str, *, delta: float = 0.5, loc_error_kind: str = "giou", **kwargs) -> DictConfig:
    """Rank & Sort Loss of head ``name`` (Oksuz et al., ICCV 2021), its box loss balanced by the loss values of every
    step."""
    criterion = registered_criterion("RankSortCriterion", delta=delta, loc_error_kind=loc_error_kind)
    return L(HeadRankingLoss)(name=name, criterion=criterion, loc_weight=1.0, self_balanced=False, **kwargs)


def correlation(kind: str = "spearman", weight: float = 0.1, per_level: bool = True) -> DictConfig:
    """Correlation Loss (Kahraman et al., AAAI 2023) as a term of a head's ranking loss (``terms=[correlation()]``)
    or the ``correlation`` argument of :class:`~alrp_d2.modeling.CorrelationRetinaNet`."""
    return L(CorrelationTerm)(kind=kind, weight=weight, per_level=per_level)


def ranked_rcnn(
    model: DictConfig,
    loss: LossOf = rank_sort_loss,
    *,
    rpn_weight: float = 0.2,
    max_mask_positives: int = 200,
    terms: Sequence[DictConfig] = (),
    rpn_loss: Optional[LossOf] = None,
) -> DictConfig:
    """Switches the detectron2 R-CNN config ``model`` (in place; returned) to ranking-loss heads: the RPN
    (:class:`AlrpRPN`, every labelled anchor ranked, its loss weighted by ``rpn_weight``) and the box head
    (:class:`AlrpROIHeads`, every proposal ranked) trained by ``loss(name)`` (``rpn_loss`` for the RPN if given,
    e.g. aLRP Loss with the RPN's tau 0.7), with the additive ``terms``. A mask head becomes Rank & Sort Mask R-CNN's
    (:class:`RankSortMaskHead`: score-weighted, balanced by the box head's loss, at most ``max_mask_positives``
    positives) when the criterion of ``loss`` balances a head's other tasks (Rank & Sort Loss); otherwise it keeps
    detectron2's loss."""
    rpn = model.proposal_generator
    rpn._target_ = AlrpRPN
    rpn.ranking_loss = (rpn_loss or loss)("rpn", loss_weight=rpn_weight, terms=list(terms))
    heads = model.roi_heads
    heads._target_ = AlrpROIHeads
    box_loss = loss("box", terms=list(terms))
    box_loss.ranking = "per_worker"
    if "mask_head" in heads and _balances_tasks(box_loss):
        box_loss.balanced_tasks = [RankSortMaskHead.box_balanced_task]
        heads.mask_head._target_ = RankSortMaskHead
        heads.mask_head.max_positives = max_mask_positives
        heads.mask_head.ranking = "${..box_predictor.ranking_loss.ranking}"
    heads.box_predictor._target_ = AlrpFastRCNNOutputLayers
    heads.box_predictor.ranking_loss = box_loss  # a copy: edit box_loss before
    return model


def _balances_tasks(loss: Any) -> bool:
    """Whether the criterion of the ``LazyCall`` loss ``loss`` (a :func:`registered_criterion`, or a ``LazyCall`` of
    a criterion class) weights a head's other tasks."""
    target = loss.criterion._target_
    target = locate(target) if isinstance(target, str) else target
    if target is ranking_criterion:
        target = ranking_criterion_class(loss.criterion.name, key="criterion name")
    return bool(target.balances_tasks)
