"""The config keys a head's criterion reads, under MODEL.ALRP: the head's delta and tau (DELTA and TAU, or the RPN's
RPN_DELTA and RPN_TAU), each checked with its key's name."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..config.checks import require_config
from ..config.hyperparameter_ranges import delta_problem, tau_problem

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
    """MODEL.ALRP.<keys.delta>, the smoothness of the step function, in the range of
    :func:`~alrp_d2.config.hyperparameter_ranges.delta_problem` (0, the unit step, with ``unit_step``)."""
    key, delta = f"MODEL.ALRP.{keys.delta}", cfg.MODEL.ALRP[keys.delta]
    problem = delta_problem(delta, unit_step)
    require_config(problem is None, key, delta, f"{problem} with {cfg.MODEL.ALRP.CRITERION}")
    return float(delta)


def configured_tau(cfg: CfgNode, keys: HeadKeys) -> float:
    """MODEL.ALRP.<keys.tau>, the IoU threshold of E_loc (Sec. 2.2), in the range of
    :func:`~alrp_d2.config.hyperparameter_ranges.tau_problem`."""
    key, tau = f"MODEL.ALRP.{keys.tau}", cfg.MODEL.ALRP[keys.tau]
    problem = tau_problem(tau)
    require_config(problem is None, key, tau, str(problem))
    return float(tau)
