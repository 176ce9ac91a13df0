"""The ranges of the ranking losses' hyperparameters, in one place for the config keys (MODEL.ALRP.*, named by key in
their errors) and the constructors' arguments (named by argument, as a LazyConfig sets them). Each bound keeps the
first steps of training finite where a value beyond it ends in detectron2's "Loss became infinite or NaN" at iteration
0-2 (aLRP RetinaNet at test scale, docs/configuration.md):

- ``delta`` (the step function's smoothness, App. E Eq. 14) >= :data:`MIN_DELTA`, or 0 (the unit step) for a criterion
  that allows it: 1e-320 is 0 in float32, and below 1e-6 the smoothed step is the unit step at the float32 spacing of
  logits near 10.
- ``tau`` (the IoU threshold normalising E_loc by 1 - tau, Sec. 2.2) in [0, :data:`MAX_TAU`]: 0.9999 multiplies E_loc
  by 1e4 (the loss grows 300-fold in two steps), 0.999999999 by 1e9 (NaN at iteration 1).
- a localisation weight (``loc_weight``: MODEL.ALRP.SB_INIT_WEIGHT or LOC_WEIGHT) in [:data:`MIN_LOC_WEIGHT`,
  :data:`MAX_LOC_WEIGHT`]: 1e6 makes the loss grow 20-fold in two steps, 1e30 is NaN at iteration 1, 1e300 infinite in
  float32; below 1e-6 the boxes are not trained (1e-300 is 0 in float32).
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = [
    "MAX_LOC_WEIGHT",
    "MAX_TAU",
    "MIN_DELTA",
    "MIN_LOC_WEIGHT",
    "delta_problem",
    "is_number",
    "loc_weight_problem",
    "tau_problem",
    "weight_problem",
]

MIN_DELTA = 1e-6
MAX_TAU = 0.99
MIN_LOC_WEIGHT = 1e-6
MAX_LOC_WEIGHT = 1e4


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def delta_problem(delta: Any, allows_unit_step: bool) -> Optional[str]:
    """What is wrong with ``delta`` (None: nothing): a number >= :data:`MIN_DELTA`, or 0 with ``allows_unit_step``."""
    if is_number(delta) and (delta >= MIN_DELTA or (allows_unit_step and delta == 0)):
        return None
    return f"must be a number >= {MIN_DELTA:g}" + (" or 0 (the unit step)" if allows_unit_step else "")


def tau_problem(tau: Any) -> Optional[str]:
    """What is wrong with ``tau`` (None: nothing): a number in [0, :data:`MAX_TAU`]."""
    return None if is_number(tau) and 0 <= tau <= MAX_TAU else f"must be a number in [0, {MAX_TAU}]"


def loc_weight_problem(weight: Any) -> Optional[str]:
    """What is wrong with a localisation weight (None: nothing): a number in [:data:`MIN_LOC_WEIGHT`,
    :data:`MAX_LOC_WEIGHT`]."""
    if is_number(weight) and MIN_LOC_WEIGHT <= weight <= MAX_LOC_WEIGHT:
        return None
    return f"must be a number in [{MIN_LOC_WEIGHT:g}, {MAX_LOC_WEIGHT:g}]"


def weight_problem(weight: Any, maximum: float = math.inf, zero: bool = False) -> Optional[str]:
    """What is wrong with a loss weight (None: nothing): a finite number > 0 (>= 0 with ``zero``), at most
    ``maximum``."""
    if is_number(weight) and (weight >= 0 if zero else weight > 0) and weight <= maximum:
        return None
    if math.isfinite(maximum):
        return f"must be a number in {'[' if zero else '('}0, {maximum:g}]"
    return f"must be a number {'>=' if zero else '>'} 0"
