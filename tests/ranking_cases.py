"""Shared by the tests of the ranking losses: random rankings and the relative comparison with their references."""

from __future__ import annotations

from typing import TypeVar, cast

import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# Relative. float32: the losses compute in float64 whatever their inputs' dtype and round the results once (float64
# relation sums, alrp_d2/losses/ranking_inputs.py), so a float32 result lies within 2^-24 of the float64 computation
# on the same inputs and two of them within 2^-23 (1.2e-7) plus their float64 difference (the float64 tolerance):
# 1e-5 is above that bound on any CPU, not a rounding measured on one (measured here: <= 1.2e-7, 2-core AMD EPYC).
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-5}

Terms = TypeVar("Terms", bound=tuple)


def assert_relative(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    """Every element within ``rtol`` relative; elements that are zero in the reference must be
    zero up to float64 round-off of the largest element."""
    actual = actual.detach().double().cpu()
    expected = expected.detach().double().cpu()
    atol = 1e-12 * max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def random_case(seed: int, dtype: torch.dtype, device: str):
    """A random ranking with ignored entries, ties between positives and between positives and
    negatives on some seeds, and a random number of positives (at least one)."""
    gen = torch.Generator().manual_seed(seed)
    size = int(torch.randint(2, 600, (1,), generator=gen))
    logits = torch.randn(size, generator=gen, dtype=torch.float64) * 2.0
    if seed % 3 == 0:
        logits = torch.round(logits * 2) / 2  # many exact ties, also at distance exactly delta
    labels = torch.randint(-1, 2, (size,), generator=gen)
    labels[int(torch.randint(0, size, (1,), generator=gen))] = 1
    num_pos = int((labels == 1).sum())
    errors = torch.rand(num_pos, generator=gen, dtype=torch.float64) * 2.0
    delta = [1.0, 0.5, 0.01, 2.5][seed % 4]
    return logits.to(dtype).to(device), labels.to(device), errors.to(dtype).to(device), delta


def only_set(terms: Terms) -> Terms:
    """A ranking loss's result over one set (every field of shape (1,)), its fields as that set's scalars."""
    return cast(Terms, type(terms)(*(field.squeeze(0) for field in terms)))
