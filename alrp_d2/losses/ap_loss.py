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
from .ranking_inputs import RankingInputs, RankingSet
from .relation_sums import PositiveRanking

__all__ = ["ap_loss", "ap_loss_indexed", "ap_loss_sets", "ap_loss_terms", "interpolated_errors"]

#: The gate of a loss without one: only positives with N_FP(i) = 0, whose error is 0, are skipped.
_NO_GATE = torch.finfo(torch.float64).tiny


def interpolated_errors(ranking: PositiveRanking) -> Tensor:
    """``l(i) = 1 - max_{k in P, s_k <= s_i} prec(k) = min_{k in P, s_k <= s_i} N_FP(k) / rank(k)``
    for every sorted positive: the official APLoss's running maximum of the precision over the
    positives it visits before ``i`` (ascending score). Tied positives have the same precision,
    so the result does not depend on the order of ties; every tie takes the minimum up to its last
    member. A cumulative minimum: O(P)."""
    return ranking.reduction.running_min_at_ties(ranking.positive_scores, ranking.num_false_positives / ranking.rank)


def ap_loss_indexed(
    logits: Tensor,
    positive_index: Tensor,
    valid: Optional[Tensor] = None,
    delta: float = 1.0,
    eps: Optional[float] = 1e-5,
    group: Optional[RankingGroup] = None,
    interpolated: bool = False,
    path: str = "auto",
) -> RankingLossOutput:
    """AP Loss with target ``l*(i) = 0`` ("Deriving AP Loss", Sec. 3) and the error-driven gradient
    ``dL/ds_i = -l(i) / |P|``, ``dL/ds_j = sum_i l(i) H(x_ij) / N_FP(i) / |P|``, where
    ``l(i) = N_FP(i) / rank(i) = 1 - prec(i)`` or, with ``interpolated``,
    :func:`interpolated_errors`. The interpolated loss is the official APLoss (the paper's AP Loss
    rows): its negative weight ``(1 - max_prec) / (1 - prec(i))`` on ``H(x_ij) / rank(i)`` equals
    ``l(i) H(x_ij) / N_FP(i)``, and its loss ``1 - mean(max_prec)`` counts every positive.

    Inputs as :func:`alrp_d2.losses.alrp_loss_indexed` (not validated; a non-finite logit
    makes the loss NaN).

    Args:
        logits: classification logits of any shape (M entries).
        positive_index: (P,) distinct indices of the positives into the flattened logits.
        valid: None, or a bool tensor broadcastable to ``logits.shape``, False for ignored examples.
        delta: smoothness of the step function H.
        eps: positives with N_FP(i) < eps get no gradient (App. E line 28); None: no gate, as
            the official APLoss.
        group: rank the examples of all workers of this group as one ranking (see
            :mod:`alrp_d2.losses.global_ranking`; logit gradients times the world size).
        interpolated: interpolate the precision as the official APLoss.
        path: the implementation of the ranking statistics, ``"auto"`` (``scan`` on the CPU, ``dense`` on other
            devices), ``"scan"`` or ``"dense"`` (:mod:`alrp_d2.losses.ranking_path`; the same values either way).

    Returns:
        The loss with the error-driven gradient and the summed gradient magnitudes of the
        positives and negatives. Without positives the loss is a zero connected to ``logits``.
    """
    inputs = RankingInputs.indexed(logits, positive_index, valid, group, path)
    return _ap_loss(inputs, delta, _gate(delta, eps), interpolated)


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


def ap_loss_sets(
    sets: Sequence[RankingSet],
    interpolated: bool = False,
    delta: float = 1.0,
    eps: Optional[float] = 1e-5,
    group: Optional[RankingGroup] = None,
    path: str = "auto",
) -> RankingLossOutput:
    """:func:`ap_loss_indexed` of every set of ``sets``.

    Returns (S,) fields, every set ranked on its own, all in one call (:mod:`alrp_d2.losses.segmented_path`;
    ``path`` as for :func:`ap_loss_indexed`).
    """
    gate = _gate(delta, eps)
    return _ap_loss(RankingInputs.of_sets(sets, group, path), delta, gate, interpolated)


def ap_loss_terms(
    logits: Tensor,
    labels: Tensor,
    delta: float = 1.0,
    eps: Optional[float] = 1e-5,
    group: Optional[RankingGroup] = None,
    interpolated: bool = False,
    path: str = "auto",
) -> RankingLossOutput:
    """:func:`ap_loss_indexed` with ``labels`` (M,) 1 positive, 0 negative, -1 ignored for the
    (M,) ``logits``; the inputs are validated (shapes, label values, non-finite logits raise)."""
    gate = _gate(delta, eps)
    return _ap_loss(RankingInputs.labelled(logits, labels, None, group, path), delta, gate, interpolated)


def ap_loss(
    logits: Tensor,
    labels: Tensor,
    delta: float = 1.0,
    eps: Optional[float] = 1e-5,
    interpolated: bool = False,
    path: str = "auto",
) -> Tensor:
    """AP Loss, ``1 - AP_50`` over the ranking of all positives and negatives (Eq. 1); see
    :func:`ap_loss_terms`."""
    return ap_loss_terms(logits, labels, delta, eps, interpolated=interpolated, path=path).loss
