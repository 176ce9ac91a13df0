"""The segmented ranking (``alrp_d2.losses.*_loss`` of several sets): the sets of a step ranked in one call equal the
per-set calls, values and gradients, for every loss, on both paths; its host synchronisations; the global ranking on
2 gloo workers."""

from __future__ import annotations

import itertools
import os
from typing import Dict

import pytest
import torch

from alrp_d2.losses import RankingSet, alrp_loss, ap_loss, dense_relations, rank_sort_loss, segmented_scan
from alrp_d2.losses.global_ranking import ranking_group

from .distributed_cases import PATHS, assert_relative, spawn_workers
from .host_syncs import HostSyncCounter
from .segmented_cases import LOSSES, leaves, one_call, single_call, step_sets, weighted_backward

TOLERANCE = 1e-6


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("path", ["dense", "scan"])
def test_one_call_equals_the_per_set_calls(path, name, seed):
    """All sets in one call on either path: no host synchronisation on the ``dense`` path, one on the ``scan`` path
    (the grid lookup's search steps)."""
    components = LOSSES[name][1]
    sets = leaves(step_sets(seed))
    weights = torch.arange(1, len(sets) + 1, dtype=torch.float64)
    with HostSyncCounter() as syncs:
        terms = one_call(name, sets, path=path)
    assert syncs.total() == {"dense": 0, "scan": 1}[path], syncs.by_operation
    weighted_backward(terms, components, weights)
    for index, ranking_set in enumerate(leaves(sets)):
        expected = single_call(name, ranking_set)
        weighted_backward(expected, components, weights[index])
        for field in expected._fields:
            assert_relative(getattr(terms, field)[index], getattr(expected, field), TOLERANCE)
        assert_relative(sets[index].logits.grad, ranking_set.logits.grad, TOLERANCE)
        if name == "alrp":
            assert_relative(sets[index].positive_values.grad, ranking_set.positive_values.grad, TOLERANCE)


#: Smaller pieces of work that must change nothing: chunks of 7 logits that split every set (and, on the dense path,
#: cross the sets' boundaries), and the matrix of every positive's relations to its set's positives a row at a time.
SPLITS = {
    "chunks of 7 logits": [(segmented_scan, "CHUNK", 7), (segmented_scan, "SET_CHUNK", 7)],
    "blocks of one row": [(dense_relations, "BLOCK_ENTRIES", 1)],
}


@pytest.mark.parametrize("path", ["dense", "scan"])
@pytest.mark.parametrize("name", ["alrp", "rank_sort"])
@pytest.mark.parametrize("split", sorted(SPLITS))
def test_smaller_pieces_change_nothing(split, name, path, monkeypatch):
    sets = leaves(step_sets(4))
    expected = one_call(name, sets, path=path)
    for module, constant, value in SPLITS[split]:
        monkeypatch.setattr(module, constant, value)
    pieces = leaves(sets)
    terms = one_call(name, pieces, path=path)
    weighted_backward(terms, LOSSES[name][1], torch.ones(len(sets), dtype=torch.float64))
    weighted_backward(expected, LOSSES[name][1], torch.ones(len(sets), dtype=torch.float64))
    for field in terms._fields:
        assert_relative(getattr(terms, field), getattr(expected, field), 1e-12)
    for piece_set, ranking_set in zip(pieces, sets):
        assert_relative(piece_set.logits.grad, ranking_set.logits.grad, 1e-12)


def test_sets_without_any_positive_give_connected_zeros():
    sets = [RankingSet(torch.randn(2, 4, 3, requires_grad=True), torch.zeros(0, dtype=torch.long)) for _ in range(3)]
    terms = rank_sort_loss([s._replace(positive_values=torch.zeros(0)) for s in sets], path="dense")
    assert terms.ranking_loss.shape == (3,) and torch.all(terms.ranking_loss == 0)
    ap_loss(sets, path="dense").loss.sum().backward()
    assert all(torch.all(s.logits.grad == 0) for s in sets)


def test_missing_values_and_no_set_are_named():
    logits = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match=r"targets \(positive_values\); set\(s\) \[1\] have none"):
        rank_sort_loss([RankingSet(logits, torch.tensor([0]), torch.ones(1)), RankingSet(logits, torch.tensor([1]))])
    for loss in (ap_loss, rank_sort_loss, alrp_loss):
        with pytest.raises(ValueError, match="at least one set"):
            loss([])
    with pytest.raises(ValueError, match=r"path must be one of .*got 'gpu'"):
        ap_loss([RankingSet(logits, torch.tensor([1]))], path="gpu")


def worker_part(ranking_set: RankingSet, rank: int, world_size: int) -> RankingSet:
    """This worker's images of a set and its positives among them."""
    images = ranking_set.logits.shape[0] // world_size
    per_image = ranking_set.logits[0].numel()
    first, last = rank * images * per_image, (rank + 1) * images * per_image
    mine = (ranking_set.positive_index >= first) & (ranking_set.positive_index < last)
    valid = None if ranking_set.valid is None else ranking_set.valid[rank * images : (rank + 1) * images]
    return RankingSet(
        ranking_set.logits[rank * images : (rank + 1) * images],
        ranking_set.positive_index[mine] - first,
        ranking_set.positive_values[mine],
        valid,
    )


def _worker(rank: int, world_size: int, out_dir: str) -> None:
    group = ranking_group("global")
    results: Dict = {}
    for path, name, seed in itertools.product(PATHS, sorted(LOSSES), range(3)):
        sets = leaves([worker_part(s, rank, world_size) for s in step_sets(seed, images=4)])
        terms = one_call(name, sets, group=group, path=path)
        weighted_backward(terms, LOSSES[name][1], torch.ones(len(sets), dtype=torch.float64))
        results[path, name, seed] = (terms, [s.logits.grad for s in sets])
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


def test_global_one_call_equals_the_per_set_calls_on_the_concatenation(tmp_path):
    spawn_workers(2, _worker, str(tmp_path))
    per_worker = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in range(2)]
    for path, name, seed in itertools.product(PATHS, sorted(LOSSES), range(3)):
        for index, ranking_set in enumerate(leaves(step_sets(seed, images=4))):
            expected = single_call(name, ranking_set)
            weighted_backward(expected, LOSSES[name][1], torch.tensor(1.0, dtype=torch.float64))
            for terms, _ in (results[path, name, seed] for results in per_worker):
                for field in expected._fields:
                    assert_relative(getattr(terms, field)[index], getattr(expected, field), TOLERANCE)
            grads = [results[path, name, seed][1][index] for results in per_worker]
            assert_relative(torch.cat(grads) / 2, ranking_set.logits.grad, TOLERANCE)
