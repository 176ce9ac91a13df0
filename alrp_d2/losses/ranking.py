"""Ranking statistics of positives against positives and negatives, in O((P + N) log P).

Notation of the paper (Sec. 2.1, App. E): for a positive ``i`` and any example ``j``,
``x_ij = s_j - s_i`` and the smoothed step of App. E, Eq. (14),

    H(x) = 0 for x < -delta,  x / (2 delta) + 0.5 for |x| <= delta,  1 for x > delta.

Every quantity the error-driven losses need is a *relation sum* of weighted sources ``v_j``
and sorted query scores ``q_i``, ``sum_j u_j H(v_j - q_i)`` or its transpose
``sum_i w_i H(v_j - q_i)``. Because ``H`` is piecewise linear, a source contributes fully to
the queries below its band and linearly, ``u_j (v_j / (2 delta) + 0.5) - u_j q_i / (2 delta)``,
to the queries inside its band ``|v_j - q_i| <= delta``. With the positives sorted once, the
band of each source is a contiguous range of sorted positives found by binary search, so
both directions reduce to bucket counts and prefix sums: no P x N matrix and no loop over
positives. Everything is accumulated in float64.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["smooth_step", "PositiveRanking"]


def smooth_step(x: Tensor, delta: float) -> Tensor:
    """The piecewise-linear step function H of App. E, Eq. (14)."""
    return (x / (2.0 * delta) + 0.5).clamp(0.0, 1.0)


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """``out[k] = sum(x[:k])``, of length ``len(x) + 1``."""
    return torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])


def _bands(sorted_queries: Tensor, sources: Tensor, delta: float) -> Tuple[Tensor, Tensor]:
    """For each source ``v``, the range ``[start, end)`` of sorted queries with
    ``|v - q| <= delta``; the queries before ``start`` have ``H(v - q) = 1``.

    H is continuous, so a query exactly on a band edge gives the same contribution whichever
    side rounding puts it on.
    """
    start = torch.bucketize(sources, sorted_queries + delta, out_int32=True, right=False)
    end = torch.bucketize(sources, sorted_queries - delta, out_int32=True, right=True)
    return start, end


def _sum_over_sources(
    sorted_queries: Tensor, sources: Tensor, weights: Optional[Tensor], start: Tensor, end: Tensor, delta: float
) -> Tensor:
    """``sum_j u_j H(v_j - q_i)`` for every sorted query ``q_i`` (bucket counts + prefix sums);
    ``weights=None`` means unit weights (counts)."""
    size = sorted_queries.numel() + 1
    inv_two_delta = 0.5 / delta
    if weights is None:
        starts = torch.bincount(start, minlength=size).double()
        slope = starts - torch.bincount(end, minlength=size).double()
        constant = sources * inv_two_delta + 0.5
    else:
        starts = sources.new_zeros(size).index_add_(0, start, weights)
        slope = starts - sources.new_zeros(size).index_add_(0, end, weights)
        constant = weights * (sources * inv_two_delta + 0.5)
    band_constant = sources.new_zeros(size).index_add_(0, start, constant).index_add_(0, end, -constant)
    # Sources fully above query i are those with start > i: a suffix sum of the start buckets.
    above = torch.flip(torch.cumsum(torch.flip(starts, [0]), 0), [0])[1:]
    band_constant = torch.cumsum(band_constant, 0)[:-1]
    band_slope = torch.cumsum(slope, 0)[:-1]
    return above + band_constant - band_slope * sorted_queries * inv_two_delta


def _sum_over_queries(
    sorted_queries: Tensor, weights: Tensor, sources: Tensor, start: Tensor, end: Tensor, delta: float
) -> Tensor:
    """``sum_i w_i H(v_j - q_i)`` for every source ``v_j`` (prefix sums over the queries)."""
    inv_two_delta = 0.5 / delta
    prefix = _exclusive_cumsum(weights)
    prefix_weighted = _exclusive_cumsum(weights * sorted_queries)
    band_weight = prefix[end] - prefix[start]
    band_weighted_query = prefix_weighted[end] - prefix_weighted[start]
    band = band_weight * (sources * inv_two_delta + 0.5) - band_weighted_query * inv_two_delta
    return prefix[start] + band


@dataclass(frozen=True)
class PositiveRanking:
    """The positives of one ranking sorted by ascending score, related to each other and to
    the relevant negatives (App. E Alg. 2, lines 2-10 and 18-25).

    Scores are float64 and shifted by the smallest positive score, which leaves every
    ``x_ij`` unchanged and keeps the prefix sums small.

    Attributes:
        delta: smoothness of H.
        positive_index: (P,) index into the flattened logits of each sorted positive.
        positive_order: (P,) position of each sorted positive among the positives taken in
            the order of the flattened logits (to gather per-positive inputs such as E_loc).
        negative_index: (N,) index of each relevant negative (score >= min positive - delta,
            App. E line 8; the others have H(x_ij) = 0 for every positive).
        positive_scores, negative_scores: (P,) sorted and (N,) scores.
        negative_bands, positive_bands: band ranges (see :func:`_bands`) of the negatives
            and of the positives among the sorted positives.
        num_false_positives: (P,) N_FP(i) = sum_{j in N} H(x_ij) (App. E line 24).
        rank_positive: (P,) rank^+(i) = 1 + sum_{k in P, k != i} H(x_ik) (line 23).
        rank: (P,) rank(i) = rank^+(i) + N_FP(i) (line 25).
        tie_first: (P,) first sorted position holding the same score.
    """

    delta: float
    positive_index: Tensor
    positive_order: Tensor
    negative_index: Tensor
    positive_scores: Tensor
    negative_scores: Tensor
    negative_bands: Tuple[Tensor, Tensor]
    positive_bands: Tuple[Tensor, Tensor]
    num_false_positives: Tensor
    rank_positive: Tensor
    rank: Tensor
    tie_first: Tensor

    @staticmethod
    def build(logits: Tensor, positive_mask: Tensor, negative_mask: Tensor, delta: float) -> "PositiveRanking":
        """Sorts the positives and relates them to the relevant negatives.

        Args:
            logits: (M,) finite scores of any float dtype; not differentiated.
            positive_mask, negative_mask: (M,) bool masks, at least one positive.
            delta: smoothness of H, > 0.
        """
        logits = logits.detach()
        positive_index = torch.nonzero(positive_mask).squeeze(1)
        positive_scores, order = torch.sort(logits[positive_index].double())
        positive_index = positive_index[order]
        offset = positive_scores[0]
        positive_scores = positive_scores - offset

        # Relevant negatives (line 8). Rounding the float64 threshold down to the logits'
        # dtype may admit a few extra negatives; their band is empty, so they add nothing.
        threshold = (offset - delta).to(logits.dtype)
        threshold = torch.where(
            threshold.double() > offset - delta, torch.nextafter(threshold, threshold.new_tensor(-torch.inf)), threshold
        )
        negative_index = torch.nonzero(negative_mask & (logits >= threshold)).squeeze(1)
        negative_scores = logits[negative_index].double() - offset

        negative_bands = _bands(positive_scores, negative_scores, delta)
        positive_bands = _bands(positive_scores, positive_scores, delta)
        num_false_positives = _sum_over_sources(positive_scores, negative_scores, None, *negative_bands, delta)
        # rank^+ = 1 + sum_{k != i} H(x_ik): the sum over all k includes the self term H(0) = 0.5.
        rank_positive = 0.5 + _sum_over_sources(positive_scores, positive_scores, None, *positive_bands, delta)
        return PositiveRanking(
            delta=delta,
            positive_index=positive_index,
            positive_order=order,
            negative_index=negative_index,
            positive_scores=positive_scores,
            negative_scores=negative_scores,
            negative_bands=negative_bands,
            positive_bands=positive_bands,
            num_false_positives=num_false_positives,
            rank_positive=rank_positive,
            rank=rank_positive + num_false_positives,
            tie_first=torch.searchsorted(positive_scores, positive_scores),
        )

    @property
    def num_positives(self) -> int:
        return self.positive_scores.numel()

    def positive_relation_sum(self, weights: Tensor) -> Tensor:
        """``sum_{k in P, k != i} w_k H(x_ik)`` for every sorted positive ``i`` (the self term
        H(0) = 0.5 is removed)."""
        total = _sum_over_sources(
            self.positive_scores, self.positive_scores, weights, *self.positive_bands, self.delta
        )
        return total - 0.5 * weights

    def negative_relation_sum(self, weights: Tensor) -> Tensor:
        """``sum_{i in P} w_i H(x_ij)`` for every relevant negative ``j``.

        With ``w_i = (l(i) - l*(i)) / N_FP(i)`` this is the error the positives distribute
        over negative ``j`` through p(j|i) = H(x_ij) / N_FP(i) (Alg. 1 line 4).
        """
        return _sum_over_queries(self.positive_scores, weights, self.negative_scores, *self.negative_bands, self.delta)

    def step_cumsum(self, values: Tensor) -> Tensor:
        """``sum_{k in P, s_k >= s_i} v_k``: the cumulative sum of App. E line 14 in descending
        score order with the unit step H(x) = [x >= 0], so tied positives count together."""
        suffix = torch.flip(torch.cumsum(torch.flip(values, [0]), 0), [0])
        return suffix[self.tie_first]
