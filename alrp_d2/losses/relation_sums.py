"""Ranking statistics of positives against positives and negatives, in O((P + N) log P).

Notation of the paper (Sec. 2.1, App. E): for a positive ``i`` and any example ``j``,
``x_ij = s_j - s_i`` and the smoothed step of App. E, Eq. (14),

    H(x) = 0 for x < -delta,  x / (2 delta) + 0.5 for |x| <= delta,  1 for x > delta.

Every quantity the error-driven losses need is a *relation sum* between the sorted positive
scores ``q_i`` and weighted sources ``v_j`` (the negatives, or the positives themselves):
``sum_j u_j H(v_j - q_i)`` for every positive, or ``sum_i w_i H(v_j - q_i)`` for every source.
A source is fully above the positives with ``q_i + delta < v`` and inside the linear band of
those with ``|v - q_i| <= delta``. Both sets are prefixes of the sorted positives, determined by
where ``v`` falls among the 2P sorted *band edges* ``q_i - delta`` and ``q_i + delta``: one binary
search per source. Sources in the same gap between edges share their prefixes, so
``sum_j u_j H(v_j - q_i)`` needs only each gap's count and sum of ``u`` and ``u v`` (bucket
counts), and ``sum_i w_i H(v_j - q_i) = A[gap] + B[gap] v_j`` with two per-gap coefficients
(prefix sums). No P x N matrix, no loop over positives; everything is accumulated in float64.
H is continuous, so a source that rounding places on the other side of an edge contributes the
same. ``delta = 0`` is the unit step ``H(x) = 1`` for ``x >= 0`` (``H(0) = 1``): the two edges of a
positive coincide, a source equal to a positive's score lies above it, and there is no band.

The negatives stay in the logits' dtype: they are placed among the band edges rounded down to that
dtype, which compares exactly as float64 would, and are turned into float64 in chunks of
:data:`CHUNK` examples, so that no float64 copy of all of them exists.

The per-gap counts and sums are additive over disjoint sets of sources: a global ranking over
several workers (:mod:`alrp_d2.losses.global_ranking`) builds the same edges from the gathered
positives on every worker and sums the workers' per-gap totals of their negatives (O(P) floats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Tuple

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .global_ranking import PositiveExchange

__all__ = ["CHUNK", "BandEdges", "PositiveRanking", "Sources"]

#: Sources turned into float64 at once (2 MB of float64 per chunk, so that the copies stay small).
CHUNK = 1 << 18


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """``out[k] = sum(x[:k])``, of length ``len(x) + 1``."""
    return torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])


@dataclass(frozen=True)
class Sources:
    """Examples related to the sorted positives: their ``values`` in any float dtype, minus
    ``offset`` (float64, 0-d; None: already on the positives' scale), and the gap of each.

    The shifted float64 values are produced in chunks of :data:`CHUNK`."""

    values: Tensor
    gap: Tensor
    offset: Optional[Tensor] = None

    def __len__(self) -> int:
        return self.values.numel()

    def chunks(self) -> Iterator[Tuple[int, int, Tensor, Tensor]]:
        """``(start, end, shifted float64 values, gaps)`` of every chunk; the values are a copy."""
        for start in range(0, len(self), CHUNK):
            end = min(start + CHUNK, len(self))
            shifted = self.values[start:end].to(torch.float64, copy=True)
            if self.offset is not None:
                shifted = shifted.sub_(self.offset)
            yield start, end, shifted, self.gap[start:end]


@dataclass(frozen=True)
class BandEdges:
    """The 2P sorted band edges ``q_i -/+ delta`` of the sorted positive scores ``q``.

    A source in gap ``g`` (``g`` edges below it) lies fully above the positives
    ``[0, above_end[g])`` and inside the band of the positives ``[above_end[g], band_end[g])``.
    With ``delta = 0`` (the unit step) a source's gap counts the edges at or below it.
    """

    delta: float
    edges: Tensor
    above_end: Tensor
    band_end: Tensor

    @staticmethod
    def of(sorted_scores: Tensor, delta: float) -> BandEdges:
        upper = sorted_scores + delta
        edges, order = torch.sort(torch.cat([upper, sorted_scores - delta]))
        is_upper = order < len(upper)
        return BandEdges(delta, edges, _exclusive_cumsum(is_upper.long()), _exclusive_cumsum((~is_upper).long()))

    @property
    def num_gaps(self) -> int:
        return self.edges.numel() + 1

    @property
    def self_relation(self) -> float:
        """H(0): 0.5 for the smoothed step, 1 for the unit step (``delta = 0``)."""
        return 1.0 if self.delta == 0 else 0.5

    def locate(self, values: Tensor, offset: Optional[Tensor] = None) -> Tensor:
        """The gap of every value (int32): the number of edges below it (at or below it for the
        unit step, whose H(0) = 1), for values on the positives' scale (``offset`` None) or in
        their own dtype and shifted by ``offset``: the edges plus the offset are rounded to that
        dtype (down, or up for the unit step), so that the comparisons hold exactly when they hold
        in float64."""
        edges = self.edges
        unit_step = self.delta == 0
        if offset is not None:
            raw = edges + offset
            edges = raw.to(values.dtype)
            if unit_step:
                edges = torch.where(edges.double() < raw, torch.nextafter(edges, edges.new_tensor(torch.inf)), edges)
            else:
                edges = torch.where(edges.double() > raw, torch.nextafter(edges, edges.new_tensor(-torch.inf)), edges)
        return torch.bucketize(values, edges, out_int32=True, right=unit_step)

    def gap_totals(self, sources: Sources, weights: Optional[Tensor] = None) -> Tensor:
        """(2, num_gaps) float64: every gap's sum of the sources' weights ``u`` (``None``: all 1,
        a count) and of ``u * v``. Summable over disjoint sets of sources (the workers' negatives)."""
        totals = torch.zeros(2, self.num_gaps, dtype=torch.float64, device=self.edges.device)
        for start, end, values, gap in sources.chunks():
            weight = values.new_ones(end - start) if weights is None else weights[start:end]
            totals[0].index_add_(0, gap, weight)
            totals[1].index_add_(0, gap, values.mul_(weight))
        return totals

    def sum_from_gap_totals(self, queries: Tensor, totals: Tensor) -> Tensor:
        """``sum_j u_j H(v_j - q_i)`` for every sorted positive ``q_i`` from the sources'
        :meth:`gap_totals`: per-gap sums scattered to where the gaps' prefixes end."""
        gap_weight = totals[0]
        num = queries.numel()
        above = queries.new_zeros(num + 1).index_add_(0, self.above_end, gap_weight)
        # Sources above query i: gaps whose above-prefix ends after i (a suffix sum).
        above = torch.flip(torch.cumsum(torch.flip(above, [0]), 0), [0])[1:]
        if self.delta == 0:
            return above
        inv_two_delta = 0.5 / self.delta
        gap_constant = totals[1] * inv_two_delta + 0.5 * gap_weight
        band = queries.new_zeros(2, num + 1)
        for row, value in enumerate((gap_constant, gap_weight)):
            band[row].index_add_(0, self.above_end, value).index_add_(0, self.band_end, -value)
        band = torch.cumsum(band, 1)[:, :-1]
        return above + band[0] - band[1] * queries * inv_two_delta

    def sum_at_positives(self, queries: Tensor, sources: Sources, weights: Optional[Tensor] = None) -> Tensor:
        """``sum_j u_j H(v_j - q_i)`` for every sorted positive ``q_i``, from the sources and
        their weights ``u`` (``None``: all 1)."""
        return self.sum_from_gap_totals(queries, self.gap_totals(sources, weights))

    def sum_at_sources(
        self, queries: Tensor, weights: Tensor, sources: Sources, dtype: torch.dtype = torch.float64
    ) -> Tensor:
        """``sum_i w_i H(v_j - q_i)`` for every source ``v_j``: ``A[gap] + B[gap] v``, in ``dtype``."""
        prefix = _exclusive_cumsum(weights)
        intercept = above = prefix[self.above_end]
        slope: Optional[Tensor] = None  # the unit step has no band: H is 1 above, 0 below
        if self.delta != 0:
            inv_two_delta = 0.5 / self.delta
            prefix_weighted = _exclusive_cumsum(weights * queries)
            band_weight = prefix[self.band_end] - above
            band_weighted_query = prefix_weighted[self.band_end] - prefix_weighted[self.above_end]
            intercept = above + 0.5 * band_weight - band_weighted_query * inv_two_delta
            slope = band_weight * inv_two_delta
        result = torch.empty(len(sources), dtype=dtype, device=queries.device)
        for start, end, values, gap in sources.chunks():
            result[start:end] = intercept[gap] if slope is None else values.mul_(slope[gap]).add_(intercept[gap])
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
        negative_mask: (M,) the relevant negatives (score >= min positive - delta, App. E
            line 8; the others have H(x_ij) = 0 for every positive).
        positive_scores: (P,) the sorted scores.
        negatives: the relevant negatives' logits (in the order of the flattened logits, in
            the logits' dtype) with their offset and gaps.
        edges: the band edges of the positives; positive_gap: each positive's gap.
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
    negative_mask: Tensor
    positive_scores: Tensor
    negatives: Sources
    edges: BandEdges
    positive_gap: Tensor
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
        """Sorts the positives and relates them to the relevant negatives, with one host
        synchronisation (selecting the relevant negatives, whose number depends on the scores).

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
        scores = flat[positive_index].double()
        local_index = positive_index
        local_slot = gathered_values = None
        if exchange is not None:
            columns = [scores] if positive_values is None else [scores, positive_values.detach().double()]
            gathered = exchange.gather(torch.stack(columns, 1))
            scores = gathered[:, 0]
            gathered_values = None if positive_values is None else gathered[:, 1]
        positive_scores, order = torch.sort(scores)
        if exchange is None:
            positive_index = positive_index[order]
        else:
            slot = torch.empty_like(order).scatter_(0, order, torch.arange(len(order), device=order.device))
            local_slot = slot[exchange.local_start : exchange.local_start + exchange.num_local]
        offset = positive_scores[0]
        positive_scores = positive_scores - offset

        # Relevant negatives (line 8). Rounding the float64 threshold down to the logits'
        # dtype may admit a few extra negatives; they fall below every band edge and add nothing.
        threshold = (offset - delta).to(logits.dtype)
        threshold = torch.where(
            threshold.double() > offset - delta, torch.nextafter(threshold, threshold.new_tensor(-torch.inf)), threshold
        )
        relevant = logits >= threshold
        if valid is not None:
            relevant &= valid
        negative_mask = relevant.reshape(-1)
        negative_mask[local_index] = False
        negative_values = flat[negative_mask]

        edges = BandEdges.of(positive_scores, delta)
        positive_gap = edges.locate(positive_scores)
        negatives = Sources(negative_values, edges.locate(negative_values, offset), offset)
        # N_FP needs every worker's negatives: their per-gap totals are summed over the workers.
        negative_totals = edges.gap_totals(negatives)
        if exchange is not None:
            negative_totals = exchange.all_reduce_sum(negative_totals)
        num_false_positives = edges.sum_from_gap_totals(positive_scores, negative_totals)
        # rank^+ = 1 + sum_{k != i} H(x_ik): the sum over all k includes the self term H(0).
        rank_positive = (1.0 - edges.self_relation) + edges.sum_at_positives(
            positive_scores, Sources(positive_scores, positive_gap)
        )
        return PositiveRanking(
            positive_index=positive_index,
            positive_order=order,
            negative_mask=negative_mask,
            positive_scores=positive_scores,
            negatives=negatives,
            edges=edges,
            positive_gap=positive_gap,
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
            return values[self.positive_order]
        gathered = self.gathered_values
        if gathered is None:
            gathered = self.exchange.gather(values.detach().double().unsqueeze(1)).squeeze(1)
        return self.exchange.with_local(gathered, values)[self.positive_order]

    @property
    def num_positives(self) -> int:
        return self.positive_scores.numel()

    def positive_relation_sum(self, weights: Tensor) -> Tensor:
        """``sum_{k in P, k != i} w_k H(x_ik)`` for every sorted positive ``i`` (the self term
        H(0) is removed)."""
        scores = self.positive_scores
        total = self.edges.sum_at_positives(scores, Sources(scores, self.positive_gap), weights)
        return total - self.edges.self_relation * weights

    def negative_relation_sum(self, weights: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
        """``sum_{i in P} w_i H(x_ij)`` for every relevant negative ``j``, in ``dtype``.

        With ``w_i = (l(i) - l*(i)) / N_FP(i)`` this is the error the positives distribute
        over negative ``j`` through p(j|i) = H(x_ij) / N_FP(i) (Alg. 1 line 4).
        """
        return self.edges.sum_at_sources(self.positive_scores, weights, self.negatives, dtype)

    def step_cumsum(self, values: Tensor) -> Tensor:
        """``sum_{k in P, s_k >= s_i} v_k``: the cumulative sum of App. E line 14 in descending
        score order with the unit step H(x) = [x >= 0], so tied positives count together."""
        suffix = torch.flip(torch.cumsum(torch.flip(values, [0]), 0), [0])
        return suffix[self.tie_first]
