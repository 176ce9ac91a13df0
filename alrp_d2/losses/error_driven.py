"""The generalised error-driven update for ranking-based losses (paper Sec. 3, Alg. 1)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .ranking_statistics import RankingStatistics
from .relation_sums import PositiveRanking
from .serial_indexing import take_rows

__all__ = [
    "ErrorDrivenRankingLoss",
    "RankingLossOutput",
    "output_dtype",
    "check_hyperparameters",
    "nan_unless_finite",
    "zero_connected",
]


class RankingLossOutput(NamedTuple):
    """A ranking loss and the summed magnitudes of its score gradients (Theorem 2 says the
    two sums are equal; their ratio is what paper Fig. 3 plots)."""

    loss: Tensor
    positive_gradient_magnitude: Tensor
    negative_gradient_magnitude: Tensor

    @property
    def statistics(self) -> RankingStatistics:
        """The step's record, ``loss`` as ``cls``."""
        return RankingStatistics.of(self.positive_gradient_magnitude, self.negative_gradient_magnitude, cls=self.loss)


def output_dtype(logits: Tensor) -> torch.dtype:
    """float64 stays float64; every other input is reported in float32."""
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def check_hyperparameters(delta: float, eps: float, unit_step: bool = False) -> None:
    """delta is the smoothness of H (App. E, Eq. 14), > 0 (>= 0 with ``unit_step``: 0 is the unit step); eps the
    N_FP threshold of line 28."""
    if not ((delta >= 0 if unit_step else delta > 0) and math.isfinite(delta)):
        raise ValueError(f"delta must be finite and {'>=' if unit_step else '>'} 0, got {delta}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")


def nan_unless_finite(loss: Tensor, logits: Tensor) -> Tensor:
    """``loss``, or NaN when a logit is NaN or infinite, without a host synchronisation (the
    smallest and largest logit carry any NaN or inf, and 0 times either is NaN), so that a training loop stops
    on it."""
    if logits.numel() == 0:
        return loss
    return loss + (torch.stack(torch.aminmax(logits.detach())) * 0).sum()


def zero_connected(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """A zero scalar that is still connected to ``tensor``'s graph (zero gradients); finite
    even if summing ``tensor`` itself would overflow."""
    return (tensor * 0.0).sum().to(dtype)


class ErrorDrivenRankingLoss(torch.autograd.Function):
    """A ranking-based loss ``L = 1/Z sum_{i in P} l(i)`` with ``Z = |P|`` and the gradient of
    paper Alg. 1 for the uniform ``p(j|i) = H(x_ij) / N_FP(i)``:

        dL/ds_i = -(l(i) - l*(i)) / Z                       for a positive i   (line 4)
        dL/ds_j = sum_i (l(i) - l*(i)) H(x_ij) / N_FP(i) / Z for a negative j   (line 4)

    ``update`` is ``l(i) - l*(i)`` (line 3). As in App. E line 28, a positive with N_FP(i) < eps neither
    receives nor distributes a gradient. The returned value is ``1/Z sum_i loss_terms(i)``; ``loss_terms``
    defaults to ``update`` (a target of 0) and lets a loss report one component of itself (aLRP's
    classification part, Eq. 11) while carrying the score gradient of the whole (App. F.3).
    ``extra_positive_grad`` (per positive, already divided by Z, not gated) is added to the positives'
    gradients: the update of a second error among the positives, such as RS Loss's sorting error.

    In a global ranking (``ranking.exchange`` set) P holds every worker's positives and the
    loss is the global one on every worker; the logits receive their gradient multiplied by
    the world size, so that DDP's average over the workers is the global loss's gradient. The
    negative gradient magnitude is that of every worker's negatives (from the all-reduced gap totals).

    The forward does not pass over the logits; the backward writes their gradient in one pass.

    Call as ``ErrorDrivenRankingLoss.apply(logits, ranking, update, loss_terms, eps[,
    extra_positive_grad])`` with per-positive tensors in the ranking's sorted order. Returns
    ``(loss, positive_gradient_magnitude, negative_gradient_magnitude)``; only ``loss`` is
    differentiable, with respect to ``logits``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        logits: Tensor,
        ranking: PositiveRanking,
        update: Tensor,
        loss_terms: Optional[Tensor],
        eps: float,
        extra_positive_grad: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        reduction = ranking.reduction
        normaliser = reduction.normaliser
        # The gate of line 28 (update is finite wherever it closes: N_FP < eps and rank >= 1).
        shares = update * (ranking.num_false_positives >= eps)
        positive_grad = shares / -normaliser
        if extra_positive_grad is not None:
            positive_grad = positive_grad + extra_positive_grad
        distributed = shares / ranking.num_false_positives.clamp_min(eps) / normaliser
        dtype = output_dtype(logits)
        local_positive_grad = (
            positive_grad if ranking.local_slot is None else take_rows(positive_grad, ranking.local_slot)
        )

        # The negatives' gradient is written in the backward, in one pass over the logits, from the
        # coefficients of sum_i w_i H(x_ij) per gap (linear in w: the backward scales them).
        coefficients = ranking.negative_coefficients(distributed)
        ctx.shape = logits.shape
        ctx.dtype = dtype
        ctx.scale = ranking.gradient_scale
        ctx.ranking = ranking
        ctx.save_for_backward(coefficients, local_positive_grad)
        loss = reduction.mean(update if loss_terms is None else loss_terms).to(dtype)
        positive_magnitude = reduction.norm1(positive_grad).to(dtype)
        # Every negative's gradient sum_i w_i H(x_ij) is >= 0 (the shares w_i are), so its magnitude is
        # its value, summed over the negatives of every worker from their gap totals.
        negative_magnitude = ranking.negative_relation_total(coefficients).to(dtype)
        ctx.mark_non_differentiable(positive_magnitude, negative_magnitude)
        ctx.set_materialize_grads(False)  # the magnitudes' gradients are never needed: no zeros for them
        return loss, positive_magnitude, negative_magnitude

    @staticmethod
    def backward(ctx: Any, grad_loss: Optional[Tensor], *unused: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
        if grad_loss is None:
            return None, None, None, None, None, None
        coefficients, positive_grad = ctx.saved_tensors
        ranking = ctx.ranking
        scale = grad_loss.double() if ctx.scale == 1.0 else grad_loss.double() * ctx.scale
        coefficients, positive_grad = ranking.reduction.scaled(coefficients, positive_grad, scale)
        grad = ranking.negative_relation_sum(coefficients, ctx.dtype)
        grad.index_copy_(0, ranking.positive_index, positive_grad.to(ctx.dtype))
        return grad.view(ctx.shape), None, None, None, None, None
