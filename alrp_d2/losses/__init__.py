"""Error-driven ranking losses (pure torch, no detectron2 import)."""
from .alrp import AlrpLossTerms, alrp_loss, alrp_loss_terms
from .ap import ap_loss, ap_loss_terms
from .error_driven import ErrorDrivenRankingLoss, NonFiniteInputError, RankingLossOutput
from .localisation import loc_error, paired_iou_giou
from .ranking import PositiveRanking

__all__ = [
    "AlrpLossTerms",
    "ErrorDrivenRankingLoss",
    "NonFiniteInputError",
    "PositiveRanking",
    "RankingLossOutput",
    "alrp_loss",
    "alrp_loss_terms",
    "ap_loss",
    "ap_loss_terms",
    "loc_error",
    "paired_iou_giou",
]
