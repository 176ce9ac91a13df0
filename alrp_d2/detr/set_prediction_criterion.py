"""A registered ranking criterion built by name with the arguments of a set-prediction loss, and the
:class:`~alrp_d2.detr.SetRankingLoss` of a criterion name and a mapping of options (the yacs keys
``MODEL.DETR.CRITERION`` and ``MODEL.DETR.LOSS_OPTIONS``)."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from ..criteria import RankingCriterion
from ..criteria.registry import ranking_criterion
from .set_ranking_loss import SetRankingLoss

__all__ = ["LOSS_KEYWORDS", "SET_PREDICTION_ARGUMENTS", "set_prediction_criterion", "set_ranking_loss"]

#: The arguments a set-prediction loss gives the project's criteria unless told otherwise: GIoU errors (the matched
#: boxes' GIoU, as DETR's box loss), and tau 0 in aLRP's E_loc = (1 - GIoU) / 2 / (1 - tau) (a Hungarian matching has
#: no positive-labelling IoU threshold). A criterion not listed (a user's) gets only the arguments given.
SET_PREDICTION_ARGUMENTS: Dict[str, Dict[str, Any]] = {
    "RankSortCriterion": {"loc_error_kind": "giou"},
    "AlrpCriterion": {"loc_error_kind": "giou", "tau": 0.0},
    "APCriterion": {"loc_loss": "giou", "loc_error_kind": "giou", "tau": 0.0},
    "InterpolatedAPCriterion": {"loc_loss": "giou", "loc_error_kind": "giou", "tau": 0.0},
}
#: The keywords of :class:`SetRankingLoss` in an options mapping; the others are the criterion's.
LOSS_KEYWORDS = (
    "box_terms",
    "l1_weight",
    "giou_weight",
    "rank_weight",
    "corr_weight",
    "corr_kind",
    "ranking",
    "box_normaliser",
)


def set_prediction_criterion(name: str, **arguments: Any) -> RankingCriterion:
    """The criterion registered as ``name`` (:func:`alrp_d2.criteria.registry.ranking_criterion`) with
    :data:`SET_PREDICTION_ARGUMENTS` of ``name`` overridden by ``arguments``; LazyConfig:
    ``L(set_prediction_criterion)(name="AlrpCriterion", delta=1.0)``."""
    return ranking_criterion(name, **{**SET_PREDICTION_ARGUMENTS.get(name, {}), **arguments})


def set_ranking_loss(criterion: str, options: Mapping[str, Any]) -> SetRankingLoss:
    """``SetRankingLoss(set_prediction_criterion(criterion, **criterion options), **loss options)``: ``options``'
    :data:`LOSS_KEYWORDS` go to the loss, the others to the criterion (the yacs ``MODEL.DETR.LOSS_OPTIONS``)."""
    loss_options = {key: value for key, value in options.items() if key in LOSS_KEYWORDS}
    criterion_arguments = {key: value for key, value in options.items() if key not in LOSS_KEYWORDS}
    return SetRankingLoss(set_prediction_criterion(criterion, **criterion_arguments), **loss_options)
