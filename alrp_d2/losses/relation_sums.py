"""Ranking statistics of positives against positives and negatives, in O(N + P log P) on the ``scan`` path.

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
flat logits that are neither positive nor ignored; they find their gaps in chunks
(:mod:`alrp_d2.losses.negative_scan`), one pass in the forward (the gap totals) and one in the backward
(the gradient, written once).

This module holds the ``scan`` path's edges (:class:`BandEdges`: distinct edges, per-gap prefix ends,
scatter-adds over the gaps: the least work, in many small operations) and the ranking both paths share
(:class:`PositiveRanking`); the ``dense`` path of :mod:`alrp_d2.losses.ranking_path` builds
:class:`alrp_d2.losses.dense_relations.DenseEdges` instead (the same sums in a few large operations, P x P
blocks among the positives: O(N log P + P^2) work), chosen per call by the logits' device.

The gap totals are additive over disjoint sets of sources: a global ranking over several workers
(:mod:`alrp_d2.losses.global_ranking`) builds the same edges from the gathered positives on every
worker and sums the workers' gap totals of their negatives (O(P) floats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .dense_relations import DenseEdges, StepEdges
from .gap_lookup import GapLookup
from .negative_scan import DenseNegatives, ScanNegatives
from .ranking_path import ranking_path
from .serial_indexing import take_rows

if TYPE_CHECKING:
    from .global_ranking import PositiveExchange

__all__ = ["BandEdges", "Coefficients", "PositiveRanking"]

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


class SortedPositives(NamedTuple):
    """The positives of one ranking sorted by score (of all workers in a global ranking); attributes as those of
    :class:`PositiveRanking` (``flat_index`` is its ``positive_index``), ``scores`` shifted by ``offset`` (the
    smallest score, 0-d float64) where asked to, else as they are (``offset`` None)."""

    flat_index: Tensor
    order: Tensor
    scores: Tensor
    offset: Optional[Tensor]
    local_slot: Optional[Tensor]
    gathered_values: Optional[Tensor]

    @staticmethod
    def of(
        flat: Tensor,
        positive_index: Tensor,
        exchange: Optional[PositiveExchange],
        positive_values: Optional[Tensor],
        shift: bool,
    ) -> SortedPositives:
        """Gathers the scores (with the ``positive_values`` in a global ranking) and sorts them."""
        scores = take_rows(flat, positive_index).double()
        local_slot = gathered_values = None
        if exchange is not None:
            columns = [scores] if positive_values is None else [scores, positive_values.detach().double()]
            gathered = exchange.gather(torch.stack(columns, 1))
            scores = gathered[:, 0]
            gathered_values = None if positive_values is None else gathered[:, 1]
        sorted_scores, order = torch.sort(scores)
        if exchange is None:
            positive_index = take_rows(positive_index, order)
        else:
            slot = torch.empty_like(order).scatter_(0, order, torch.arange(len(order), device=order.device))
            local_slot = slot[exchange.local_start : exchange.local_start + exchange.num_local]
        if not shift:
            return SortedPositives(positive_index, order, sorted_scores, None, local_slot, gathered_values)
        offset = sorted_scores[0]
        return SortedPositives(positive_index, order, sorted_scores - offset, offset, local_slot, gathered_values)

    def relate(
        self, flat: Tensor, valid: Optional[Tensor], delta: float
    ) -> Tuple[Union[BandEdges, DenseEdges], Union[ScanNegatives, DenseNegatives], Tensor]:
        """The band edges, the negatives of the (M,) flat logits and their (2, num_gaps) gap totals: on the
        ``dense`` path when the scores are not shifted, else on the ``scan`` path."""
        if self.offset is None:
            edges = DenseEdges.of(self.scores, delta)
            local_scores = self.scores if self.local_slot is None else take_rows(self.scores, self.local_slot)
            return (edges, *DenseNegatives.scan(flat, valid, self.flat_index, local_scores, edges))
        band_edges = BandEdges.of(self.scores, delta)
        return (band_edges, *ScanNegatives.scan(flat, valid, self.flat_index, self.offset, band_edges))


@dataclass(frozen=True)
class PositiveRanking:
    """The positives of one ranking sorted by ascending score, related to each other and to
    the relevant negatives (App. E Alg. 2, lines 2-10 and 18-25).

    Scores are float64; on the ``scan`` path they are shifted by the smallest positive score, which
    leaves every ``x_ij`` unchanged and keeps the prefix sums small (the grid's edges are rounded to the
    logits' dtype after the shift is undone); the ``dense`` path compares the float64 logits as they are.

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
        edges: the band edges of the positives (:class:`BandEdges` on the ``scan`` path,
            :class:`~alrp_d2.losses.dense_relations.DenseEdges` on the ``dense`` one).
        negative_totals: (2, num_gaps) the gap totals of the negatives (of all workers in a global
            ranking): their count and sum of shifted scores per gap.
        num_false_positives: (P,) N_FP(i) = sum_{j in N} H(x_ij) (App. E line 24).
        rank: (P,) rank(i) = rank^+(i) + N_FP(i) (line 25), with
            rank^+(i) = 1 + sum_{k in P, k != i} H(x_ik) (line 23).
        exchange: the communication of a global ranking; None for a per-worker ranking.
        local_slot: in a global ranking, the sorted position of each of this worker's positives
            (in the order of ``positive_index``); None otherwise.
        gathered_values: in a global ranking, the ``positive_values`` given to :meth:`build`
            of all workers' positives (float64, detached, in worker order); None otherwise.
    """

    positive_index: Tensor
    positive_order: Tensor
    positive_scores: Tensor
    negatives: Union[ScanNegatives, DenseNegatives]
    edges: Union[BandEdges, DenseEdges]
    negative_totals: Tensor
    num_false_positives: Tensor
    rank: Tensor
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
        host synchronisation on the ``scan`` path (the search steps of the negatives' gap lookup, which depend
        on the scores) and none on the ``dense`` one (:mod:`alrp_d2.losses.ranking_path`).

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
        dense = ranking_path(flat.device) == "dense"
        positives = SortedPositives.of(flat, positive_index, exchange, positive_values, shift=not dense)
        scores = positives.scores
        if valid is not None:
            valid = valid.expand(logits.shape).reshape(-1)
        edges, negatives, negative_totals = positives.relate(flat, valid, delta)
        # N_FP needs every worker's negatives: their gap totals are summed over the workers.
        if exchange is not None:
            negative_totals = exchange.all_reduce_sum(negative_totals)
        num_false_positives = edges.sum_from_gap_totals(negative_totals)
        # rank^+ = 1 + sum_{k != i} H(x_ik): the sum over all k includes the self term H(0).
        rank_positive = (1.0 - edges.self_relation) + edges.positive_sums()
        return PositiveRanking(
            positive_index=positives.flat_index,
            positive_order=positives.order,
            positive_scores=scores,
            negatives=negatives,
            edges=edges,
            negative_totals=negative_totals,
            num_false_positives=num_false_positives,
            rank=rank_positive + num_false_positives,
            exchange=exchange,
            local_slot=positives.local_slot,
            gathered_values=positives.gathered_values,
        )

    @property
    def dense(self) -> bool:
        """Whether the ranking takes the ``dense`` path (:mod:`alrp_d2.losses.ranking_path`)."""
        return isinstance(self.edges, DenseEdges)

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
        return torch.add(self.edges.positive_sums(weights), weights, alpha=-self.edges.self_relation)

    def negative_coefficients(self, weights: Tensor) -> Coefficients:
        """The coefficients of ``sum_{i in P} w_i H(x_ij)`` per gap (:data:`Coefficients`), for
        :meth:`negative_relation_sum` and :meth:`negative_relation_total`.

        With ``w_i = (l(i) - l*(i)) / N_FP(i)`` this is the error the positives distribute
        over negative ``j`` through p(j|i) = H(x_ij) / N_FP(i) (Alg. 1 line 4).
        """
        return self.edges.coefficients(weights)

    def negative_relation_sum(self, coefficients: Coefficients, dtype: torch.dtype = torch.float64) -> Tensor:
        """(M,) ``sum_{i in P} w_i H(x_ij)`` for every negative ``j`` of the flat logits from the
        :meth:`negative_coefficients` of ``w``, 0 for the positives and the ignored entries, in ``dtype`` (one
        pass over the logits)."""
        return self.negatives.relation_sums(coefficients, dtype)

    def negative_relation_total(self, coefficients: Coefficients) -> Tensor:
        """0-d float64: ``sum_j sum_{i in P} w_i H(x_ij)`` over the negatives (of all workers in a global
        ranking) from the :meth:`negative_coefficients` of ``w`` and the gap totals (no pass over the logits):
        ``sum_g A[g] count[g] + B[g] (sum of v in g)``."""
        return torch.dot(coefficients.reshape(-1), self.negative_totals[: len(coefficients)].reshape(-1))

    def at_or_below_sums(self, values: Tensor) -> Tensor:
        """``sum_{k in P, s_k <= s_i} v_k`` for every sorted positive ``i``: tied positives count together (the
        unit step H(x) = [x >= 0] of App. E line 14)."""
        scores = self.positive_scores
        prefix = F.pad(torch.cumsum(values, 0), (1, 0))
        return take_rows(prefix, torch.searchsorted(scores, scores, right=True))
