"""Argument types of the command-line tools (``train_net.py``, ``demo.py``): a value that cannot
work (NaN, infinite, zero or out of range) is a usage error naming the option, before anything is
built, instead of a run that draws nothing, hangs or overflows later."""

from __future__ import annotations

import argparse
import math
from typing import Callable

__all__ = ["MAX_DIST_TIMEOUT_S", "MAX_DRAWING_SCALE", "dist_timeout_seconds", "drawing_scale", "score_threshold"]

#: --dist-timeout's largest value: a week (a collective that waits longer is a hung run; ``timedelta`` and gloo's
#: millisecond timeouts overflow near 1e14 s).
MAX_DIST_TIMEOUT_S = 7 * 24 * 3600
#: demo.py --scale's largest value: each drawing is the input's size times the scale in both directions.
MAX_DRAWING_SCALE = 16.0


def _float_in(low: float, high: float, low_inclusive: bool, meaning: str) -> Callable[[str], float]:
    """An argparse type: a finite number in (``low``, ``high``] (``[low, high]`` with ``low_inclusive``)."""
    opening = "[" if low_inclusive else "("

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number ({meaning})") from None
        above = value >= low if low_inclusive else value > low
        if not (math.isfinite(value) and above and value <= high):
            expected = f"a finite number in {opening}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"{text} is not {expected} ({meaning})")
        return value

    return parse


dist_timeout_seconds = _float_in(0.0, MAX_DIST_TIMEOUT_S, False, "seconds a rank may wait for the others")
drawing_scale = _float_in(0.0, MAX_DRAWING_SCALE, False, "the drawings' size relative to the inputs")
score_threshold = _float_in(0.0, 1.0, True, "a detection score")
