"""The input checks of the ranking losses' labelled sets (``LabelledSet``): ``labels`` (M,) with 1 for positives, 0 for
negatives and -1 for ignored entries (Rank & Sort Loss: continuous ``targets``, > 0 for positives),
validated once, and the error a non-finite input raises."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["NonFiniteInputError", "check_rank_sort_inputs", "check_ranking_inputs", "raise_if_non_finite"]


class NonFiniteInputError(FloatingPointError):
    """A ranking loss received a NaN or infinite logit or localisation error."""


def raise_if_non_finite(values: Tensor, name: str) -> None:
    """Raises when ``values`` hold a NaN or inf; a finite tensor whose sum overflowed passes."""
    count = int((~torch.isfinite(values)).sum())
    if count:
        raise NonFiniteInputError(f"ranking loss received {count} non-finite {name} (NaN or inf)")


def _check_flat_pair(logits: Tensor, labels: Tensor, name: str) -> None:
    """``logits`` and the per-entry ``labels`` (called ``name``) are 1-D of the same length, the
    logits floating-point."""
    if logits.dim() != 1 or labels.shape != logits.shape:
        raise ValueError(
            f"logits and {name} must be 1-D tensors of the same length, got {tuple(logits.shape)} "
            f"and {tuple(labels.shape)}"
        )
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {logits.dtype}")


def check_ranking_inputs(logits: Tensor, labels: Tensor, extra: Optional[Tensor] = None) -> int:
    """Validates a flattened ranking problem with one host synchronisation.

    Args:
        logits: (M,) scores.
        labels: (M,) 1 for positives, 0 for negatives, -1 for ignored entries.
        extra: optional per-positive values (e.g. localisation errors) that must be finite
            and have one entry per positive.

    Returns:
        The number of positives.
    """
    _check_flat_pair(logits, labels, "labels")
    if labels.is_floating_point() or labels.is_complex():
        raise TypeError(f"labels must be an integer or bool tensor (1, 0, -1), got {labels.dtype}")
    # One host synchronisation: the number of positives, whether the logits sum to a finite
    # number (a NaN or inf anywhere makes it non-finite), the label range and, for ``extra``,
    # whether it sums to a finite number and its smallest value.
    ranged = labels.to(torch.int8) if labels.dtype == torch.bool else labels
    label_min, label_max = torch.aminmax(ranged) if labels.numel() else (ranged.new_zeros(()), ranged.new_zeros(()))
    checks = [torch.count_nonzero(labels == 1), torch.isfinite(logits.sum()), label_min, label_max]
    if extra is not None:
        detached = extra.detach()
        checks.append(torch.isfinite(detached.sum()))
        checks.append(detached.min() if detached.numel() else detached.new_zeros(()))
    num_positives, logits_finite, label_min, label_max, *extra_checks = torch.stack(
        [c.to(torch.float64) for c in checks]
    ).tolist()
    num_positives = int(num_positives)
    if label_min < -1 or label_max > 1:
        raise ValueError("labels must be 1 (positive), 0 (negative) or -1 (ignored)")
    if not logits_finite:
        raise_if_non_finite(logits, "logits")
    if extra is not None:
        extra_finite, extra_min = extra_checks
        if extra.shape != (num_positives,):
            raise ValueError(
                f"expected one localisation error per positive ({num_positives}), got shape {tuple(extra.shape)}"
            )
        if not extra_finite:
            raise_if_non_finite(extra, "localisation errors")
        if extra_min < 0:
            raise ValueError(f"localisation errors must be >= 0, got a minimum of {extra_min}")
    return num_positives


def check_rank_sort_inputs(logits: Tensor, targets: Tensor) -> int:
    """Validates a flattened RS Loss problem with one host synchronisation and returns its number
    of positives. ``targets`` must be finite and at most 1 (> 0 positive, 0 negative, < 0 ignored)."""
    _check_flat_pair(logits, targets, "targets")
    if not targets.is_floating_point():
        raise TypeError(
            f"targets must be a floating-point tensor (IoU in (0, 1] for positives, 0 for negatives, < 0 ignored), "
            f"got {targets.dtype}"
        )
    if logits.numel() == 0:
        return 0
    logits, targets = logits.detach(), targets.detach()
    checks = [
        torch.count_nonzero(targets > 0),
        torch.isfinite(logits.sum()),
        torch.isfinite(targets.sum()),
        targets.max(),
    ]
    num_positives, logits_finite, targets_finite, target_max = torch.stack([c.double() for c in checks]).tolist()
    if not logits_finite:
        raise_if_non_finite(logits, "logits")
    if not targets_finite:
        raise_if_non_finite(targets, "targets")
    if target_max > 1:
        raise ValueError(f"targets must be <= 1 (IoU of a positive), got a maximum of {target_max}")
    return int(num_positives)
