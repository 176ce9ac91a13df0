"""Correlation Loss (Kahraman, Oksuz, Kalkan, Akbas, AAAI 2023): ``1 - rho(scores, IoUs)`` over the
positives of a detector, with ``rho`` Pearson's, Lin's concordance or Spearman's (on l2 soft ranks,
Blondel et al., ICML 2020) correlation coefficient, as the official ``concordancer``,
``pearsonr`` and ``spearmanr`` compute them.

``scores`` are the sigmoid scores of the positives' ground-truth classes; ``ious`` the IoUs of their
decoded boxes with their matched boxes, detached and clamped at 1e-6 here. A group of positives
(all of them, or one FPN level) with fewer than two entries, or whose scores or IoUs are all equal
(the official coefficient is then 0 / 0 = NaN, replaced by 0), contributes 0 with a zero gradient.
Every group is computed at once (segment sums): no host synchronisation, no loop over groups.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .soft_rank import soft_rank

__all__ = ["CORRELATION_KINDS", "correlation_loss", "correlation_loss_per_level"]

#: The correlation coefficients of the official code (its ``corr_type``).
CORRELATION_KINDS = ("spearman", "concordance", "pearson")
#: The official IoU floor (``bbox_overlaps(...).clamp(min=1e-6)``).
_IOU_FLOOR = 1e-6


def correlation_loss(scores: Tensor, ious: Tensor, kind: str, concordance_eps: float = 0.0) -> Tensor:
    """``1 - rho(scores, ious)`` over all positives at once (the official heads' ``use_loss_single=0``
    branch and the heads with no per-level option).

    Args:
        scores: (P,) sigmoid score of every positive's ground-truth class (gradients flow).
        ious: (P,) IoU of every positive's decoded box with its matched box (detached here).
        kind: one of :data:`CORRELATION_KINDS`.
        concordance_eps: added to the denominator of Pearson's coefficient inside the concordance
            (the official FoveaBox head adds 1e-6; every other official head 0).

    Returns:
        A scalar in [0, 2], connected to ``scores``; 0 with a zero gradient when ``P < 2`` or the
        scores or IoUs are all equal. Non-finite inputs make it NaN.
    """
    levels = torch.zeros(scores.shape, dtype=torch.long, device=scores.device)
    return _group_losses(scores, ious, levels, 1, kind, concordance_eps)[0][0]


def correlation_loss_per_level(
    scores: Tensor, ious: Tensor, levels: Tensor, num_levels: int, kind: str, concordance_eps: float = 0.0
) -> Tensor:
    """The mean of ``1 - rho`` over the FPN levels with at least two positives (the official heads'
    ``use_loss_single=1`` branch): every such level counts in the mean, including one whose scores
    or IoUs are all equal, which contributes 0; with no such level the loss is 0.

    Args:
        scores, ious, kind, concordance_eps: as :func:`correlation_loss`.
        levels: (P,) FPN level index of every positive, in ``[0, num_levels)`` (not checked: an
            index out of range fails in the indexing).
        num_levels: number of FPN levels.

    Returns:
        A scalar connected to ``scores``.
    """
    if isinstance(num_levels, bool) or not isinstance(num_levels, int) or num_levels < 1:
        raise ValueError(f"correlation_loss_per_level: num_levels must be a positive int, got {num_levels!r}")
    if levels.shape != scores.shape or levels.is_floating_point() or levels.dtype == torch.bool:
        raise ValueError(
            f"correlation_loss_per_level: levels must be an integer tensor of the shape of scores "
            f"{tuple(scores.shape)}, got {levels.dtype} of shape {tuple(levels.shape)}"
        )
    losses, sizes = _group_losses(scores, ious, levels.long(), num_levels, kind, concordance_eps)
    return losses.sum() / (sizes >= 2).sum().clamp(min=1)


def _group_losses(
    scores: Tensor, ious: Tensor, groups: Tensor, num_groups: int, kind: str, concordance_eps: float
) -> tuple[Tensor, Tensor]:
    """``1 - rho`` of every group (0 for a degenerate one) and the group sizes, both (num_groups,)."""
    if kind not in CORRELATION_KINDS:
        raise ValueError(f"correlation loss: kind must be one of {CORRELATION_KINDS}, got {kind!r}")
    if scores.dim() != 1 or ious.shape != scores.shape:
        raise ValueError(
            f"correlation loss: scores and ious must be 1-D tensors of the same length, "
            f"got {tuple(scores.shape)} and {tuple(ious.shape)}"
        )
    if not scores.is_floating_point() or not ious.is_floating_point():
        raise TypeError(f"correlation loss: scores and ious must be floating-point, got {scores.dtype}, {ious.dtype}")
    dtype = torch.promote_types(scores.dtype, torch.float32)
    x = scores.to(dtype)
    y = ious.detach().to(dtype).clamp(min=_IOU_FLOOR)
    sizes = torch.zeros(num_groups, dtype=dtype, device=x.device).index_add_(0, groups, torch.ones_like(x))
    valid = (sizes >= 2) & _varies(x.detach(), groups, num_groups) & _varies(y, groups, num_groups)
    if kind == "spearman":
        x = soft_rank(x, groups=groups)
        y = soft_rank(y, groups=groups)
    centred_x, mean_x = _centre(x, groups, num_groups, sizes)
    centred_y, mean_y = _centre(y, groups, num_groups, sizes)
    sum_xx = _segment_sum(centred_x * centred_x, groups, num_groups)
    sum_yy = _segment_sum(centred_y * centred_y, groups, num_groups)
    sum_xy = _segment_sum(centred_x * centred_y, groups, num_groups)
    norms = _safe_sqrt(sum_xx, valid) * _safe_sqrt(sum_yy, valid)
    if kind == "concordance":
        # Lin's concordance 2 * pcc * std_x * std_y / (var_x + var_y + (mean_x - mean_y)^2), unbiased.
        pcc = sum_xy / (norms + concordance_eps)
        degrees = torch.where(valid, sizes - 1, torch.ones_like(sizes))
        var_x, var_y = sum_xx / degrees, sum_yy / degrees
        spread = var_x + var_y + (mean_x - mean_y) ** 2
        rho = 2 * pcc * _safe_sqrt(var_x, valid) * _safe_sqrt(var_y, valid) / torch.where(valid, spread, 1)
    else:
        # Pearson's coefficient; Spearman's is Pearson's of the soft ranks.
        rho = sum_xy / norms
    return torch.where(valid, 1 - rho, torch.zeros_like(rho)), sizes


def _segment_sum(values: Tensor, groups: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add(0, groups, values)


def _centre(values: Tensor, groups: Tensor, num_groups: int, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """``values`` minus their group's mean, and the group means."""
    means = _segment_sum(values, groups, num_groups) / sizes.clamp(min=1)
    return values - means[groups], means


def _safe_sqrt(values: Tensor, valid: Tensor) -> Tensor:
    """``sqrt`` of the valid groups; 1 (and a finite gradient) elsewhere."""
    return torch.sqrt(torch.where(valid, values, torch.ones_like(values)))


def _varies(values: Tensor, groups: Tensor, num_groups: int) -> Tensor:
    """False for a group whose values are all equal and finite (a NaN or inf keeps its group, so
    that it reaches the loss)."""
    largest = values.new_full((num_groups,), float("-inf")).scatter_reduce(0, groups, values, "amax")
    smallest = values.new_full((num_groups,), float("inf")).scatter_reduce(0, groups, values, "amin")
    return (largest != smallest) | ~torch.isfinite(largest)
