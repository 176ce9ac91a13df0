"""The ranking criteria (pure torch and fvcore's registry, no detectron2 import): the registry, the interface every
head asks through, the positives they take, the project's criteria (aLRP, AP, Rank & Sort Loss) and Correlation
Loss as an additive term. Importing this package registers the criteria in :data:`RANKING_CRITERION_REGISTRY`."""

from .alrp import AlrpCriterion
from .ap import AP_LOC_LOSSES, APCriterion, InterpolatedAPCriterion
from .config_keys import HEAD_KEYS, RPN_KEYS, HeadKeys
from .correlation_term import CorrelationTerm, correlation_terms
from .localisation import LocErrorCriterion, positive_loc_errors
from .rank_sort import RankSortCriterion, value_balance
from .ranking_criterion import CriterionOutput, CriterionSet, PositiveSource, PositiveTerm, RankingCriterion
from .registry import RANKING_CRITERION_REGISTRY, build_ranking_criterion, ranking_criterion_class
from .targets import PositiveTargets, RankSortTargets, RowLabels, Targets

__all__ = [
    "AP_LOC_LOSSES",
    "HEAD_KEYS",
    "RPN_KEYS",
    "RANKING_CRITERION_REGISTRY",
    "APCriterion",
    "AlrpCriterion",
    "CorrelationTerm",
    "CriterionOutput",
    "CriterionSet",
    "HeadKeys",
    "InterpolatedAPCriterion",
    "LocErrorCriterion",
    "PositiveSource",
    "PositiveTargets",
    "PositiveTerm",
    "RankSortCriterion",
    "RankSortTargets",
    "RankingCriterion",
    "RowLabels",
    "Targets",
    "build_ranking_criterion",
    "correlation_terms",
    "positive_loc_errors",
    "ranking_criterion_class",
    "value_balance",
]
