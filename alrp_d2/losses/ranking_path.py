"""Which of two exact implementations of the ranking statistics a loss call takes.

* ``scan`` (the CPU's): the negatives find their gaps among the positives' band edges by a uniform grid
  (:mod:`alrp_d2.losses.gap_lookup`, one host synchronisation) in chunks of 2^15 that each stay on one thread, and
  Rank & Sort Loss's sorting relations come from a wavelet tree (:mod:`alrp_d2.losses.sorting_relations`):
  the least work, in many small operations.
* ``dense`` (an accelerator's, where every operation is a kernel launch): the negatives find their gaps by one
  ``searchsorted`` per chunk of 2^20, and the relations among the positives are P x P comparisons in blocks of
  rows (:mod:`alrp_d2.losses.dense_relations`): more arithmetic, a small constant number of operations per call
  (``benchmarks/op_count.py``), no host synchronisation of their own.

Both give the same values and gradients (the exactness tests run on both). ``auto`` takes ``scan`` on the CPU and
``dense`` on every other device; the environment variable ``ALRP_D2_RANKING_PATH`` (read at every call, inherited
by spawned workers) or :func:`forced_path` overrides it, so that a CPU can run and count the accelerator's path.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

__all__ = ["ENVIRONMENT_VARIABLE", "PATHS", "forced_path", "ranking_path"]

PATHS = ("auto", "scan", "dense")
ENVIRONMENT_VARIABLE = "ALRP_D2_RANKING_PATH"

_forced: Optional[str] = None


def _checked(path: str, source: str) -> str:
    if path not in PATHS:
        raise ValueError(f"{source} must be one of {PATHS}, got {path!r}")
    return path


def ranking_path(device: torch.device) -> str:
    """``scan`` or ``dense``: the path of a ranking on ``device`` (module docstring)."""
    if _forced is not None:
        path = _forced
    else:
        path = _checked(os.environ.get(ENVIRONMENT_VARIABLE, "auto"), ENVIRONMENT_VARIABLE)
    if path == "auto":
        return "scan" if device.type == "cpu" else "dense"
    return path


@contextmanager
def forced_path(path: str) -> Iterator[None]:
    """Every ranking inside the ``with`` block takes ``path`` (``auto``: by device, ignoring the environment)."""
    global _forced
    previous = _forced
    _forced = _checked(path, "path")
    try:
        yield
    finally:
        _forced = previous
