"""The checks of the criteria's constructor arguments, each naming its argument (a criterion built in Python or from
a LazyConfig is told about its own arguments; from a yacs config, ``from_config`` names the keys first)."""

from __future__ import annotations

from typing import Any, Sequence

from ..checks.errors import require_argument
from ..checks.hyperparameter_ranges import delta_problem, tau_problem

__all__ = ["check_choice", "check_delta", "check_tau"]


def check_delta(owner: Any, delta: float, *, unit_step: bool = False) -> None:
    """``delta``, the smoothness of the step function, in the range of
    :func:`~alrp_d2.checks.hyperparameter_ranges.delta_problem` (0, the unit step, with ``unit_step``)."""
    problem = delta_problem(delta, unit_step)
    require_argument(problem is None, _name(owner), "delta", delta, str(problem))


def check_tau(owner: Any, tau: float) -> None:
    """``tau``, the IoU threshold of E_loc (Sec. 2.2), in the range of
    :func:`~alrp_d2.checks.hyperparameter_ranges.tau_problem`."""
    problem = tau_problem(tau)
    require_argument(problem is None, _name(owner), "tau", tau, str(problem))


def check_choice(owner: Any, name: str, value: Any, choices: Sequence[Any]) -> None:
    """The argument ``name`` is one of ``choices``."""
    require_argument(value in choices, _name(owner), name, value, f"must be one of {tuple(choices)}")


def _name(owner: Any) -> str:
    return type(owner).__name__
