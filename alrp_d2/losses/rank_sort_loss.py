"""Rank & Sort Loss (Oksuz et al., ICCV 2021) with the semantics of the official ``RankSort``.

For the positives ``P`` (target ``t_i`` in (0, 1], e.g. the IoU of the prediction), the relevant
negatives ``N`` (target 0, score ``>= min_P s - delta``) and the step ``H`` of
:mod:`alrp_d2.losses.relation_sums` with ``x_ij = s_j - s_i``:

* ``rank^+(i) = sum_{k in P} H(x_ik)``: the positive itself counts, with H(0) = 0.5 (1 for the unit
  step, ``delta = 0``); ``N_FP(i) = sum_{j in N} H(x_ij)``; ``rank(i) = rank^+(i) + N_FP(i)``;
* ranking error ``l_R(i) = N_FP(i) / rank(i)`` (target 0);
* sorting error ``l_S(i) = sum_{k in P} H(x_ik) (1 - t_k) / rank^+(i)
  - sum_{k: t_k >= t_i} H(x_ik) (1 - t_k) / sum_{k: t_k >= t_i} H(x_ik)``, the current minus the
  target error of the positives sorted by target.

The losses are ``1/|P| sum_i l_R(i)`` and ``1/|P| sum_i l_S(i)``. The score gradient is the
error-driven update of both errors (:class:`alrp_d2.losses.error_driven.ErrorDrivenRankingLoss`):
a positive with ``N_FP(i) > eps`` gets ``-l_R(i)`` and hands it to the negatives through
``H(x_ij) / N_FP(i)``; a positive with ``D(i) = sum_{k: t_k < t_i} H(x_ik) > eps`` gets ``-l_S(i)``
and hands it to the positives sorted above it by mistake (smaller target) through ``H(x_ik) / D(i)``;
all divided by ``|P|``. As the official backward, only the ranking loss carries this gradient;
the sorting loss is connected to the logits with a zero gradient. docs/paper_notes.md,
"Rank & Sort Loss", records every choice.

With ``A, B`` the sums over ``t_k >= t_i`` of ``H(x_ik)`` and ``H(x_ik) (1 - t_k)`` and ``D, E``
those over ``t_k < t_i``, ``rank^+ = A + D`` and ``l_S = (A E - B D) / (rank^+ A)``, which is exactly
0 when nothing is sorted above ``i`` by mistake. ``N_FP`` and the negative gradients come from the
relation sums in O(N + P log P), ``A, B, D, E`` and the positives' sorting gradients from
:mod:`alrp_d2.losses.sorting_relations` in O(P log P).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .error_driven import ErrorDrivenRankingLoss, check_hyperparameters, nan_unless_finite, output_dtype
from .global_ranking import RankingGroup
from .ranking_inputs import TARGETS, AnySet, RankingInputs
from .ranking_path import SortingSums
from .ranking_statistics import RankingStatistics
from .relation_sums import PositiveRanking

__all__ = ["RankSortLossTerms", "rank_sort_loss"]


class RankSortLossTerms(NamedTuple):
    """The two components of RS Loss and the summed magnitudes of the score gradients of the
    positives and of the negatives."""

    ranking_loss: Tensor
    sorting_loss: Tensor
    positive_gradient_magnitude: Tensor
    negative_gradient_magnitude: Tensor

    @property
    def statistics(self) -> RankingStatistics:
        """The step's record: ``rank`` and ``sort``."""
        return RankingStatistics.of(
            self.positive_gradient_magnitude,
            self.negative_gradient_magnitude,
            rank=self.ranking_loss,
            sort=self.sorting_loss,
        )


def rank_sort_loss(
    sets: Sequence[AnySet],
    delta: float = 0.5,
    eps: float = 1e-10,
    group: Optional[RankingGroup] = None,
    path: str = "auto",
) -> RankSortLossTerms:
    """RS Loss of every set of ``sets``, each its own ranking of all its positives and negatives (module docstring);
    every field of the result is (S,), one value a set. A :class:`RankingSet`'s ``positive_values`` are its positives'
    targets in (0, 1] (e.g. the IoU), not validated: a NaN or infinite logit makes its ranking loss NaN, without a host
    synchronisation. A :class:`LabelledSet`'s labels are the continuous target of every entry (> 0 positive, 0
    negative, < 0 ignored), validated: shapes, dtypes, NaN or infinite logits or targets, targets > 1 raise, naming
    what is wrong.

    Args:
        sets: the rankings; one set is a list of one, several are ranked in one call, each on its own
            (:mod:`alrp_d2.losses.segmented_path`). Logits of any shape and float dtype (computed in float64).
        delta: smoothness of H, >= 0; 0 is the official unit step with H(0) = 1.
        eps: the gates ``N_FP(i) > eps`` and ``D(i) > eps`` (strict, as the official code).
        group: rank the examples of all workers of this group as one ranking (see
            :mod:`alrp_d2.losses.global_ranking`): every worker returns the global losses, and its
            logits receive their gradient times the world size. None: this worker's examples.
        path: the implementation of the ranking statistics, ``"auto"`` (``scan`` on the CPU, ``dense`` on other
            devices), ``"scan"`` or ``"dense"`` (:mod:`alrp_d2.losses.ranking_path`; the same values either way).

    Without positives (of any worker) both losses are zeros connected to the logits.
    """
    check_hyperparameters(delta, eps, unit_step=True)
    inputs, targets = RankingInputs.of_sets(sets, group, path, TARGETS)
    assert targets is not None
    return _rank_sort_loss(inputs, targets, delta, eps)


def _rank_sort_loss(inputs: RankingInputs, positive_targets: Tensor, delta: float, eps: float) -> RankSortLossTerms:
    logits = inputs.logits
    positive_targets = positive_targets.detach()

    def without_positives(zero: Tensor) -> RankSortLossTerms:
        return RankSortLossTerms(zero, zero, zero.detach(), zero.detach())

    def from_ranking(ranking: PositiveRanking) -> RankSortLossTerms:
        sorted_targets = ranking.sorted_positive_values(positive_targets).double()
        relations = ranking.edges.sorting_relations(sorted_targets)
        ranking_errors, sorting_errors, sorting_grad = _errors_and_sorting_update(ranking, relations, eps)
        # ErrorDrivenRankingLoss gates with N_FP >= gate: the next float above eps makes it N_FP > eps.
        gate = math.nextafter(eps, math.inf)
        ranking_loss, positive_magnitude, negative_magnitude = ErrorDrivenRankingLoss.apply(
            logits, ranking, ranking_errors, None, gate, sorting_grad
        )
        sorting_loss = ranking.reduction.mean(sorting_errors).to(output_dtype(logits)) + 0.0 * ranking_loss
        return RankSortLossTerms(
            nan_unless_finite(ranking_loss, logits), sorting_loss, positive_magnitude, negative_magnitude
        )

    return inputs.loss_terms(delta, positive_targets, without_positives, from_ranking)


def _errors_and_sorting_update(
    ranking: PositiveRanking, relations: SortingSums, eps: float
) -> Tuple[Tensor, Tensor, Tensor]:
    """``l_R``, ``l_S`` and the sorting update of every sorted positive: ``-l_S(i)`` where
    ``D(i) > eps``, plus the share ``l_S(i) H(x_ik) / D(i)`` of every ``i`` with ``t_i > t_k``, over |P|."""
    targets = relations.targets
    weights = torch.stack([torch.ones_like(targets), 1.0 - targets], 1)
    at_least_sums, smaller_sums = relations.target_split_sums(weights)
    at_least, at_least_weighted = at_least_sums.unbind(1)
    smaller, smaller_weighted = smaller_sums.unbind(1)
    rank_positive = at_least + smaller
    num_false_positives = ranking.num_false_positives
    ranking_errors = num_false_positives / (rank_positive + num_false_positives)
    sorting_errors = (at_least * smaller_weighted - at_least_weighted * smaller) / (rank_positive * at_least)

    normaliser = ranking.reduction.normaliser
    active = smaller > eps
    distributed = torch.where(active, sorting_errors / smaller.clamp_min(eps), 0.0) / normaliser
    sorting_update = relations.larger_target_source_sums(distributed.unsqueeze(1)).squeeze(1)
    sorting_update -= torch.where(active, sorting_errors, 0.0) / normaliser
    return ranking_errors, sorting_errors, sorting_update
