"""Global ranking for Rank & Sort Loss: 2 and 3 gloo workers holding random parts of a seeded problem
against one process on the concatenation (the split and the workers of tests/test_global_ranking.py)."""

from __future__ import annotations

import os
from typing import Dict

import pytest
import torch

from alrp_d2.losses import LabelledSet, NonFiniteInputError, rank_sort_loss
from alrp_d2.losses.global_ranking import ranking_group

from .distributed_cases import NUM_CASES, PATHS, TOLERANCE, assert_relative, make_case, spawn_workers, split
from .ranking_cases import only_set

DELTAS = [0.5, 0.0, 0.1]


def rank_sort_case(seed: int, world_size: int, dtype: torch.dtype) -> Dict:
    """The seeded split of :func:`make_case` with IoU targets for its positives (1 - E_loc / 2, on
    a grid of 0.25 on even seeds: equal IoUs, also across workers) and a delta of ``DELTAS``."""
    case = make_case(seed, world_size, dtype)
    ious = 1.0 - case["errors"].double() / 2
    if seed % 2 == 0:
        ious = (torch.round(ious * 4) / 4).clamp_min(0.25)
    targets = case["labels"].double()
    targets[case["labels"] == 1] = ious
    case["errors"] = ious.to(dtype)  # split() hands each worker the IoUs of its positives
    case["targets"] = targets.to(dtype)
    case["delta"] = DELTAS[seed % len(DELTAS)]
    return case


def worker_targets(case: Dict, rank: int):
    """This worker's logits and targets."""
    logits, labels, ious = split(case, rank)
    targets = labels.to(logits.dtype)
    targets[labels == 1] = ious
    return logits, targets


def losses(logits, targets, delta, group, path: str = "auto") -> Dict[str, torch.Tensor]:
    logits = logits.clone().requires_grad_(True)
    terms = only_set(rank_sort_loss([LabelledSet(logits, targets)], delta=delta, group=group, path=path))
    (grad,) = torch.autograd.grad(terms.ranking_loss, [logits])
    return {
        "ranking": terms.ranking_loss.detach(),
        "sorting": terms.sorting_loss.detach(),
        "positive_magnitude": terms.positive_gradient_magnitude,
        "negative_magnitude": terms.negative_gradient_magnitude,
        "grad": grad,
    }


def _worker(rank: int, world_size: int, out_dir: str) -> None:
    group = ranking_group("global")
    results: Dict = {"global": {path: [] for path in PATHS}, "raised": []}
    for path in PATHS:
        for seed in range(NUM_CASES):
            for dtype in (torch.float64, torch.float32):
                case = rank_sort_case(seed, world_size, dtype)
                results["global"][path].append(losses(*worker_targets(case, rank), case["delta"], group, path))
    logits = torch.randn(20, dtype=torch.float64)
    targets = torch.zeros(20, dtype=torch.float64)
    targets[:3] = 0.5
    if rank == world_size - 1:
        targets[5] = 1.5
    try:
        only_set(rank_sort_loss([LabelledSet(logits, targets)], group=group))
    except (NonFiniteInputError, ValueError) as error:
        results["raised"].append(str(error))
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module", params=[2, 3], ids=["2_workers", "3_workers"])
def worker_results(request, tmp_path_factory):
    world_size = request.param
    out_dir = str(tmp_path_factory.mktemp(f"rank_sort_global_{world_size}"))
    spawn_workers(world_size, _worker, out_dir)
    return world_size, [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world_size)]


@pytest.mark.parametrize("seed", range(NUM_CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_global_rank_sort_equals_one_process_on_the_concatenation(worker_results, seed, dtype, ranking_path):
    world_size, per_worker = worker_results
    index = 2 * seed + (dtype == torch.float32)
    case = rank_sort_case(seed, world_size, dtype)
    expected = losses(case["logits"], case["targets"], case["delta"], None, ranking_path)
    rtol = TOLERANCE[dtype]
    for name in ("ranking", "sorting", "positive_magnitude", "negative_magnitude"):
        for results in per_worker:
            assert_relative(results["global"][ranking_path][index][name], expected[name], rtol)
    gathered = torch.cat([results["global"][ranking_path][index]["grad"] for results in per_worker]) / world_size
    assert_relative(gathered, expected["grad"], rtol)


def test_cases_have_equal_ious_across_workers():
    case = rank_sort_case(4, 2, torch.float64)
    ious = [worker_targets(case, rank)[1] for rank in range(2)]
    ious = [values[values > 0] for values in ious]
    assert bool(torch.isin(ious[0], ious[1]).any())
    assert {rank_sort_case(seed, 2, torch.float64)["delta"] for seed in range(NUM_CASES)} == set(DELTAS)


def test_invalid_targets_on_one_worker_raise_on_every_worker(worker_results):
    world_size, per_worker = worker_results
    *others, last = [results["raised"] for results in per_worker]
    assert all(raised == [f"ranking loss inputs of worker(s) [{world_size - 1}] are invalid"] for raised in others)
    assert "targets must be <= 1" in last[0]
