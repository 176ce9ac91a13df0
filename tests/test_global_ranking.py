"""Global ranking: 2 and 3 gloo workers on loopback, each holding a random part of a
seeded ranking problem, against one process computing the loss on the concatenation: aLRP Loss,
AP Loss and the interpolated AP Loss."""

from __future__ import annotations

import os
from typing import Dict

import pytest
import torch
import torch.distributed as dist

from alrp_d2.losses import LabelledSet, NonFiniteInputError, alrp_loss, ap_loss
from alrp_d2.losses.global_ranking import exchange_checked, global_mean, ranking_group
from alrp_d2.losses.input_checks import check_ranking_inputs

from .distributed_cases import NUM_CASES, PATHS, TOLERANCE, assert_relative, make_case, spawn_workers, split
from .ranking_cases import only_set


def losses(logits, labels, errors, delta, group, path: str = "auto") -> Dict[str, torch.Tensor]:
    """aLRP and AP Loss values and the gradients of the logits and E_loc, on ``path``."""
    logits = logits.clone().requires_grad_(True)
    errors = errors.clone().requires_grad_(True)
    alrp = only_set(alrp_loss([LabelledSet(logits, labels, errors)], delta=delta, group=group, path=path))
    grad_logits, grad_errors = torch.autograd.grad(alrp.loss_cls + alrp.loss_loc, [logits, errors], allow_unused=True)
    ap = only_set(ap_loss([LabelledSet(logits, labels)], delta=delta, group=group, path=path))
    (grad_ap,) = torch.autograd.grad(ap.loss, [logits])
    interpolated = only_set(
        ap_loss([LabelledSet(logits, labels)], delta=delta, eps=None, group=group, interpolated=True, path=path)
    )
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
        for seed in range(NUM_CASES):
            for dtype in (torch.float64, torch.float32):
                case = make_case(seed, world_size, dtype)
                results["global"][path].append(losses(*split(case, rank), case["delta"], group, path))
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


@pytest.mark.parametrize("seed", range(NUM_CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_global_loss_equals_one_process_on_the_concatenation(worker_results, seed, dtype, ranking_path):
    world_size, per_worker = worker_results
    index = 2 * seed + (dtype == torch.float32)
    case = make_case(seed, world_size, dtype)
    expected = losses(case["logits"], case["labels"], case["errors"], case["delta"], None, ranking_path)
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
    # Float32 sums of the n nonnegative errors in two orders (all at once; per worker, then in float64 over the
    # workers): any order of float32 additions is within (n - 1) 2^-24 of the exact sum (Higham, Accuracy and
    # Stability of Numerical Algorithms, 4.2), whatever the CPU's kernels; the division adds 2^-24 on each side.
    rtol = max(errors.numel(), 1) * torch.finfo(torch.float32).eps
    for results in per_worker:
        torch.testing.assert_close(results[f"mean_{seed}"][0], expected.detach(), rtol=rtol, atol=1e-7)
    gathered = torch.cat([results[f"mean_{seed}"][1] for results in per_worker]) / world_size
    # Every entry is 1 / n, within a float32 rounding or two on each side (one more for the division by the world
    # size), 2.4e-7 relative at most: 1e-6 is above that on any CPU.
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
