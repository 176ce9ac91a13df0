"""The checks of the criteria's constructor arguments, each naming its argument (a criterion built in Python or from
a LazyConfig is told about its own arguments; from a yacs config, ``from_config`` names the keys first)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..config_check import require_argument

__all__ = ["check_choice", "check_delta", "check_tau"]


def check_delta(owner: Any, delta: float, *, unit_step: bool = False) -> None:
    """``delta``, the smoothness of the step function: finite and > 0, or >= 0 with ``unit_step``."""
    number = isinstance(delta, (int, float)) and not isinstance(delta, bool) and math.isfinite(delta)
    bound = ">= 0" if unit_step else "> 0"
    require_argument(
        number and (delta >= 0 if unit_step else delta > 0), _name(owner), "delta", delta, f"must be {bound}"
    )


def check_tau(owner: Any, tau: float) -> None:
    """``tau``, the IoU threshold of E_loc (Sec. 2.2), in [0, 1)."""
    require_argument(0.0 <= tau < 1.0, _name(owner), "tau", tau, "must be in [0, 1)")


def check_choice(owner: Any, name: str, value: Any, choices: Sequence[Any]) -> None:
    """The argument ``name`` is one of ``choices``."""
    require_argument(value in choices, _name(owner), name, value, f"must be one of {tuple(choices)}")


def _name(owner: Any) -> str:
    return type(owner).__name__
