"""The wavelet tree and the sorting relations against brute-force P x P sums."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.losses import dense_relations
from alrp_d2.losses.dense_relations import DenseSortingRelations, PositiveMatrix
from alrp_d2.losses.ranking_path import choose_path
from alrp_d2.losses.relation_sums import PositiveRanking
from alrp_d2.losses.sorting_relations import SortingRelations, TargetOrderTree

from .loop_reference import smooth_step


def step(x: torch.Tensor) -> torch.Tensor:
    """The unit step of delta = 0, H(x) = 1 for x >= 0."""
    return (x >= 0).double()


@pytest.mark.parametrize("num", [1, 2, 3, 4, 7, 8, 9, 16, 17, 100])
def test_dominance_sums_equal_brute_force(num):
    """Every prefix of the target order against every cut of the score positions, for sizes at
    and around powers of two."""
    gen = torch.Generator().manual_seed(num)
    order = torch.randperm(num, generator=gen)  # score position at each target position
    columns = torch.randn(num, 3, generator=gen, dtype=torch.float64)
    prefix, cuts = torch.meshgrid(torch.arange(num + 1), torch.arange(num + 1), indexing="ij")
    sums = TargetOrderTree(order).dominance_sums(columns, prefix.reshape(-1), cuts.reshape(-1, 1))
    target_position = torch.empty_like(order)
    target_position[order] = torch.arange(num)
    inside = (target_position[None, :] < prefix.reshape(-1, 1)) & (torch.arange(num)[None, :] < cuts.reshape(-1, 1))
    torch.testing.assert_close(sums[:, 0], inside.double() @ columns, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dense, block_entries", [(False, None), (True, None), (True, 1000)])
@pytest.mark.parametrize("delta", [0.5, 0.0, 2.0])
@pytest.mark.parametrize("ties", [False, True])
def test_sorting_relations_equal_brute_force(delta, ties, dense, block_entries, monkeypatch):
    """The wavelet tree (scan path) and the P x P blocks (dense path: one block, or blocks of 3 rows)."""
    if block_entries is not None:
        monkeypatch.setattr(dense_relations, "BLOCK_ENTRIES", block_entries)
    gen = torch.Generator().manual_seed(int(ties))
    num = 300
    scores = torch.sort(torch.randn(num, generator=gen, dtype=torch.float64)).values
    targets = torch.rand(num, generator=gen, dtype=torch.float64)
    if ties:
        scores = torch.sort(torch.round(scores * 4) / 4).values
        targets = torch.round(targets * 5) / 5
    weights = torch.randn(num, 2, generator=gen, dtype=torch.float64)
    if dense:
        relations = DenseSortingRelations(PositiveMatrix.of(scores, delta), targets)
    else:
        relations = SortingRelations.build(scores, targets, delta)
    difference = scores[None, :] - scores[:, None]  # [i, k] = s_k - s_i
    relation = smooth_step(difference, delta) if delta > 0 else step(difference)
    smaller = targets[None, :] < targets[:, None]  # [i, k]: t_k < t_i
    at_least_sums, smaller_sums = relations.target_split_sums(weights)
    torch.testing.assert_close(smaller_sums, (relation * smaller) @ weights)
    torch.testing.assert_close(at_least_sums, (relation * ~smaller) @ weights)
    # sum_{i: t_i > t_k} w_i H(s_k - s_i) for every k: the transpose of the "smaller" relation.
    torch.testing.assert_close(relations.larger_target_source_sums(weights), (relation * smaller).T @ weights)


def test_unit_step_ranking_equals_brute_force(ranking_path):
    """The relation sums with delta = 0: H(x) = 1 for x >= 0, so ties count fully, also H(0) of a
    positive with itself (removed from rank^+ = 1 + sum_{k != i} H(x_ik))."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.round(torch.randn(200, generator=gen, dtype=torch.float64) * 2) / 2
    labels = torch.randint(0, 2, (200,), generator=gen)
    path = choose_path(ranking_path, logits.device)
    ranking = PositiveRanking.build(logits, torch.nonzero(labels == 1).squeeze(1), labels == 0, 0.0, path)
    positives = ranking.positive_scores
    offset = logits[labels == 1].min() - positives[0]  # the scan path's shift (0 on the dense path)
    negatives = logits[labels == 0] - offset
    weights = torch.rand(positives.numel(), generator=gen, dtype=torch.float64)
    among_positives = step(positives[None, :] - positives[:, None]) - torch.eye(positives.numel())
    num_false_positives = step(negatives[None, :] - positives[:, None]).sum(1)
    torch.testing.assert_close(ranking.num_false_positives, num_false_positives)
    torch.testing.assert_close(ranking.rank, 1 + among_positives.sum(1) + num_false_positives)
    torch.testing.assert_close(ranking.positive_relation_sum(weights), among_positives @ weights)
    # Every entry of the logits: the negatives' sums (0 below every positive), 0 for the positives.
    negative_sums = ranking.negative_relation_sum(ranking.negative_coefficients(weights))
    torch.testing.assert_close(negative_sums[labels == 0], step(negatives[:, None] - positives[None, :]) @ weights)
    assert torch.all(negative_sums[labels == 1] == 0)
