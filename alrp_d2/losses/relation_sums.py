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

This module holds the ranking both paths share (:class:`PositiveRanking`); the path it takes
(:class:`alrp_d2.losses.ranking_path.RankingPath`, chosen by the losses' ``path`` argument) builds the edges: the
``scan`` path's :class:`alrp_d2.losses.band_edges.BandEdges` (distinct edges, per-gap prefix ends, scatter-adds over
the gaps: the least work, in many small operations) or the ``dense`` path's
:class:`alrp_d2.losses.dense_relations.DenseEdges` (the same sums in a few large operations, P x P blocks among the
positives: O(N log P + P^2) work).

The gap totals are additive over disjoint sets of sources: a global ranking over several workers
(:mod:`alrp_d2.losses.global_ranking`) builds the same edges from the gathered positives on every
worker and sums the workers' gap totals of their negatives (O(P) floats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from .ranking_path import RankingEdges, RankingNegatives, RankingPath, RankingRequest
from .ranking_reduction import Reduction
from .serial_indexing import take_rows

if TYPE_CHECKING:
    from .global_ranking import PositiveExchange

__all__ = ["PositiveRanking"]


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
        positive_scores: (P,) the sorted scores (shifted on the ``scan`` path).
        path: the implementation that related the positives to each other and to the negatives.
        reduction: how the losses reduce over the positives (one ranking, or each of several sets).
        negatives: this worker's negatives: every entry of the logits that is neither positive
            nor ignored (those below every band edge, App. E line 8, lie in gap 0 and add nothing).
        edges: the band edges of the positives (the path's: they also build Rank & Sort Loss's sorting relations).
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
    path: RankingPath
    reduction: Reduction
    negatives: RankingNegatives
    edges: RankingEdges
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
        path: RankingPath,
        exchange: Optional[PositiveExchange] = None,
        positive_values: Optional[Tensor] = None,
    ) -> PositiveRanking:
        """Sorts the positives and relates them to the negatives (one pass over the logits), with one
        host synchronisation on the ``scan`` path (the search steps of the negatives' gap lookup, which depend
        on the scores) and none on the ``dense`` one.

        Args:
            logits: finite scores of any shape and float dtype (M entries); not differentiated.
            positive_index: (P,) distinct indices of the positives into the flattened logits,
                at least one positive (of all workers, in a global ranking).
            valid: None (every example is ranked) or a bool tensor broadcastable to
                ``logits.shape``, False for the ignored examples; positives rank whatever
                their entry.
            delta: smoothness of H, >= 0 (0: the unit step with H(0) = 1).
            path: the implementation (:func:`alrp_d2.losses.ranking_path.choose_path`).
            exchange: the communication of a global ranking (see
                :class:`alrp_d2.losses.ranking_inputs.RankingInputs`); None: this worker's
                examples only.
            positive_values: optional per-positive values of this worker (e.g. E_loc), in the
                order of ``positive_index``, gathered with the scores in a global ranking
                (see :meth:`sorted_positive_values`).
        """
        logits = logits.detach()
        flat = logits.reshape(-1)
        if valid is not None:
            valid = valid.expand(logits.shape).reshape(-1)
        positives, edges, negatives, negative_totals, reduction = path.relate(
            RankingRequest(flat, positive_index, valid, delta, exchange, positive_values)
        )
        # N_FP needs every worker's negatives: their gap totals are summed over the workers.
        if exchange is not None:
            negative_totals = exchange.all_reduce_sum(negative_totals)
        num_false_positives = edges.sum_from_gap_totals(negative_totals)
        # rank^+ = 1 + sum_{k != i} H(x_ik): the sum over all k includes the self term H(0).
        rank_positive = (1.0 - edges.self_relation) + edges.positive_sums()
        return PositiveRanking(
            positive_index=positives.flat_index,
            positive_order=positives.order,
            positive_scores=edges.scores,
            path=path,
            reduction=reduction,
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

    def positive_relation_sum(self, weights: Tensor) -> Tensor:
        """``sum_{k in P, k != i} w_k H(x_ik)`` for every sorted positive ``i`` (the self term
        H(0) is removed)."""
        return torch.add(self.edges.positive_sums(weights), weights, alpha=-self.edges.self_relation)

    def negative_coefficients(self, weights: Tensor) -> Tensor:
        """The coefficients of ``sum_{i in P} w_i H(x_ij)`` per gap (rows ``A``, ``B``:
        :data:`alrp_d2.losses.band_edges.Coefficients`), for
        :meth:`negative_relation_sum` and :meth:`negative_relation_total`.

        With ``w_i = (l(i) - l*(i)) / N_FP(i)`` this is the error the positives distribute
        over negative ``j`` through p(j|i) = H(x_ij) / N_FP(i) (Alg. 1 line 4).
        """
        return self.edges.coefficients(weights)

    def negative_relation_sum(self, coefficients: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
        """(M,) ``sum_{i in P} w_i H(x_ij)`` for every negative ``j`` of the flat logits from the
        :meth:`negative_coefficients` of ``w``, 0 for the positives and the ignored entries, in ``dtype`` (one
        pass over the logits)."""
        return self.negatives.relation_sums(coefficients, dtype)

    def negative_relation_total(self, coefficients: Tensor) -> Tensor:
        """``sum_j sum_{i in P} w_i H(x_ij)`` over the negatives (of all workers in a global ranking) from the
        :meth:`negative_coefficients` of ``w`` and the gap totals (no pass over the logits), per ranking:
        ``sum_g A[g] count[g] + B[g] (sum of v in g)``."""
        return self.reduction.gap_total(coefficients, self.negative_totals)

    def at_or_below_sums(self, values: Tensor) -> Tensor:
        """``sum_{k in P, s_k <= s_i} v_k`` for every sorted positive ``i``: tied positives count together (the
        unit step H(x) = [x >= 0] of App. E line 14)."""
        return self.reduction.at_or_below_sums(self.positive_scores, values)
