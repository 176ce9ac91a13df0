"""Shared by the tests of the global ranking: gloo workers on 127.0.0.1 and seeded rankings split over them."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Callable, Dict

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

NUM_CASES = 12
# Relative. float32: the losses compute in float64 whatever their inputs' dtype and round the results once (float64
# relation sums and exchange, alrp_d2/losses/ranking_inputs.py), so the workers' and one process's float32 results
# differ by at most 2^-23 (1.2e-7) plus their float64 difference (the float64 tolerance, checked by the same tests):
# 1e-5 is above that bound on any CPU, not a rounding measured on one (measured here: <= 1.2e-7, 2-core AMD EPYC).
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-5}
#: Every worker computes every case on both paths of the ranking losses, in one spawn.
PATHS = ("scan", "dense")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn_workers(world_size: int, worker: Callable, *args) -> None:
    """Runs ``worker(rank, world_size, port, *args)`` in ``world_size`` gloo processes on
    127.0.0.1; they leave the group and exit by themselves (a stuck collective times out)."""
    mp.spawn(_entry, args=(world_size, free_port(), worker, args), nprocs=world_size, join=True)


def _entry(rank: int, world_size: int, port: int, worker: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size, timeout=timedelta(seconds=60)
    )
    try:
        worker(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def make_case(seed: int, world_size: int, dtype: torch.dtype) -> Dict:
    """A seeded ranking split at random points over the workers: ignored entries, exact ties
    (also across workers) on every other seed, uneven sizes (possibly an empty worker), a worker
    without positives on every third seed and no positive at all on seed 5."""
    gen = torch.Generator().manual_seed(seed)
    size = int(torch.randint(world_size, 400, (1,), generator=gen))
    logits = torch.randn(size, generator=gen, dtype=torch.float64) * 2.0
    if seed % 2 == 0:
        logits = torch.round(logits * 2) / 2
    labels = torch.randint(-1, 2, (size,), generator=gen)
    cuts = torch.sort(torch.randint(0, size + 1, (world_size - 1,), generator=gen)).values.tolist()
    bounds = [0, *cuts, size]
    if seed % 3 == 0:
        first, last = bounds[seed % world_size], bounds[seed % world_size + 1]
        labels[first:last] = labels[first:last].clamp(max=0)
    if seed == 5:
        labels = labels.clamp(max=0)
    errors = torch.rand(int((labels == 1).sum()), generator=gen, dtype=torch.float64) * 2.0
    delta = [1.0, 0.5, 0.01, 2.5][seed % 4]
    return {"logits": logits.to(dtype), "labels": labels, "errors": errors.to(dtype), "bounds": bounds, "delta": delta}


def split(case: Dict, rank: int):
    """This worker's logits, labels and the E_loc of its positives."""
    first, last = case["bounds"][rank], case["bounds"][rank + 1]
    positives_before = int((case["labels"][:first] == 1).sum())
    labels = case["labels"][first:last]
    count = int((labels == 1).sum())
    return case["logits"][first:last], labels, case["errors"][positives_before : positives_before + count]


def assert_relative(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    expected = expected.detach().double()
    atol = 1e-12 * max(expected.abs().max().item() if expected.numel() else 0.0, 1.0)
    torch.testing.assert_close(actual.detach().double(), expected, rtol=rtol, atol=atol)
