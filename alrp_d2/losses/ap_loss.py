"""AP Loss (paper Eq. 1-3) as an instance of the error-driven framework (Sec. 3)."""

from __future__ import annotations

import torch
from torch import Tensor

from .error_driven import (
    ErrorDrivenRankingLoss,
    RankingLossOutput,
    check_hyperparameters,
    check_ranking_inputs,
    output_dtype,
    zero_connected,
)
from .relation_sums import PositiveRanking

__all__ = ["ap_loss", "ap_loss_terms"]


def ap_loss_terms(logits: Tensor, labels: Tensor, delta: float = 1.0, eps: float = 1e-5) -> RankingLossOutput:
    """AP Loss with ``l(i) = N_FP(i) / rank(i)`` and target ``l*(i) = 0`` ("Deriving AP Loss",
    Sec. 3), without the interpolation of the original AP Loss.

    Args:
        logits: (M,) flattened classification logits.
        labels: (M,) 1 positive, 0 negative, -1 ignored.
        delta: smoothness of the step function H.
        eps: positives with N_FP(i) < eps get no gradient.

    Returns:
        The loss with the error-driven gradient and the summed gradient magnitudes of the
        positives and negatives. Without positives the loss is a zero connected to ``logits``.
    """
    check_hyperparameters(delta, eps)
    num_positives = check_ranking_inputs(logits, labels)
    dtype = output_dtype(logits)
    if num_positives == 0:
        zero = zero_connected(logits, dtype)
        return RankingLossOutput(zero, zero.detach(), zero.detach())
    with torch.autocast(device_type=logits.device.type, enabled=False):
        ranking = PositiveRanking.build(logits, labels == 1, labels == 0, delta)
        errors = ranking.num_false_positives / ranking.rank
        return RankingLossOutput(
            *ErrorDrivenRankingLoss.apply(logits, ranking, errors, torch.zeros_like(errors), None, eps)
        )


def ap_loss(logits: Tensor, labels: Tensor, delta: float = 1.0, eps: float = 1e-5) -> Tensor:
    """AP Loss, ``1 - AP_50`` over the ranking of all positives and negatives (Eq. 1)."""
    return ap_loss_terms(logits, labels, delta, eps).loss
