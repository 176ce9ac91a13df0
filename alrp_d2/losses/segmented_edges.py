"""The band edges of several independent rankings ("sets") computed together, on the ``dense`` path's plan
(:mod:`alrp_d2.losses.dense_relations`): every set ranks its own positives against its own negatives, no score of one
set is compared with another set's.

The positives are sorted by (set, score). The 2P edges ``q_i -/+ delta`` of all sets are sorted by value once; a value
of set ``s`` lies in the gap ``(s, r)`` where ``r`` counts the edges of all sets below it (one ``searchsorted`` for all
sets): every set owns a row of ``2P + 1`` gaps. A gap ``(s, r)`` relates to the positives of set ``s`` exactly as the
gap of a ranking of set ``s`` alone that holds the same values, because no edge of set ``s`` lies between the edges of
other sets that bound it. The positives of set ``s`` fully below, or with the gap in their band, are counted from a
table of the running counts of every set's lower and upper edges in the sorted order; the sums over a set's gaps are
cumulative sums along its row, those over a set's positives differences of cumulative sums at its ends. The gaps of
other sets' edges hold no value of set ``s`` and add nothing.

The relations among the positives are, on the ``dense`` path, every positive's row of ``H(q_k - q_i)`` over its own
set's positives (:class:`alrp_d2.losses.set_matrix.SetMatrix`: a constant number of operations, ``P width`` work for
sets of at most ``width`` positives); on the ``scan`` path they take the gaps: the positives are sources in the gaps
of their own set (``sum_k w_k H(q_k - q_i)`` from their gap totals, as the negatives'), O(P log P) work, and Rank &
Sort Loss's sorting relations are one pass of the wavelet trees over blocks of sets
(:mod:`alrp_d2.losses.segmented_sorting`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .dense_relations import StepEdges
from .segmented_sorting import segmented_sorting_relations
from .serial_indexing import take_rows
from .set_layout import SetSpans
from .set_matrix import SetMatrix, SetSortingRelations
from .sorting_relations import SortingRelations

__all__ = ["SegmentedEdges", "set_mixing"]


@functools.lru_cache(maxsize=16)
def set_mixing(delta: float, device: torch.device) -> Tensor:
    """The coefficients ``A`` (and ``B``) from the prefix sums of ``w`` (and ``w q``) at the ends of a gap's band and
    above part and at its set's first position: :func:`alrp_d2.losses.dense_relations.band_mixing` with the set's
    part before its first position removed (``A = W_above - W_start`` for the unit step)."""
    if delta == 0:
        return torch.tensor([[0.0, 1.0, -1.0]], dtype=torch.float64, device=device)
    c = 0.5 / delta
    rows = [[0.5, 0.5, -1.0, -c, c, 0.0], [c, -c, 0.0, 0.0, 0.0, 0.0]]
    return torch.tensor(rows, dtype=torch.float64, device=device)


@dataclass(frozen=True)
class SegmentedEdges(StepEdges):
    """The interface of :class:`alrp_d2.losses.dense_relations.DenseEdges` for positives sorted by (set, score); the
    gaps are ``S`` rows of ``2P + 1`` (module docstring), gap ``(s, r)`` at ``s (2P + 1) + r``.

    Attributes:
        delta, scores, band_constant: as in ``DenseEdges``.
        edges: (2P,) the edges of all sets, ascending.
        sets: (P,) the set of every positive; spans: where every set's positives lie.
        query_gaps: (2, P) the gaps of ``q_i - delta`` and ``q_i + delta`` in the row of the positive's set.
        positive_gaps: (P,) the gap of every positive's own score in the row of its set (``scan``: the relations
            among the positives by their gaps), or None (``dense``: by ``matrix``).
        matrix: every positive's relations to its set's positives (``dense``), or None (``scan``).
        gap_ends: (3, S (2P + 1)) the positions one past the positives of the gap's set with the gap in their band,
            and fully below it, and the set's first position.
    """

    delta: float
    scores: Tensor
    edges: Tensor
    band_constant: Tensor
    sets: Tensor
    spans: SetSpans
    query_gaps: Tensor
    positive_gaps: Optional[Tensor]
    matrix: Optional[SetMatrix]
    gap_ends: Tensor

    @staticmethod
    def of(sorted_scores: Tensor, sets: Tensor, spans: SetSpans, delta: float, batched: bool) -> SegmentedEdges:
        """``sorted_scores`` (P,) float64 ascending within each set, ``sets`` (P,) ascending; ``batched``: the
        relations among the positives by the sets' matrix (``dense``), else by their gaps (``scan``)."""
        num, num_sets = sorted_scores.numel(), spans.starts.numel()
        width = 2 * num + 1
        bounds = torch.stack([sorted_scores - delta, sorted_scores + delta])
        edges, order = torch.sort(bounds.view(-1))
        # Group s: the lower edges of set s, S + s: its upper edges, 2 S + s: no edge (its first position alone).
        groups = take_rows(spans.edge_groups, order)
        running = torch.zeros(3 * num_sets, width, dtype=torch.long, device=edges.device)
        running[groups, torch.arange(1, width, device=edges.device)] = 1
        # [group, r]: the set's first position plus the group's edges among the first r. Gap r of a set holds values
        # only if e[r - 1] < e[r] (between tied edges no value fits): then its edges at or below e[r - 1] are the
        # first r, and the group's among them are the ends of the gap (the coefficients of empty gaps meet no value).
        running = torch.cumsum(running, 1).view(3, num_sets, width).add_(spans.starts[:, None])
        scaled = sorted_scores if delta == 0 else sorted_scores * (0.5 / delta)
        matrix, positive_gaps = None, None
        if batched:
            matrix = SetMatrix(scaled, spans.bounds, spans.width(), delta)
        else:
            positive_gaps = torch.add(torch.searchsorted(edges, sorted_scores, right=delta == 0), sets, alpha=width)
        return SegmentedEdges(
            delta=delta,
            scores=sorted_scores,
            edges=edges,
            band_constant=scaled if delta == 0 else 0.5 - scaled,
            sets=sets,
            spans=spans,
            query_gaps=torch.add(torch.searchsorted(edges, bounds), sets, alpha=width),
            positive_gaps=positive_gaps,
            matrix=matrix,
            gap_ends=running.view(3, -1),
        )

    @property
    def gaps_per_set(self) -> int:
        return self.edges.numel() + 1

    @property
    def num_gaps(self) -> int:
        return self.spans.starts.numel() * self.gaps_per_set

    def locate(self, values: Tensor, value_sets: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """The gap (int32) of every float64 value of the set in ``value_sets``."""
        below = torch.searchsorted(self.edges, values, right=self.unit_step, out_int32=True)
        return torch.add(below, value_sets, alpha=self.gaps_per_set, out=out)

    def _rows(self, gap_values: Tensor) -> Tensor:
        """(R, S, 2P + 1): the (R, num_gaps) values by set."""
        return gap_values.view(len(gap_values), self.spans.starts.numel(), -1)

    def sum_from_gap_totals(self, totals: Tensor) -> Tensor:
        """As ``DenseEdges.sum_from_gap_totals``, over the gaps of every positive's set."""
        cumulative = torch.cumsum(self._rows(totals), 2)
        at_queries = torch.index_select(cumulative.view(2, -1), 1, self.query_gaps.view(-1)).view(2, 2, -1)
        above = torch.index_select(cumulative[0, :, -1], 0, self.sets) - at_queries[0, 1]
        if self.unit_step:
            return above
        band = at_queries[:, 1] - at_queries[:, 0]
        return torch.addcmul(above, band[0], self.band_constant).add_(band[1], alpha=0.5 / self.delta)

    def positive_sums(self, weights: Optional[Tensor] = None) -> Tensor:
        """``sum_k w_k H(q_k - q_i)`` over the positives ``k`` of the set of every positive ``i`` (``k = i``
        included; ``None``: all 1): by the sets' matrix, or with the positives as sources in the gaps of their set."""
        if self.positive_gaps is None:
            assert self.matrix is not None
            return self.matrix.sums(weights)
        weight = torch.ones_like(self.scores) if weights is None else weights
        totals = self.scores.new_zeros(2, self.num_gaps)
        totals[0].index_add_(0, self.positive_gaps, weight)
        if not self.unit_step:
            totals[1].index_add_(0, self.positive_gaps, weight * self.scores)
        return self.sum_from_gap_totals(totals)

    def coefficients(self, weights: Tensor) -> Tensor:
        """As ``DenseEdges.coefficients``, the prefix sums taken from the first position of every gap's set."""
        columns = weights[None] if self.unit_step else torch.stack([weights, weights * self.scores])
        prefix = F.pad(torch.cumsum(columns, 1), (1, 0))
        at_ends = torch.index_select(prefix, 1, self.gap_ends.view(-1))  # [column, (band, above, set start) x gap]
        return torch.mm(set_mixing(self.delta, prefix.device), at_ends.view(3 * len(columns), -1))

    def sorting_relations(self, targets: Tensor) -> Union[SetSortingRelations, SortingRelations]:
        """Every set's relations among its positives by target and by score, for the (P,) float64 targets."""
        if self.matrix is None:
            return segmented_sorting_relations(self.scores, targets, self.sets, self.spans, self.delta)
        return SetSortingRelations(self.matrix, targets)
