"""The ranking criteria of the project, registered in :data:`~alrp_d2.modeling.RANKING_CRITERION_REGISTRY`."""

from .alrp_criterion import AlrpCriterion
from .ap_criterion import APCriterion, InterpolatedAPCriterion
from .rank_sort_criterion import RankSortCriterion

__all__ = ["APCriterion", "AlrpCriterion", "InterpolatedAPCriterion", "RankSortCriterion"]
