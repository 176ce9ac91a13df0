"""The negatives' gaps among the positives' band edges (the grid of alrp_d2/losses/gap_lookup.py) against
brute force: every value's gap equals a float64 binary search, and the ranking statistics built from the
gaps equal the P x N relation matrix, with ties between negatives and edges, H(0), delta = 0, negatives
outside every band, float32 and float64 logits, and chunks that split the logits anywhere."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.losses import negative_scan
from alrp_d2.losses.band_edges import BandEdges
from alrp_d2.losses.gap_lookup import GapLookup, LookupBuffers
from alrp_d2.losses.ranking_path import choose_path
from alrp_d2.losses.relation_sums import PositiveRanking

from .loop_reference import smooth_step


def lookup_gaps(lookup: GapLookup, values: torch.Tensor) -> torch.Tensor:
    values = values.to(lookup.edges.dtype)
    return lookup.gaps(values, LookupBuffers.allocate(len(values), values.dtype, values.device)).long()


def edge_case(seed: int, coarse: bool) -> torch.Tensor:
    """Sorted float64 positive scores, on a coarse grid (ties) or not, some far from the others."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(int(torch.randint(1, 30, (1,), generator=gen)), generator=gen, dtype=torch.float64)
    if coarse:
        scores = torch.round(scores * 4) / 4
    scores[0] += 20.0 * (seed % 3 == 0)  # an isolated positive: most cells empty, the rest crowded
    return torch.sort(scores).values


def probes(edges: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Values on every edge and one float step beside it, between the edges, outside every band, +-inf."""
    real = edges[torch.isfinite(edges)]
    around = torch.cat([real, torch.nextafter(real, real + 1), torch.nextafter(real, real - 1)])
    spread = torch.randn(300, generator=gen, dtype=torch.float64) * 3 + real.mean()
    outside = torch.tensor([real.min() - 100, real.max() + 100, -torch.inf, torch.inf], dtype=torch.float64)
    return torch.cat([around, spread, outside])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("delta", [0.5, 0.0])
@pytest.mark.parametrize("seed", range(8))
def test_gaps_equal_a_float64_binary_search(seed, delta, dtype):
    """Every value's gap is the number of edges below it in float64 (at or below it for the unit step):
    values equal to an edge, one float step beside it, far outside every band and infinite, with the
    edges shifted by an offset and rounded to the values' dtype."""
    gen = torch.Generator().manual_seed(seed)
    edges = BandEdges.of(edge_case(seed, coarse=seed % 2 == 1), delta)
    offset = torch.randn((), generator=gen, dtype=torch.float64) * 5
    lookup = edges.lookup(offset, dtype)
    values = probes(edges.edges + offset, gen).to(dtype)
    real_edges = edges.edges[torch.isfinite(edges.edges)] + offset  # the +inf padding is no edge
    expected = torch.searchsorted(real_edges, values.double(), right=delta == 0)
    assert torch.equal(lookup_gaps(lookup, values), expected)


def test_one_distinct_edge_and_a_nan():
    """All edges equal (one positive with the unit step): one cell; a NaN value lands in gap 0 or the last."""
    edges = BandEdges.of(torch.tensor([0.0], dtype=torch.float64), 0.0)
    lookup = edges.lookup(torch.tensor(0.0, dtype=torch.float64), torch.float32)
    gaps = lookup_gaps(lookup, torch.tensor([-1.0, 0.0, 1.0, torch.nan]))
    assert gaps[:3].tolist() == [0, 1, 1] and 0 <= gaps[3] <= 1


def brute_force(logits, positives, valid, delta):
    """N_FP, rank and sum_i w_i H(x_ij) for every entry of the (M,) float64 ``logits`` from the P x M matrix."""
    is_negative = valid.clone()
    is_negative[positives] = False
    scores = logits[positives]
    difference = logits[None, :] - scores[:, None]  # [i, j] = x_ij
    relation = smooth_step(difference, delta) if delta > 0 else (difference >= 0).double()
    self_relation = 1.0 if delta == 0 else 0.5
    among_positives = relation[:, positives].sum(1) - self_relation
    num_false_positives = (relation * is_negative).sum(1)
    return scores, relation * is_negative, num_false_positives, 1 + among_positives + num_false_positives


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("delta", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("seed", range(6))
def test_ranking_equals_the_relation_matrix(seed, delta, dtype, monkeypatch, ranking_path):
    """N_FP, rank and the negatives' relation sums against the P x M matrix of H(x_ij), with negatives on
    the positives' band edges (ties, H(0) of the unit step), outside every band and ignored, in chunks of 7,
    on both paths."""
    monkeypatch.setattr(negative_scan, "CHUNK", 7)
    monkeypatch.setattr(negative_scan, "DENSE_CHUNK", 7)
    gen = torch.Generator().manual_seed(seed)
    num = 60
    logits = torch.round(torch.randn(num, generator=gen, dtype=torch.float64) * 4) / 4
    positives = torch.randperm(num, generator=gen)[:6]
    scores = logits[positives]
    # Negatives exactly on band edges and on positive scores, far below and far above every band.
    logits[torch.arange(6) * 3 + 1] = torch.cat([scores[:2] - delta, scores[2:4] + delta, scores[4:]])
    logits[[2, 5]] = torch.tensor([-50.0, 50.0], dtype=torch.float64)
    logits = logits.to(dtype)  # exact: the values are on a coarse grid
    positives = positives[torch.argsort(logits[positives].double(), stable=True)]
    valid = torch.rand(num, generator=gen) > 0.2
    ranking = PositiveRanking.build(logits, positives, valid, delta, choose_path(ranking_path, logits.device))
    sorted_scores, negative_relation, num_false_positives, rank = brute_force(logits.double(), positives, valid, delta)
    # The scan path shifts the scores by the smallest one, the dense path does not.
    torch.testing.assert_close(ranking.positive_scores - ranking.positive_scores[0], sorted_scores - sorted_scores[0])
    torch.testing.assert_close(ranking.num_false_positives, num_false_positives)
    torch.testing.assert_close(ranking.rank, rank)
    weights = torch.rand(len(positives), generator=gen, dtype=torch.float64)
    expected = weights @ negative_relation
    coefficients = ranking.negative_coefficients(weights)
    torch.testing.assert_close(ranking.negative_relation_sum(coefficients), expected)
    torch.testing.assert_close(ranking.negative_relation_total(coefficients), expected.sum())
    # The scan ranks the positives as negatives and removes them after: gap 0, and no count of them in the totals.
    assert ranking.negatives.gaps[positives].tolist() == [0] * len(positives)
    relevant = torch.zeros(num, dtype=torch.bool).index_fill_(0, positives, True).logical_not_() & valid
    relevant &= logits.double() > sorted_scores[0] - delta if delta > 0 else logits.double() >= sorted_scores[0]
    assert ranking.negative_totals[0].sum().item() == relevant.sum().item()
