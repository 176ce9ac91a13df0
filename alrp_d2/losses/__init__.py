"""Error-driven ranking losses (pure torch, no detectron2 import)."""

from .alrp_loss import AlrpLossTerms, alrp_loss, alrp_loss_indexed, alrp_loss_sets, alrp_loss_terms
from .ap_loss import ap_loss, ap_loss_indexed, ap_loss_sets, ap_loss_terms
from .correlation_loss import CORRELATION_KINDS, correlation_loss, correlation_loss_per_level
from .error_driven import RankingLossOutput
from .global_ranking import RankingGroup, ranking_group
from .input_checks import NonFiniteInputError
from .localisation_error import loc_error
from .rank_sort_loss import (
    RankSortLossTerms,
    rank_sort_loss,
    rank_sort_loss_indexed,
    rank_sort_loss_sets,
    rank_sort_loss_terms,
)
from .ranking_inputs import RankingSet
from .ranking_statistics import RankingStatistics
from .soft_rank import soft_rank

__all__ = [
    "AlrpLossTerms",
    "CORRELATION_KINDS",
    "NonFiniteInputError",
    "RankingGroup",
    "RankSortLossTerms",
    "RankingLossOutput",
    "RankingSet",
    "RankingStatistics",
    "alrp_loss",
    "alrp_loss_indexed",
    "alrp_loss_sets",
    "alrp_loss_terms",
    "ap_loss",
    "ap_loss_indexed",
    "ap_loss_sets",
    "ap_loss_terms",
    "correlation_loss",
    "correlation_loss_per_level",
    "loc_error",
    "rank_sort_loss",
    "rank_sort_loss_indexed",
    "rank_sort_loss_sets",
    "rank_sort_loss_terms",
    "ranking_group",
    "soft_rank",
]
