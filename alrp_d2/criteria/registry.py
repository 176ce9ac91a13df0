"""The registry of the ranking criteria, and building the criterion a config names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Type

from fvcore.common.registry import Registry

from ..config_check import require_config
from .ranking_criterion import RankingCriterion

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["RANKING_CRITERION_REGISTRY", "build_ranking_criterion", "ranking_criterion_class"]

RANKING_CRITERION_REGISTRY = Registry("RANKING_CRITERION")
RANKING_CRITERION_REGISTRY.__doc__ = """
Ranking criteria (subclasses of :class:`RankingCriterion`), selected by class name with MODEL.ALRP.CRITERION.
The registered class is built as ``cls(**cls.from_config(cfg, delta=..., tau=...))``.
"""


def ranking_criterion_class(name: str, key: str = "MODEL.ALRP.CRITERION") -> Type[RankingCriterion]:
    """The criterion class registered as ``name``; a ValueError naming ``key`` and the registered names otherwise."""
    registered = tuple(sorted(name for name, _ in RANKING_CRITERION_REGISTRY))
    require_config(name in registered, key, name, f"must be a registered ranking criterion, one of {registered}")
    return RANKING_CRITERION_REGISTRY.get(name)


def build_ranking_criterion(cfg: CfgNode, *, delta_key: str = "DELTA", tau_key: str = "TAU") -> RankingCriterion:
    """The criterion MODEL.ALRP.CRITERION names, with a head's delta and tau (MODEL.ALRP.<delta_key>, <tau_key>):
    delta > 0, or >= 0 for a criterion that ``allows_unit_step``; tau in [0, 1)."""
    alrp = cfg.MODEL.ALRP
    criterion = ranking_criterion_class(alrp.CRITERION)
    delta = alrp[delta_key]
    number = isinstance(delta, (int, float)) and not isinstance(delta, bool)
    if criterion.allows_unit_step:
        require_config(number and delta >= 0, f"MODEL.ALRP.{delta_key}", delta, f"must be >= 0 with {alrp.CRITERION}")
    else:
        require_config(number and delta > 0, f"MODEL.ALRP.{delta_key}", delta, "must be > 0")
    tau = alrp[tau_key]
    require_config(0.0 <= tau < 1.0, f"MODEL.ALRP.{tau_key}", tau, "must be in [0, 1)")
    return criterion(**criterion.from_config(cfg, delta=float(delta), tau=tau))
