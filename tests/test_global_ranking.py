"""Global ranking: 2 and 3 gloo workers on loopback, each holding a random part of a
seeded ranking problem, against one process computing the loss on the concatenation: aLRP Loss,
AP Loss and the interpolated AP Loss."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Callable, Dict

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from alrp_d2.losses import NonFiniteInputError, alrp_loss_terms, ap_loss_terms
from alrp_d2.losses.global_ranking import exchange_checked, global_mean, ranking_group
from alrp_d2.losses.input_checks import check_ranking_inputs
from alrp_d2.losses.ranking_path import forced_path

NUM_CASES = 12
#: Every worker computes every case on both paths of the ranking losses, in one spawn.
PATHS = ("scan", "dense")
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-5}


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


def losses(logits, labels, errors, delta, group) -> Dict[str, torch.Tensor]:
    """aLRP and AP Loss values and the gradients of the logits and E_loc."""
    logits = logits.clone().requires_grad_(True)
    errors = errors.clone().requires_grad_(True)
    alrp = alrp_loss_terms(logits, labels, errors, delta=delta, group=group)
    grad_logits, grad_errors = torch.autograd.grad(alrp.loss_cls + alrp.loss_loc, [logits, errors], allow_unused=True)
    ap = ap_loss_terms(logits, labels, delta=delta, group=group)
    (grad_ap,) = torch.autograd.grad(ap.loss, [logits])
    interpolated = ap_loss_terms(logits, labels, delta=delta, eps=None, group=group, interpolated=True)
    (grad_interpolated,) = torch.autograd.grad(interpolated.loss, [logits])
    return {
        "alrp_cls": alrp.loss_cls.detach(),
        "alrp_loc": alrp.loss_loc.detach(),
        "alrp_grad_logits": grad_logits,
        "alrp_grad_errors": torch.zeros_like(errors) if grad_errors is None else grad_errors,
        "alrp_positive_magnitude": alrp.positive_gradient_magnitude,
        "alrp_negative_magnitude": alrp.negative_gradient_magnitude,
        "ap": ap.loss.detach(),
        "ap_grad_logits": grad_ap,
        "ap_negative_magnitude": ap.negative_gradient_magnitude,
        "ap_interpolated": interpolated.loss.detach(),
        "ap_interpolated_grad_logits": grad_interpolated,
    }


def _worker(rank: int, world_size: int, out_dir: str) -> None:
    """Every check of one world size in one spawn: the global losses of all cases, the
    per-worker loss of one case and a non-finite logit on the last worker."""
    group = ranking_group("global")
    assert group is not None and group.world_size == world_size
    assert ranking_group("per_worker") is None
    results: Dict = {"global": {path: [] for path in PATHS}, "raised": []}
    for path in PATHS:
        with forced_path(path):
            for seed in range(NUM_CASES):
                for dtype in (torch.float64, torch.float32):
                    case = make_case(seed, world_size, dtype)
                    results["global"][path].append(losses(*split(case, rank), case["delta"], group))
    case = make_case(1, world_size, torch.float64)
    results["per_worker"] = losses(*split(case, rank), case["delta"], None)
    for seed in (3, 5):  # a worker without positives; no positive anywhere
        errors = split(make_case(seed, world_size, torch.float32), rank)[2].requires_grad_(True)
        mean = global_mean(errors, group)
        (grad,) = torch.autograd.grad(mean, [errors])
        results[f"mean_{seed}"] = (mean.detach(), grad)
    logits = torch.randn(50, dtype=torch.float64)
    labels = torch.zeros(50, dtype=torch.int64)
    labels[:5] = 1
    if rank == world_size - 1:
        logits[3] = float("nan")
    try:
        exchange_checked(lambda: check_ranking_inputs(logits, labels, None), logits.device, group)
    except NonFiniteInputError as error:
        results["raised"].append(str(error))
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module", params=[2, 3], ids=["2_workers", "3_workers"])
def worker_results(request, tmp_path_factory):
    world_size = request.param
    out_dir = str(tmp_path_factory.mktemp(f"global_{world_size}"))
    spawn_workers(world_size, _worker, out_dir)
    return world_size, [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world_size)]


def assert_relative(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    expected = expected.detach().double()
    atol = 1e-12 * max(expected.abs().max().item() if expected.numel() else 0.0, 1.0)
    torch.testing.assert_close(actual.detach().double(), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("seed", range(NUM_CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_global_loss_equals_one_process_on_the_concatenation(worker_results, seed, dtype, ranking_path):
    world_size, per_worker = worker_results
    index = 2 * seed + (dtype == torch.float32)
    case = make_case(seed, world_size, dtype)
    expected = losses(case["logits"], case["labels"], case["errors"], case["delta"], None)
    rtol = TOLERANCE[dtype]
    for name in ("alrp_cls", "alrp_loc", "ap", "ap_interpolated", "alrp_positive_magnitude", "alrp_negative_magnitude"):
        for results in per_worker:  # the same global value on every worker
            assert_relative(results["global"][ranking_path][index][name], expected[name], rtol)
    for name in ("alrp_grad_logits", "alrp_grad_errors", "ap_grad_logits", "ap_interpolated_grad_logits"):
        # Each worker's gradients are scaled by the world size (DDP averages over the workers).
        gathered = torch.cat([results["global"][ranking_path][index][name] for results in per_worker]) / world_size
        assert_relative(gathered, expected[name], rtol)


def test_cases_cover_the_edge_cases():
    """The seeded problems include a worker without positives, no positive at all, ties
    across workers and ignored entries."""
    without_positive = no_positive = 0
    for seed in range(NUM_CASES):
        case = make_case(seed, 3, torch.float64)
        counts = [int((split(case, r)[1] == 1).sum()) for r in range(3)]
        without_positive += 0 in counts and sum(counts) > 0
        no_positive += sum(counts) == 0
        assert (case["labels"] == -1).any()
    assert without_positive >= 3 and no_positive == 1
    ties = make_case(0, 2, torch.float64)["logits"]
    assert len(torch.unique(ties)) < len(ties) // 4


@pytest.mark.parametrize("seed", [3, 5])
def test_global_mean_of_the_localisation_errors(worker_results, seed):
    """The AP-Loss head's localisation loss: the mean E_loc over every worker's positives."""
    world_size, per_worker = worker_results
    errors = make_case(seed, world_size, torch.float32)["errors"].requires_grad_(True)
    expected = errors.sum() / errors.numel() if errors.numel() else errors.sum() * 0.0
    (expected_grad,) = torch.autograd.grad(expected, [errors])
    for results in per_worker:
        torch.testing.assert_close(results[f"mean_{seed}"][0], expected.detach(), rtol=1e-6, atol=1e-7)
    gathered = torch.cat([results[f"mean_{seed}"][1] for results in per_worker]) / world_size
    torch.testing.assert_close(gathered, expected_grad, rtol=1e-6, atol=0)


def test_per_worker_ranking_is_the_local_loss(worker_results):
    world_size, per_worker = worker_results
    case = make_case(1, world_size, torch.float64)
    for rank, results in enumerate(per_worker):
        expected = losses(*split(case, rank), case["delta"], None)
        for name, value in expected.items():
            torch.testing.assert_close(results["per_worker"][name], value, rtol=0, atol=0)


def test_invalid_input_on_one_worker_raises_on_every_worker(worker_results):
    world_size, per_worker = worker_results
    *others, last = [results["raised"] for results in per_worker]
    assert all(raised == [f"ranking loss inputs of worker(s) [{world_size - 1}] are invalid"] for raised in others)
    assert "non-finite logits" in last[0]


def test_no_process_group_means_no_group():
    assert not dist.is_initialized()
    assert ranking_group("global") is None
    with pytest.raises(ValueError, match="ranking must be one of"):
        ranking_group("everywhere")
