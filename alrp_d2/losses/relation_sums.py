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

The per-gap counts and sums are additive over disjoint sets of sources: a global ranking over
several workers (:mod:`alrp_d2.losses.global_ranking`) builds the same edges from the gathered
positives on every worker and sums the workers' per-gap totals of their negatives (O(P) floats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .global_ranking import PositiveExchange

__all__ = ["BandEdges", "PositiveRanking"]


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """``out[k] = sum(x[:k])``, of length ``len(x) + 1``."""
    return torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])


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

    def locate(self, values: Tensor) -> Tensor:
        """The gap of every value (int32)."""
        return torch.bucketize(values, self.edges, out_int32=True, right=self.delta == 0)

    def gap_totals(self, gap: Tensor, weights: Optional[Tensor], weighted_values: Tensor) -> Tensor:
        """(2, num_gaps) float64: every gap's sum of the sources' weights ``u`` (``None``: all 1,
        a count) and of ``u * v``. Summable over disjoint sets of sources (the workers' negatives)."""
        size = self.num_gaps
        if weights is None:
            gap_weight = torch.bincount(gap, minlength=size).to(weighted_values.dtype)
        else:
            gap_weight = weighted_values.new_zeros(size).index_add_(0, gap, weights)
        return torch.stack([gap_weight, weighted_values.new_zeros(size).index_add_(0, gap, weighted_values)])

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

    def sum_at_positives(
        self, queries: Tensor, gap: Tensor, weights: Optional[Tensor], weighted_values: Tensor
    ) -> Tensor:
        """``sum_j u_j H(v_j - q_i)`` for every sorted positive ``q_i``, from the sources' gaps,
        weights ``u`` (``None``: all 1) and ``u * v``."""
        return self.sum_from_gap_totals(queries, self.gap_totals(gap, weights, weighted_values))

    def sum_at_sources(self, queries: Tensor, weights: Tensor, gap: Tensor, values: Tensor) -> Tensor:
        """``sum_i w_i H(v_j - q_i)`` for every source ``v_j`` in ``gap``: ``A[gap] + B[gap] v``."""
        prefix = _exclusive_cumsum(weights)
        above = prefix[self.above_end]
        if self.delta == 0:
            return above[gap]
        inv_two_delta = 0.5 / self.delta
        prefix_weighted = _exclusive_cumsum(weights * queries)
        band_weight = prefix[self.band_end] - above
        band_weighted_query = prefix_weighted[self.band_end] - prefix_weighted[self.above_end]
        intercept = above + 0.5 * band_weight - band_weighted_query * inv_two_delta
        slope = band_weight * inv_two_delta
        return torch.addcmul(intercept[gap], slope[gap], values)


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
            each sorted positive when ``local_slot`` is None, else in the order of the
            flattened logits.
        positive_order: (P,) position of each sorted positive among the positives taken in
            the order of the flattened logits (to gather per-positive inputs such as E_loc);
            in a global ranking, in the concatenation of all workers' positives in worker order.
        negative_mask: (M,) the relevant negatives (score >= min positive - delta, App. E
            line 8; the others have H(x_ij) = 0 for every positive).
        positive_scores, negative_scores: (P,) sorted and (N,) relevant-negative scores, the
            latter in the order of the flattened logits.
        edges: the band edges of the positives; positive_gap, negative_gap: each score's gap.
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
    negative_scores: Tensor
    edges: BandEdges
    positive_gap: Tensor
    negative_gap: Tensor
    num_false_positives: Tensor
    rank: Tensor
    tie_first: Tensor
    exchange: Optional[PositiveExchange] = None
    local_slot: Optional[Tensor] = None
    gathered_values: Optional[Tensor] = None

    @staticmethod
    def build(
        logits: Tensor,
        positive_mask: Tensor,
        negative_mask: Tensor,
        delta: float,
        exchange: Optional[PositiveExchange] = None,
        positive_values: Optional[Tensor] = None,
    ) -> PositiveRanking:
        """Sorts the positives and relates them to the relevant negatives.

        Args:
            logits: (M,) finite scores of any float dtype; not differentiated.
            positive_mask, negative_mask: (M,) bool masks, at least one positive (of all
                workers, in a global ranking).
            delta: smoothness of H, >= 0 (0: the unit step with H(0) = 1).
            exchange: the communication of a global ranking (see
                :func:`alrp_d2.losses.global_ranking.exchange_positives`); None: this
                worker's examples only.
            positive_values: optional per-positive values of this worker (e.g. E_loc), in the
                order of the flattened logits, gathered with the scores in a global ranking
                (see :meth:`sorted_positive_values`).
        """
        logits = logits.detach()
        positive_index = torch.nonzero(positive_mask).squeeze(1)
        scores = logits[positive_index].double()
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
        negative_mask = negative_mask & (logits >= threshold)
        negative_scores = logits[negative_mask].double().sub_(offset)

        edges = BandEdges.of(positive_scores, delta)
        positive_gap = edges.locate(positive_scores)
        negative_gap = edges.locate(negative_scores)
        # N_FP needs every worker's negatives: their per-gap totals are summed over the workers.
        negative_totals = edges.gap_totals(negative_gap, None, negative_scores)
        if exchange is not None:
            negative_totals = exchange.all_reduce_sum(negative_totals)
        num_false_positives = edges.sum_from_gap_totals(positive_scores, negative_totals)
        # rank^+ = 1 + sum_{k != i} H(x_ik): the sum over all k includes the self term H(0).
        rank_positive = (1.0 - edges.self_relation) + edges.sum_at_positives(
            positive_scores, positive_gap, None, positive_scores
        )
        return PositiveRanking(
            positive_index=positive_index,
            positive_order=order,
            negative_mask=negative_mask,
            positive_scores=positive_scores,
            negative_scores=negative_scores,
            edges=edges,
            positive_gap=positive_gap,
            negative_gap=negative_gap,
            num_false_positives=num_false_positives,
            rank=rank_positive + num_false_positives,
            tie_first=torch.searchsorted(positive_scores, positive_scores),
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
        """Per-positive ``values`` of this worker (in the order of the flattened logits) for
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
        total = self.edges.sum_at_positives(scores, self.positive_gap, weights, weights * scores)
        return total - self.edges.self_relation * weights

    def negative_relation_sum(self, weights: Tensor) -> Tensor:
        """``sum_{i in P} w_i H(x_ij)`` for every relevant negative ``j``.

        With ``w_i = (l(i) - l*(i)) / N_FP(i)`` this is the error the positives distribute
        over negative ``j`` through p(j|i) = H(x_ij) / N_FP(i) (Alg. 1 line 4).
        """
        return self.edges.sum_at_sources(self.positive_scores, weights, self.negative_gap, self.negative_scores)

    def step_cumsum(self, values: Tensor) -> Tensor:
        """``sum_{k in P, s_k >= s_i} v_k``: the cumulative sum of App. E line 14 in descending
        score order with the unit step H(x) = [x >= 0], so tied positives count together."""
        suffix = torch.flip(torch.cumsum(torch.flip(values, [0]), 0), [0])
        return suffix[self.tie_first]
