"""The wavelet tree and the sorting relations against brute-force P x P sums."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.losses.sorting_relations import SortingRelations, TargetOrderTree

from .loop_reference import smooth_step


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


@pytest.mark.parametrize("delta", [0.5, 0.0, 2.0])
@pytest.mark.parametrize("ties", [False, True])
def test_sorting_relations_equal_brute_force(delta, ties):
    gen = torch.Generator().manual_seed(int(ties))
    num = 300
    scores = torch.sort(torch.randn(num, generator=gen, dtype=torch.float64)).values
    targets = torch.rand(num, generator=gen, dtype=torch.float64)
    if ties:
        scores = torch.sort(torch.round(scores * 4) / 4).values
        targets = torch.round(targets * 5) / 5
    weights = torch.randn(num, 2, generator=gen, dtype=torch.float64)
    relations = SortingRelations.build(scores, targets, delta)
    difference = scores[None, :] - scores[:, None]  # [i, k] = s_k - s_i
    step = smooth_step(difference, delta) if delta > 0 else (difference >= 0).double()
    smaller = targets[None, :] < targets[:, None]  # [i, k]: t_k < t_i
    torch.testing.assert_close(relations.smaller_target_sums(weights), (step * smaller) @ weights)
    torch.testing.assert_close(relations.at_least_target_sums(weights), (step * ~smaller) @ weights)
    # sum_{i: t_i > t_k} w_i H(s_k - s_i) for every k: the transpose of the "smaller" relation.
    torch.testing.assert_close(relations.larger_target_source_sums(weights), (step * smaller).T @ weights)
