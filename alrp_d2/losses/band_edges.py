"""The ``scan`` path's band edges (:mod:`alrp_d2.losses.ranking_path`): the distinct sorted edges ``q_i -/+ delta`` of
the positives' scores, per-gap prefix ends and scatter-adds over the gaps, the least work in many small operations.

A source ``v`` (a negative, or a positive itself) is fully above the positives with ``q_i + delta < v`` and inside the
linear band of those with ``|v - q_i| <= delta``; both sets are prefixes of the sorted positives, determined by where
``v`` falls among the distinct edges (its *gap*). Sources in the same gap share their prefixes, so
``sum_j u_j H(v_j - q_i)`` needs only each gap's count and sum of ``u`` and ``u v`` (gap totals), and
``sum_i w_i H(v_j - q_i) = A[gap] + B[gap] v_j`` with two per-gap coefficients (prefix sums); notation of
:mod:`alrp_d2.losses.relation_sums`. The sorting relations of these positives are the wavelet trees of
:mod:`alrp_d2.losses.sorting_relations`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .dense_relations import StepEdges
from .gap_lookup import GapLookup
from .serial_indexing import take_rows
from .sorting_relations import SortingRelations

__all__ = ["BandEdges", "Coefficients"]

#: (2, num_gaps) float64, the rows ``A`` and ``B`` with ``sum_i w_i H(v - q_i) = A[gap] + B[gap] v`` for a source
#: ``v`` on the positives' scale; (1, num_gaps), ``A`` alone, for the unit step (H is 1 above, 0 below, no band).
Coefficients = Tensor


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """``out[k] = sum(x[:k])``, of length ``len(x) + 1``."""
    return torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])


@dataclass(frozen=True)
class BandEdges(StepEdges):
    """The distinct sorted band edges ``q_i -/+ delta`` of the sorted positive scores ``q``.

    A source in gap ``g`` (``g`` distinct edges below it; at or below it for the unit step) lies fully
    above the positives ``[0, above_end[g])`` and inside the band of the positives
    ``[above_end[g], band_end[g])``.

    Attributes:
        delta: smoothness of H (0: the unit step).
        scores: (P,) the sorted positive scores (float64); positive_gap: (P,) the gap of each.
        edges: (2P,) float64, the distinct edges ascending, then ``+inf``.
        above_end, band_end: (2P + 1,) int64, per gap.
    """

    delta: float
    scores: Tensor
    positive_gap: Tensor
    edges: Tensor
    above_end: Tensor
    band_end: Tensor

    @staticmethod
    def of(sorted_scores: Tensor, delta: float) -> BandEdges:
        """The edges of the (P,) ascending float64 scores: sorted, tied edges merged into one (a gap between
        them holds nothing), each distinct edge counting the upper and lower edges it stands for."""
        num = len(sorted_scores)
        raw, order = torch.sort(torch.cat([sorted_scores + delta, sorted_scores - delta]))
        is_upper = order < num
        starts_run = torch.ones_like(is_upper)
        starts_run[1:] = raw[1:] != raw[:-1]
        slot = torch.cumsum(starts_run, 0) - 1  # the distinct edge of every edge
        edges = raw.new_full((2 * num,), torch.inf).scatter_reduce_(0, slot, raw, "amax", include_self=False)
        counts = torch.zeros(2, 2 * num + 1, dtype=torch.long, device=raw.device)
        for row, edge_kind in zip(counts, (is_upper, ~is_upper)):
            row.index_add_(0, slot + 1, edge_kind.long())
        above_end, band_end = torch.cumsum(counts, 1)
        positive_gap = torch.searchsorted(edges, sorted_scores, right=delta == 0)
        return BandEdges(delta, sorted_scores, positive_gap, edges, above_end, band_end)

    def lookup(self, offset: Tensor, dtype: torch.dtype) -> GapLookup:
        """The grid that finds the gap of a value of ``dtype`` minus ``offset`` (0-d float64) in O(1)."""
        return GapLookup.build(self.edges, offset, dtype, inclusive=self.unit_step)

    def gap_totals(self, values: Tensor, gaps: Tensor, weights: Optional[Tensor] = None) -> Tensor:
        """(2, num_gaps) float64: every gap's sum of the float64 sources' weights ``u`` (``None``: all
        1, a count) and of ``u * v``."""
        weight = torch.ones_like(values) if weights is None else weights
        totals = values.new_zeros(2, self.num_gaps)
        totals[0].index_add_(0, gaps, weight)
        totals[1].index_add_(0, gaps, values * weight)
        return totals

    def sum_from_gap_totals(self, totals: Tensor) -> Tensor:
        """``sum_j u_j H(v_j - q_i)`` for every sorted positive ``q_i`` from the sources'
        gap totals: per-gap sums scattered to where the gaps' prefixes end."""
        queries, gap_weight = self.scores, totals[0]
        num = queries.numel()
        above = queries.new_zeros(num + 1).index_add_(0, self.above_end, gap_weight)
        # Sources above query i: gaps whose above-prefix ends after i (a suffix sum).
        above = torch.flip(torch.cumsum(torch.flip(above, [0]), 0), [0])[1:]
        if self.unit_step:
            return above
        inv_two_delta = 0.5 / self.delta
        gap_constant = totals[1] * inv_two_delta + 0.5 * gap_weight
        band = queries.new_zeros(2, num + 1)
        for row, value in enumerate((gap_constant, gap_weight)):
            band[row].index_add_(0, self.above_end, value).index_add_(0, self.band_end, -value)
        band = torch.cumsum(band, 1)[:, :-1]
        return above + band[0] - band[1] * queries * inv_two_delta

    def positive_sums(self, weights: Optional[Tensor] = None) -> Tensor:
        """``sum_k w_k H(q_k - q_i)`` for every sorted positive ``i`` (``k = i`` included; ``None``: all 1)."""
        return self.sum_from_gap_totals(self.gap_totals(self.scores, self.positive_gap, weights))

    def coefficients(self, weights: Tensor) -> Coefficients:
        """The :data:`Coefficients` of ``sum_i w_i H(v - q_i)`` for the (P,) float64 weights."""
        prefix = _exclusive_cumsum(weights)
        above = take_rows(prefix, self.above_end)
        if self.unit_step:
            return above[None]
        inv_two_delta = 0.5 / self.delta
        prefix_weighted = _exclusive_cumsum(weights * self.scores)
        band_weight = take_rows(prefix, self.band_end) - above
        band_weighted_query = take_rows(prefix_weighted, self.band_end) - take_rows(prefix_weighted, self.above_end)
        intercept = above + 0.5 * band_weight - band_weighted_query * inv_two_delta
        return torch.stack([intercept, band_weight * inv_two_delta])

    def sorting_relations(self, targets: Tensor) -> SortingRelations:
        """The relations of these positives by target and by score (wavelet trees), for the (P,) float64 targets."""
        return SortingRelations.build(self.scores, targets, self.delta)
