"""Tolerances of the exactness tests that compare two computations of different shape or order (workers against one
process, the global against the per-worker ranking, two networks that normalise in different orders): the same on
every CPU.

A float32 convolution or sum over one batch of 4 and over two batches of 2 takes different kernels and summation
orders on different CPUs, so a float32 tolerance measured on one CPU says nothing about another. Such a test either

* compares in float64 (model and inputs ``.double()``) with ``assert_close_float64``: float64 rounding stays orders
  of magnitude below float32 rounding and any real difference; or
* compares in float32 within ``float32_tolerance``, derived from the run: each side is also computed in float64, and
  if ``a64 == b64`` up to rounding, the triangle inequality bounds the float32 difference by the two sides' own
  float32 errors, ``|a32 - b32| <= |a32 - a64| + |a64 - b64| + |b64 - b32|``. ``FLOAT32_FACTOR`` is 2 for the two
  terms, doubled for the float32 steps that a float64 detector keeps (detectron2's box decoding casts the deltas to
  float32; alrp_d2's Rank & Sort score weights and mask dice losses are float32), which make ``|a64 - b64|`` a
  float32 rounding too.

Each such test has a twin that breaks the computation on purpose (e.g. a worker's gradient term dropped) and asserts
with ``assert_fails_by`` that it exceeds the tolerance by ``FAILS_BY`` at least.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Tuple

import torch

#: Of two float64 computations (model and inputs ``.double()``), relative to the entries and, absolute, to the size of
#: the largest: float64 rounding (1.1e-16) grown by a tiny network's depth and sums stays far below (measured: 9.4e-16
#: for gradients up to 9.1, the HF DETRs of tests/hf/test_hf_global_ranking.py), float32 rounding (1.2e-7) and any
#: real difference far above.
FLOAT64_RTOL, FLOAT64_ATOL = 1e-9, 1e-12
#: The float32 tolerance in units of the largest float32-from-float64 distance of the sides (see the module).
FLOAT32_FACTOR = 4.0
#: A deliberately broken computation differs by at least this many tolerances: a real error is not rounding.
FAILS_BY = 1e4


def assert_close_float64(actual: torch.Tensor, expected: torch.Tensor, scale: float = 1.0, msg: Any = None) -> None:
    """``actual`` equals ``expected`` up to float64 rounding: ``FLOAT64_RTOL`` relative, ``FLOAT64_ATOL * scale``
    absolute (``scale``: the size of the largest entries; 1 for losses and gradients)."""
    if actual.dtype != torch.float64 or expected.dtype != torch.float64:
        raise TypeError(f"expected two float64 results, got {actual.dtype} and {expected.dtype}")
    torch.testing.assert_close(actual, expected, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL * scale, msg=msg)


def float32_tolerance(sides: Iterable[Tuple[torch.Tensor, torch.Tensor]]) -> float:
    """``FLOAT32_FACTOR`` times the largest distance of a side's float32 result from its float64 result, over
    ``sides`` of (float32, float64) results of the same computation; at least the float32 epsilon of the largest
    entry (no float32 result is closer to the exact one than its own rounding)."""
    distance, scale = 0.0, 0.0
    for low, high in sides:
        if low.dtype != torch.float32 or high.dtype != torch.float64:
            raise TypeError(f"expected (float32, float64) results of one computation, got ({low.dtype}, {high.dtype})")
        if low.numel():
            distance = max(distance, (low.double() - high).abs().max().item())
            scale = max(scale, high.abs().max().item())
    return FLOAT32_FACTOR * max(distance, torch.finfo(torch.float32).eps * scale)


def assert_close_within(actual: torch.Tensor, expected: torch.Tensor, atol: float, msg: Optional[str] = None) -> None:
    """Every entry of ``actual`` within ``atol`` of ``expected`` (a derived tolerance: no relative part)."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol, msg=msg)


def difference_in_tolerances(actual: torch.Tensor, expected: torch.Tensor, atol: float) -> float:
    """The largest difference of ``actual`` from ``expected`` in units of ``atol``."""
    difference = (actual.double() - expected.double()).abs().max().item() if expected.numel() else 0.0
    return difference / atol if atol else (float("inf") if difference else 0.0)


def assert_fails_by(ratio: float, what: str) -> None:
    """A broken twin's largest ``difference_in_tolerances`` is at least ``FAILS_BY``: the exactness test it mirrors
    fails by orders of magnitude, not by a rounding accident."""
    assert ratio >= FAILS_BY, f"{what}: the broken computation differs by only {ratio:.3g} tolerances"
