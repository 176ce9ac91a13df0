"""AP Loss (paper Eq. 1-3) as an instance of the error-driven framework (Sec. 3), with or without
the interpolation of the original AP Loss (Chen et al., CVPR 2019; the official ``APLoss``)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from .error_driven import (
    ErrorDrivenRankingLoss,
    RankingLossOutput,
    check_hyperparameters,
    nan_unless_finite,
)
from .global_ranking import RankingGroup
from .ranking_inputs import AnySet, RankingInputs
from .relation_sums import PositiveRanking

__all__ = ["ap_loss", "interpolated_errors"]

#: The gate of a loss without one: only positives with N_FP(i) = 0, whose error is 0, are skipped.
_NO_GATE = torch.finfo(torch.float64).tiny


def interpolated_errors(ranking: PositiveRanking) -> Tensor:
    """``l(i) = 1 - max_{k in P, s_k <= s_i} prec(k) = min_{k in P, s_k <= s_i} N_FP(k) / rank(k)``
    for every sorted positive: the official APLoss's running maximum of the precision over the
    positives it visits before ``i`` (ascending score). Tied positives have the same precision,
    so the result does not depend on the order of ties; every tie takes the minimum up to its last
    member. A cumulative minimum: O(P)."""
    return ranking.reduction.running_min_at_ties(ranking.positive_scores, ranking.num_false_positives / ranking.rank)


def ap_loss(
    sets: Sequence[AnySet],
    interpolated: bool = False,
    delta: float = 1.0,
    eps: Optional[float] = 1e-5,
    group: Optional[RankingGroup] = None,
    path: str = "auto",
) -> RankingLossOutput:
    """AP Loss of every set of ``sets`` (``1 - AP_50`` of its ranking of all positives and negatives, Eq. 1); every
    field of the result is (S,), one value a set.

    The target is ``l*(i) = 0`` ("Deriving AP Loss", Sec. 3) and the error-driven gradient
    ``dL/ds_i = -l(i) / |P|``, ``dL/ds_j = sum_i l(i) H(x_ij) / N_FP(i) / |P|``, where
    ``l(i) = N_FP(i) / rank(i) = 1 - prec(i)`` or, with ``interpolated``,
    :func:`interpolated_errors`. The interpolated loss is the official APLoss (the paper's AP Loss
    rows): its negative weight ``(1 - max_prec) / (1 - prec(i))`` on ``H(x_ij) / rank(i)`` equals
    ``l(i) H(x_ij) / N_FP(i)``, and its loss ``1 - mean(max_prec)`` counts every positive.

    Sets as :func:`alrp_d2.losses.alrp_loss` takes them, without ``positive_values`` (a :class:`RankingSet` is not
    validated, a non-finite logit makes its loss NaN; a :class:`LabelledSet` is: shapes, label values and non-finite
    logits raise).

    Args:
        sets: the rankings; one set is a list of one, several are ranked in one call, each on its own.
        interpolated: interpolate the precision as the official APLoss.
        delta: smoothness of the step function H.
        eps: positives with N_FP(i) < eps get no gradient (App. E line 28); None: no gate, as
            the official APLoss.
        group: rank the examples of all workers of this group as one ranking (see
            :mod:`alrp_d2.losses.global_ranking`; logit gradients times the world size).
        path: the implementation of the ranking statistics, ``"auto"`` (``scan`` on the CPU, ``dense`` on other
            devices), ``"scan"`` or ``"dense"`` (:mod:`alrp_d2.losses.ranking_path`; the same values either way).

    Returns:
        The loss with the error-driven gradient and the summed gradient magnitudes of the
        positives and negatives. Without positives the loss is a zero connected to the logits.
    """
    gate = _gate(delta, eps)
    inputs, _ = RankingInputs.of_sets(sets, group, path, None)
    return _ap_loss(inputs, delta, gate, interpolated)


def _gate(delta: float, eps: Optional[float]) -> float:
    gate = _NO_GATE if eps is None else eps
    check_hyperparameters(delta, gate)
    return gate


def _ap_loss(inputs: RankingInputs, delta: float, gate: float, interpolated: bool) -> RankingLossOutput:
    logits = inputs.logits

    def without_positives(zero: Tensor) -> RankingLossOutput:
        return RankingLossOutput(zero, zero.detach(), zero.detach())

    def from_ranking(ranking: PositiveRanking) -> RankingLossOutput:
        errors = interpolated_errors(ranking) if interpolated else ranking.num_false_positives / ranking.rank
        loss, positive_magnitude, negative_magnitude = ErrorDrivenRankingLoss.apply(logits, ranking, errors, None, gate)
        return RankingLossOutput(nan_unless_finite(loss, logits), positive_magnitude, negative_magnitude)

    return inputs.loss_terms(delta, None, without_positives, from_ranking)
