"""Ranking statistics of positives against positives and negatives, in O(N + P log P).

Notation of the paper (Sec. 2.1, App. E): for a positive ``i`` and any example ``j``,
``x_ij = s_j - s_i`` and the smoothed step of App. E, Eq. (14),

    H(x) = 0 for x < -delta,  x / (2 delta) + 0.5 for |x| <= delta,  1 for x > delta.

Every quantity the error-driven losses need is a *relation sum* between the sorted positive
scores ``q_i`` and weighted sources ``v_j`` (the negatives, or the positives themselves):
``sum_j u_j H(v_j - q_i)`` for every positive, or ``sum_i w_i H(v_j - q_i)`` for every source.
A source is fully above the positives with ``q_i + delta < v`` and inside the linear band of
those with ``|v - q_i| <= delta``. Both sets are prefixes of the sorted positives, determined by
where ``v`` falls among the distinct sorted *band edges* ``q_i - delta`` and ``q_i + delta`` (its
*gap*). Sources in the same gap share their prefixes, so ``sum_j u_j H(v_j - q_i)`` needs only each
gap's count and sum of ``u`` and ``u v`` (gap totals), and ``sum_i w_i H(v_j - q_i) = A[gap] +
B[gap] v_j`` with two per-gap coefficients (prefix sums). No P x N matrix, no loop over positives;
everything is accumulated in float64. H is continuous, so a source equal to an edge contributes
the same in either neighbouring gap. ``delta = 0`` is the unit step ``H(x) = 1`` for ``x >= 0``
(``H(0) = 1``): the two edges of a positive coincide, a source equal to a positive's score lies
above it, and there is no band.

The positives find their gaps by binary search (O(P log P)). The negatives are the entries of the
flat logits that are neither positive nor ignored; they stay in the logits' dtype and find their
gaps by the grid of :mod:`alrp_d2.losses.gap_lookup` in O(1) each, exactly. They are read in
chunks of :data:`CHUNK` entries, each chunk once per pass with small reused buffers, so that no
N-sized temporary exists: one pass in the forward (the gap totals), one in the backward (the
gradient, written once). An entry below every edge or ignored lies in gap 0, which relates to no
positive; the pass takes the positives for negatives, and their gaps and share of the gap totals are
removed after it in O(P), so that no chunk looks at the positives.

The gap totals are additive over disjoint sets of sources: a global ranking over several workers
(:mod:`alrp_d2.losses.global_ranking`) builds the same edges from the gathered positives on every
worker and sums the workers' gap totals of their negatives (O(P) floats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Tuple

import torch
from torch import Tensor

from .gap_lookup import GapLookup
from .serial_indexing import take_rows

if TYPE_CHECKING:
    from .global_ranking import PositiveExchange

__all__ = ["ACCELERATOR_CHUNKS", "CHUNK", "BandEdges", "Negatives", "PositiveRanking"]

#: Entries of the logits read at once on the CPU: PyTorch runs an operation on one thread below 2^15
#: elements, so that each chunk's operations wait for no other thread, on buffers that stay in the core's
#: cache (about 1.3 MB). Other devices take chunks :data:`ACCELERATOR_CHUNKS` times larger (fewer launches).
CHUNK = 1 << 15
ACCELERATOR_CHUNKS = 32


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """``out[k] = sum(x[:k])``, of length ``len(x) + 1``."""
    return torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])


@dataclass(frozen=True)
class BandEdges:
    """The distinct sorted band edges ``q_i -/+ delta`` of the sorted positive scores ``q``.

    A source in gap ``g`` (``g`` distinct edges below it; at or below it for the unit step) lies fully
    above the positives ``[0, above_end[g])`` and inside the band of the positives
    ``[above_end[g], band_end[g])``.

    Attributes:
        delta: smoothness of H (0: the unit step).
        edges: (2P,) float64, the distinct edges ascending, then ``+inf``.
        above_end, band_end: (2P + 1,) int64, per gap.
    """

    delta: float
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
        return BandEdges(delta, edges, above_end, band_end)

    @property
    def num_gaps(self) -> int:
        return self.edges.numel() + 1

    @property
    def unit_step(self) -> bool:
        return self.delta == 0

    @property
    def self_relation(self) -> float:
        """H(0): 0.5 for the smoothed step, 1 for the unit step (``delta = 0``)."""
        return 1.0 if self.unit_step else 0.5

    def locate(self, values: Tensor) -> Tensor:
        """The gap of every float64 value on the positives' scale (binary search)."""
        return torch.searchsorted(self.edges, values, right=self.unit_step)

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

    def sum_from_gap_totals(self, queries: Tensor, totals: Tensor) -> Tensor:
        """``sum_j u_j H(v_j - q_i)`` for every sorted positive ``q_i`` from the sources'
        gap totals: per-gap sums scattered to where the gaps' prefixes end."""
        gap_weight = totals[0]
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

    def sum_at_positives(
        self, queries: Tensor, values: Tensor, gaps: Tensor, weights: Optional[Tensor] = None
    ) -> Tensor:
        """``sum_j u_j H(v_j - q_i)`` for every sorted positive ``q_i``, from the float64 sources, their
        gaps and their weights ``u`` (``None``: all 1)."""
        return self.sum_from_gap_totals(queries, self.gap_totals(values, gaps, weights))

    def coefficients(self, queries: Tensor, weights: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """``(A, B)`` per gap with ``sum_i w_i H(v - q_i) = A[gap] + B[gap] v`` for a source ``v`` on the
        positives' scale; ``B`` is None for the unit step (H is 1 above, 0 below, no band)."""
        prefix = _exclusive_cumsum(weights)
        above = take_rows(prefix, self.above_end)
        if self.unit_step:
            return above, None
        inv_two_delta = 0.5 / self.delta
        prefix_weighted = _exclusive_cumsum(weights * queries)
        band_weight = take_rows(prefix, self.band_end) - above
        band_weighted_query = take_rows(prefix_weighted, self.band_end) - take_rows(prefix_weighted, self.above_end)
        return above + 0.5 * band_weight - band_weighted_query * inv_two_delta, band_weight * inv_two_delta


def _chunk_size(total: int, device: torch.device) -> int:
    return min(total, CHUNK if device.type == "cpu" else CHUNK * ACCELERATOR_CHUNKS)


def _chunks(total: int, size: int) -> Iterator[Tuple[int, int]]:
    for start in range(0, total, size):
        yield start, min(start + size, total)


def _ranked_values(logits: Tensor, valid: Optional[Tensor], below_every_edge: Tensor, buffer: Tensor) -> Tensor:
    """The ``logits`` as the gap lookup compares them: in ``buffer``'s dtype, the ignored entries (``valid``
    False) ``below_every_edge`` (0-d, -inf); the logits themselves where nothing changes, else written to
    ``buffer``."""
    if logits.dtype != buffer.dtype:
        logits = buffer.copy_(logits)
    if valid is None:
        return logits
    return torch.where(valid, logits, below_every_edge, out=buffer)


@dataclass(frozen=True)
class Negatives:
    """The entries of the flat logits that are neither positive nor ignored, with their gaps among the
    positives' band edges (module docstring).

    Attributes:
        logits: (M,) the flat logits (detached, their dtype).
        offset: 0-d float64, subtracted from the logits to put them on the positives' scale.
        gaps: (M,) int16 (int32 from 2^15 gaps on) the gap of every entry, 0 for the positives and the
            ignored entries.
    """

    logits: Tensor
    offset: Tensor
    gaps: Tensor

    @staticmethod
    def scan(
        logits: Tensor, valid: Optional[Tensor], positive_index: Tensor, offset: Tensor, edges: BandEdges
    ) -> Tuple[Negatives, Tensor]:
        """Finds the gaps of the (M,) flat ``logits`` and the negatives' gap totals ((2, num_gaps) float64:
        every gap's count and sum of shifted logits) in one pass; ``valid``: None or (M,) bool, False for
        the ignored entries; ``positive_index``: the flat indices of the positives.

        The pass treats the positives as negatives; their gaps and their share of the totals are removed after
        it, in O(P), so that no chunk looks at the positives."""
        lookup = edges.lookup(offset, logits.dtype)
        device, total = logits.device, logits.numel()
        size = _chunk_size(total, device)
        compute = lookup.edges.dtype
        values, scratch, position = torch.empty(3, size, dtype=compute, device=device)
        cell = torch.empty(size, dtype=torch.int32, device=device)
        index = torch.empty(size, dtype=torch.long, device=device)
        ones, shifted = torch.ones(2, size, dtype=torch.float64, device=device)
        gaps = torch.empty(total, dtype=torch.int16 if edges.num_gaps < 1 << 15 else torch.int32, device=device)
        totals = torch.zeros(2, edges.num_gaps, dtype=torch.float64, device=device)
        below_every_edge = torch.full((), -torch.inf, dtype=compute, device=device)
        for start, end in _chunks(total, size):
            n = end - start
            chunk_valid = None if valid is None else valid[start:end]
            chunk = _ranked_values(logits[start:end], chunk_valid, below_every_edge, values[:n])
            chunk_gaps = lookup.gaps(chunk, position[:n], scratch[:n], cell[:n])
            gaps[start:end] = chunk_gaps
            chunk_index = index[:n].copy_(chunk_gaps)
            totals[0].scatter_add_(0, chunk_index, ones[:n])
            totals[1].scatter_add_(0, chunk_index, shifted[:n].copy_(chunk).sub_(offset))
        positive_values = _ranked_values(
            take_rows(logits, positive_index),
            None if valid is None else take_rows(valid, positive_index),
            below_every_edge,
            torch.empty(positive_index.numel(), dtype=compute, device=device),
        )
        positive_gaps = lookup.gaps(
            positive_values,
            torch.empty_like(positive_values),
            torch.empty_like(positive_values),
            torch.empty(positive_index.numel(), dtype=torch.int32, device=device),
        ).long()
        totals -= edges.gap_totals(positive_values.double() - offset, positive_gaps)
        gaps.index_fill_(0, positive_index, 0)
        totals[:, 0] = 0.0  # gap 0 (below every edge, -inf included) relates to no positive
        return Negatives(logits, offset, gaps), totals

    def relation_sums(self, intercept: Tensor, slope: Optional[Tensor], dtype: torch.dtype) -> Tensor:
        """(M,) in ``dtype``: ``intercept[gap] + slope[gap] (v - offset)`` of every negative ``v`` (the
        coefficients of :meth:`BandEdges.coefficients`, 0 in gap 0), 0 for the other entries (one pass)."""
        if slope is not None:
            intercept = intercept - slope * self.offset  # A + B (v - offset) = (A - B offset) + B v
        total = self.logits.numel()
        size = _chunk_size(total, self.logits.device)
        index = torch.empty(size, dtype=torch.int32, device=self.logits.device)
        sums, coefficient = torch.empty(2, size, dtype=torch.float64, device=self.logits.device)
        result = torch.empty(total, dtype=dtype, device=self.logits.device)
        for start, end in _chunks(total, size):
            n = end - start
            chunk_index = index[:n].copy_(self.gaps[start:end])
            torch.index_select(intercept, 0, chunk_index, out=sums[:n])
            if slope is not None:
                torch.index_select(slope, 0, chunk_index, out=coefficient[:n])
                sums[:n].addcmul_(coefficient[:n], self.logits[start:end])
            result[start:end] = sums[:n]
        return result


@dataclass(frozen=True)
class PositiveRanking:
    """The positives of one ranking sorted by ascending score, related to each other and to
    the relevant negatives (App. E Alg. 2, lines 2-10 and 18-25).

    Scores are float64 and shifted by the smallest positive score, which leaves every
    ``x_ij`` unchanged and keeps the prefix sums small.

    In a global ranking (``exchange`` given, see :mod:`alrp_d2.losses.global_ranking`) the
    positives are those of all workers, while the negatives stay this worker's: every
    per-positive attribute is the same on every worker, the per-negative ones are local.

    Attributes:
        positive_index: index into the flattened logits of each positive of this worker: of
            each sorted positive when ``local_slot`` is None, else in the order given to
            :meth:`build`.
        positive_order: (P,) position of each sorted positive among the positives in the
            order given to :meth:`build` (to gather per-positive inputs such as E_loc); in a
            global ranking, in the concatenation of all workers' positives in worker order.
        positive_scores: (P,) the sorted scores.
        negatives: this worker's negatives: every entry of the logits that is neither positive
            nor ignored (those below every band edge, App. E line 8, lie in gap 0 and add nothing).
        edges: the band edges of the positives; positive_gap: each positive's gap.
        negative_totals: (2, num_gaps) the gap totals of the negatives (of all workers in a global
            ranking): their count and sum of shifted scores per gap.
        num_false_positives: (P,) N_FP(i) = sum_{j in N} H(x_ij) (App. E line 24).
        rank: (P,) rank(i) = rank^+(i) + N_FP(i) (line 25), with
            rank^+(i) = 1 + sum_{k in P, k != i} H(x_ik) (line 23).
        tie_first: (P,) first sorted position holding the same score.
        exchange: the communication of a global ranking; None for a per-worker ranking.
        local_slot: in a global ranking, the sorted position of each of this worker's positives
            (in the order of ``positive_index``); None otherwise.
        gathered_values: in a global ranking, the ``positive_values`` given to :meth:`build`
            of all workers' positives (float64, detached, in worker order); None otherwise.
    """

    positive_index: Tensor
    positive_order: Tensor
    positive_scores: Tensor
    negatives: Negatives
    edges: BandEdges
    positive_gap: Tensor
    negative_totals: Tensor
    num_false_positives: Tensor
    rank: Tensor
    tie_first: Tensor
    exchange: Optional[PositiveExchange] = None
    local_slot: Optional[Tensor] = None
    gathered_values: Optional[Tensor] = None

    @staticmethod
    def build(
        logits: Tensor,
        positive_index: Tensor,
        valid: Optional[Tensor],
        delta: float,
        exchange: Optional[PositiveExchange] = None,
        positive_values: Optional[Tensor] = None,
    ) -> PositiveRanking:
        """Sorts the positives and relates them to the negatives (one pass over the logits), with one
        host synchronisation (the search steps of the negatives' gap lookup, which depend on the scores).

        Args:
            logits: finite scores of any shape and float dtype (M entries); not differentiated.
            positive_index: (P,) distinct indices of the positives into the flattened logits,
                at least one positive (of all workers, in a global ranking).
            valid: None (every example is ranked) or a bool tensor broadcastable to
                ``logits.shape``, False for the ignored examples; positives rank whatever
                their entry.
            delta: smoothness of H, >= 0 (0: the unit step with H(0) = 1).
            exchange: the communication of a global ranking (see
                :class:`alrp_d2.losses.ranking_inputs.RankingInputs`); None: this worker's
                examples only.
            positive_values: optional per-positive values of this worker (e.g. E_loc), in the
                order of ``positive_index``, gathered with the scores in a global ranking
                (see :meth:`sorted_positive_values`).
        """
        logits = logits.detach()
        flat = logits.reshape(-1)
        scores = take_rows(flat, positive_index).double()
        local_index = positive_index
        local_slot = gathered_values = None
        if exchange is not None:
            columns = [scores] if positive_values is None else [scores, positive_values.detach().double()]
            gathered = exchange.gather(torch.stack(columns, 1))
            scores = gathered[:, 0]
            gathered_values = None if positive_values is None else gathered[:, 1]
        positive_scores, order = torch.sort(scores)
        if exchange is None:
            positive_index = take_rows(positive_index, order)
        else:
            slot = torch.empty_like(order).scatter_(0, order, torch.arange(len(order), device=order.device))
            local_slot = slot[exchange.local_start : exchange.local_start + exchange.num_local]
        offset = positive_scores[0]
        positive_scores = positive_scores - offset

        edges = BandEdges.of(positive_scores, delta)
        positive_gap = edges.locate(positive_scores)
        if valid is not None:
            valid = valid.expand(logits.shape).reshape(-1)
        negatives, negative_totals = Negatives.scan(flat, valid, local_index, offset, edges)
        # N_FP needs every worker's negatives: their gap totals are summed over the workers.
        if exchange is not None:
            negative_totals = exchange.all_reduce_sum(negative_totals)
        num_false_positives = edges.sum_from_gap_totals(positive_scores, negative_totals)
        # rank^+ = 1 + sum_{k != i} H(x_ik): the sum over all k includes the self term H(0).
        rank_positive = (1.0 - edges.self_relation) + edges.sum_at_positives(
            positive_scores, positive_scores, positive_gap
        )
        return PositiveRanking(
            positive_index=positive_index,
            positive_order=order,
            positive_scores=positive_scores,
            negatives=negatives,
            edges=edges,
            positive_gap=positive_gap,
            negative_totals=negative_totals,
            num_false_positives=num_false_positives,
            rank=rank_positive + num_false_positives,
            # Clamped: a NaN score (whose loss is reported as NaN) must not index out of range.
            tie_first=torch.searchsorted(positive_scores, positive_scores).clamp_(max=len(positive_scores) - 1),
            exchange=exchange,
            local_slot=local_slot,
            gathered_values=gathered_values,
        )

    @property
    def gradient_scale(self) -> float:
        """The factor on this worker's logit and E_loc gradients: the world size of a global
        ranking (DDP averages gradients over the workers), 1 otherwise."""
        return 1.0 if self.exchange is None else float(self.exchange.world_size)

    def sorted_positive_values(self, values: Tensor) -> Tensor:
        """Per-positive ``values`` of this worker (in the order given to :meth:`build`) for
        every sorted positive of the ranking, differentiable with respect to ``values``. In a
        global ranking, the other workers' values are those gathered by :meth:`build`
        (float64), and the gradient of ``values`` is multiplied by :attr:`gradient_scale`."""
        if self.exchange is None:
            return take_rows(values, self.positive_order)
        gathered = self.gathered_values
        if gathered is None:
            gathered = self.exchange.gather(values.detach().double().unsqueeze(1)).squeeze(1)
        return take_rows(self.exchange.with_local(gathered, values), self.positive_order)

    @property
    def num_positives(self) -> int:
        return self.positive_scores.numel()

    def positive_relation_sum(self, weights: Tensor) -> Tensor:
        """``sum_{k in P, k != i} w_k H(x_ik)`` for every sorted positive ``i`` (the self term
        H(0) is removed)."""
        scores = self.positive_scores
        total = self.edges.sum_at_positives(scores, scores, self.positive_gap, weights)
        return total - self.edges.self_relation * weights

    def negative_relation_sum(self, weights: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
        """(M,) ``sum_{i in P} w_i H(x_ij)`` for every negative ``j`` of the flat logits, 0 for the
        positives and the ignored entries, in ``dtype`` (one pass over the logits).

        With ``w_i = (l(i) - l*(i)) / N_FP(i)`` this is the error the positives distribute
        over negative ``j`` through p(j|i) = H(x_ij) / N_FP(i) (Alg. 1 line 4).
        """
        return self.negatives.relation_sums(*self.edges.coefficients(self.positive_scores, weights), dtype)

    def negative_relation_total(self, weights: Tensor) -> Tensor:
        """0-d float64: ``sum_j sum_{i in P} w_i H(x_ij)`` over the negatives (of all workers in a global
        ranking), from their gap totals (no pass over the logits)."""
        intercept, slope = self.edges.coefficients(self.positive_scores, weights)
        totals = self.negative_totals
        return (intercept * totals[0]).sum() + (0.0 if slope is None else (slope * totals[1]).sum())

    def step_cumsum(self, values: Tensor) -> Tensor:
        """``sum_{k in P, s_k >= s_i} v_k``: the cumulative sum of App. E line 14 in descending
        score order with the unit step H(x) = [x >= 0], so tied positives count together."""
        suffix = torch.flip(torch.cumsum(torch.flip(values, [0]), 0), [0])
        return take_rows(suffix, self.tie_first)
