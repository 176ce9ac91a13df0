"""The registry of the ranking criteria, and building the criterion a config names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Type

from fvcore.common.registry import Registry

from ..checks.errors import naming_config_keys, require_config
from .config_keys import HEAD_KEYS, HeadKeys
from .ranking_criterion import RankingCriterion

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["RANKING_CRITERION_REGISTRY", "build_ranking_criterion", "ranking_criterion", "ranking_criterion_class"]

RANKING_CRITERION_REGISTRY = Registry("RANKING_CRITERION")
RANKING_CRITERION_REGISTRY.__doc__ = """
Ranking criteria (subclasses of :class:`RankingCriterion`), selected by class name with MODEL.ALRP.CRITERION.
The registered class is built as ``cls(**cls.from_config(cfg, keys))`` (:class:`HeadKeys`: the head's delta and tau).
"""


def ranking_criterion_class(name: str, key: str = "MODEL.ALRP.CRITERION") -> Type[RankingCriterion]:
    """The criterion class registered as ``name``; a ValueError naming ``key`` and the registered names otherwise."""
    registered = tuple(sorted(name for name, _ in RANKING_CRITERION_REGISTRY))
    require_config(
        name in registered,
        key,
        name,
        f"must be a registered ranking criterion, one of {registered} (a criterion of your own module is registered "
        "when the module is imported: train_net.py --import MODULE imports it in every process)",
    )
    return RANKING_CRITERION_REGISTRY.get(name)


def build_ranking_criterion(cfg: CfgNode, keys: HeadKeys = HEAD_KEYS) -> RankingCriterion:
    """The criterion MODEL.ALRP.CRITERION names, built from the config (:meth:`RankingCriterion.from_config`) with
    the head's ``keys`` of delta and tau (MODEL.ALRP.DELTA and TAU, or the RPN's); an error of its constructor names
    the argument's key (:meth:`RankingCriterion.config_keys`)."""
    criterion = ranking_criterion_class(cfg.MODEL.ALRP.CRITERION)
    with naming_config_keys(cfg, criterion.config_keys(keys)):
        return criterion(**criterion.from_config(cfg, keys))


def ranking_criterion(name: str, **arguments: Any) -> RankingCriterion:
    """The criterion registered as ``name`` built from its constructor ``arguments``: the criterion of a LazyConfig
    (``LazyCall(ranking_criterion)(name="RankSortCriterion", delta=0.5)``), a user's registered criterion alike."""
    return ranking_criterion_class(name, key="criterion name")(**arguments)
