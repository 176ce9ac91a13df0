"""Error-driven ranking losses (pure torch, no detectron2 import)."""

from .alrp_loss import AlrpLossTerms, alrp_loss
from .ap_loss import ap_loss
from .correlation_loss import CORRELATION_KINDS, correlation_loss, correlation_loss_per_level
from .error_driven import RankingLossOutput
from .global_ranking import RankingGroup, ranking_group
from .input_checks import NonFiniteInputError
from .localisation_error import loc_error
from .rank_sort_loss import RankSortLossTerms, rank_sort_loss
from .ranking_inputs import LabelledSet, RankingSet
from .ranking_statistics import RankingStatistics
from .soft_rank import soft_rank

__all__ = [
    "AlrpLossTerms",
    "CORRELATION_KINDS",
    "LabelledSet",
    "NonFiniteInputError",
    "RankingGroup",
    "RankSortLossTerms",
    "RankingLossOutput",
    "RankingSet",
    "RankingStatistics",
    "alrp_loss",
    "ap_loss",
    "correlation_loss",
    "correlation_loss_per_level",
    "loc_error",
    "rank_sort_loss",
    "ranking_group",
    "soft_rank",
]
