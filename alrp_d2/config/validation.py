"""The validation of the config keys that no constructor reads: every float of our keys is finite, the solver
periods are positive, and the keys of the data, the backbone and the self-balance hook are in range."""

from __future__ import annotations

import math
import reprlib
from typing import Iterator, Sequence, Tuple

from detectron2.config import CfgNode as CN

from ..checks.errors import ConfigError, require_config, require_integer
from ..checks.hyperparameter_ranges import is_number
from ..losses.global_ranking import RANKINGS
from ..modeling.backbone import (
    FPN_KEY_BACKBONES,
    FPN_WEIGHT_INITS,
    FROZEN_STATS_BN,
    FROZEN_STATS_BN_BACKBONES,
    P7_BACKBONES,
)
from .keys import TEST_RESIZES, TRAIN_FILTERS

__all__ = ["validate_alrp_config"]

# Keys of ours whose float values (also inside lists) must be finite numbers: whole nodes, and single keys.
FINITE_FLOAT_NODES = ("MODEL.ALRP", "INPUT.SSD", "MODEL.FOVEABOX", "MODEL.FCOS")
FINITE_FLOAT_KEYS = ("MODEL.ANCHOR_GENERATOR.OCTAVE_BASE_SCALE",)
# Float keys of ours that must be numbers (yacs accepts None for any key): each reader's comparison would fail bare.
NUMBER_KEYS = tuple(
    f"MODEL.ALRP.{name}"
    for name in (
        "DELTA",
        "TAU",
        "SB_INIT_WEIGHT",
        "LOC_WEIGHT",
        "CORR_WEIGHT",
        "RPN_WEIGHT",
        "RPN_TAU",
        "RPN_DELTA",
        "RPN_LOW_QUALITY_MIN_IOU",
        "RPN_PRIOR_PROB",
    )
)
# Solver periods that must be positive integers (0 divides by zero or never ends in detectron2 / fvcore).
POSITIVE_SOLVER_KEYS = ("MAX_ITER", "CHECKPOINT_PERIOD", "LOG_PERIOD")


def _leaves(node: CN, prefix: str) -> Iterator[Tuple[str, object]]:
    """(key, value) of every value under ``node``."""
    for name, value in node.items():
        key = f"{prefix}.{name}"
        if isinstance(value, CN):
            yield from _leaves(value, key)
        else:
            yield key, value


def _finite(value: object) -> bool:
    """Whether no float in ``value`` (a number or nested lists) is inf or nan. Each list is visited
    once: YAML's anchors and aliases share one list between many places (a 1 KB file can nest
    2**30 references to it)."""
    pending, visited = [value], set()
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            if id(item) not in visited:
                visited.add(id(item))
                pending.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return False
    return True


def _lookup(cfg: CN, path: str):
    node = cfg
    for part in path.split("."):
        node = node[part]
    return node


def _validate_finite_floats(cfg: CN) -> None:
    leaves = [leaf for path in FINITE_FLOAT_NODES for leaf in _leaves(_lookup(cfg, path), path)]
    leaves += [(key, _lookup(cfg, key)) for key in FINITE_FLOAT_KEYS]
    for key, value in leaves:
        if not _finite(value):  # reprlib: a list shared by YAML aliases prints in bounded time
            raise ConfigError(f"Invalid config value {key}={reprlib.repr(value)}: must be finite (not inf or nan)")


def _validate_number_keys(cfg: CN) -> None:
    for key in NUMBER_KEYS:
        value = _lookup(cfg, key)
        require_config(is_number(value), key, value, "must be a number")


def _require_choice(cfg: CN, key: str, choices: Sequence[str]) -> None:
    value = _lookup(cfg, key)
    require_config(value in choices, key, value, f"must be one of {tuple(choices)}")


def _validate_network_keys(cfg: CN) -> None:
    """The keys of the official network: values in range, and the backbone that reads them."""
    for key, choices in (
        ("MODEL.FPN.WEIGHT_INIT", FPN_WEIGHT_INITS),
        ("INPUT.TEST_RESIZE", TEST_RESIZES),
        ("DATALOADER.TRAIN_FILTER", TRAIN_FILTERS),
    ):
        _require_choice(cfg, key, choices)
    alrp, fpn, backbone = cfg.MODEL.ALRP, cfg.MODEL.FPN, cfg.MODEL.BACKBONE.NAME
    require_config(
        0.0 < alrp.RPN_PRIOR_PROB < 1.0, "MODEL.ALRP.RPN_PRIOR_PROB", alrp.RPN_PRIOR_PROB, "must be in (0, 1)"
    )
    require_config(
        fpn.RELU_BEFORE_P7 or backbone in P7_BACKBONES,
        "MODEL.BACKBONE.NAME",
        backbone,
        f"must be one of {P7_BACKBONES} with MODEL.FPN.RELU_BEFORE_P7 False",
    )
    require_config(
        fpn.WEIGHT_INIT == FPN_WEIGHT_INITS[0] or backbone in FPN_KEY_BACKBONES,
        "MODEL.BACKBONE.NAME",
        backbone,
        f"must be one of {FPN_KEY_BACKBONES} with MODEL.FPN.WEIGHT_INIT {fpn.WEIGHT_INIT!r}",
    )
    anchors = cfg.MODEL.ANCHOR_GENERATOR
    require_config(
        anchors.OCTAVE_BASE_SCALE > 0,
        "MODEL.ANCHOR_GENERATOR.OCTAVE_BASE_SCALE",
        anchors.OCTAVE_BASE_SCALE,
        "must be > 0",
    )
    require_config(
        isinstance(anchors.SCALES_PER_OCTAVE, int) and anchors.SCALES_PER_OCTAVE >= 1,
        "MODEL.ANCHOR_GENERATOR.SCALES_PER_OCTAVE",
        anchors.SCALES_PER_OCTAVE,
        "must be an integer >= 1",
    )


def _validate_solver_periods(cfg: CN) -> None:
    for name in POSITIVE_SOLVER_KEYS:
        value = cfg.SOLVER[name]
        require_config(
            isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            f"SOLVER.{name}",
            value,
            "must be an integer >= 1",
        )


def _validate_self_balance_switch(alrp: CN) -> None:
    """MODEL.ALRP.SB_ENABLED is a bool (None would silently mean False). The localisation weight it selects
    (SB_INIT_WEIGHT or LOC_WEIGHT) is checked by the constructor of the heads' losses (``HeadRankingLoss``)."""
    require_config(isinstance(alrp.SB_ENABLED, bool), "MODEL.ALRP.SB_ENABLED", alrp.SB_ENABLED, "must be True or False")


def validate_alrp_config(cfg: CN) -> None:
    """Raises ValueError naming the key of the first invalid aLRP setting: every float of our keys
    is finite, the solver periods are positive, and the keys read by the data, the backbone and the self-balance
    hook are in range. The keys of the ranking losses and the detectors are checked by the code that reads them,
    when the model is built (alrp_d2.modeling)."""
    _validate_finite_floats(cfg)
    _validate_number_keys(cfg)
    _validate_solver_periods(cfg)
    _validate_network_keys(cfg)
    alrp = cfg.MODEL.ALRP
    _validate_self_balance_switch(alrp)
    require_integer("MODEL.ALRP.SB_PERIOD", alrp.SB_PERIOD, 0, " (0: one epoch)")
    require_integer("TEST.MAX_IMAGES", cfg.TEST.MAX_IMAGES, 0, " (0: all images)")
    require_config(alrp.RANKING in RANKINGS, "MODEL.ALRP.RANKING", alrp.RANKING, f"must be one of {RANKINGS}")
    require_config(
        0.0 <= alrp.RPN_LOW_QUALITY_MIN_IOU <= 1.0,
        "MODEL.ALRP.RPN_LOW_QUALITY_MIN_IOU",
        alrp.RPN_LOW_QUALITY_MIN_IOU,
        "must be in [0, 1]",
    )
    require_config(
        cfg.MODEL.RESNETS.NORM != FROZEN_STATS_BN or cfg.MODEL.BACKBONE.NAME in FROZEN_STATS_BN_BACKBONES,
        "MODEL.BACKBONE.NAME",
        cfg.MODEL.BACKBONE.NAME,
        f"must be one of {FROZEN_STATS_BN_BACKBONES} with MODEL.RESNETS.NORM {FROZEN_STATS_BN!r}",
    )
