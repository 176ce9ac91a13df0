"""The config keys a head's criterion reads, under MODEL.ALRP: the head's delta and tau (DELTA and TAU, or the RPN's
RPN_DELTA and RPN_TAU), each checked with its key's name."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from ..config_check import require_config

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["HEAD_KEYS", "RPN_KEYS", "HeadKeys", "configured_delta", "configured_tau"]


class HeadKeys(NamedTuple):
    """The keys under MODEL.ALRP of one head's delta and tau."""

    delta: str = "DELTA"
    tau: str = "TAU"


#: The keys of the heads' delta and tau (RetinaNet, ATSS, FoveaBox, FCOS, the box head), and of the RPN's.
HEAD_KEYS = HeadKeys()
RPN_KEYS = HeadKeys(delta="RPN_DELTA", tau="RPN_TAU")


def configured_delta(cfg: CfgNode, keys: HeadKeys, *, unit_step: bool = False) -> float:
    """MODEL.ALRP.<keys.delta>, the smoothness of the step function: finite and > 0, or >= 0 with ``unit_step`` (0:
    the unit step)."""
    key, delta = f"MODEL.ALRP.{keys.delta}", cfg.MODEL.ALRP[keys.delta]
    number = isinstance(delta, (int, float)) and not isinstance(delta, bool) and math.isfinite(delta)
    if unit_step:
        require_config(number and delta >= 0, key, delta, f"must be >= 0 with {cfg.MODEL.ALRP.CRITERION}")
    else:
        require_config(number and delta > 0, key, delta, "must be > 0")
    return float(delta)


def configured_tau(cfg: CfgNode, keys: HeadKeys) -> float:
    """MODEL.ALRP.<keys.tau>, the IoU threshold of E_loc (Sec. 2.2), in [0, 1)."""
    key, tau = f"MODEL.ALRP.{keys.tau}", cfg.MODEL.ALRP[keys.tau]
    require_config(0.0 <= tau < 1.0, key, tau, "must be in [0, 1)")
    return float(tau)
