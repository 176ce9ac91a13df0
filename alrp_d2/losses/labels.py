"""The label API of the ranking losses: ``labels`` (M,) with 1 for positives, 0 for negatives
and -1 for ignored entries, validated once and turned into the positives' indices and the
validity mask that the losses take."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .error_driven import NonFiniteInputError

__all__ = ["check_ranking_inputs", "positives_of_labels", "raise_if_non_finite"]


def raise_if_non_finite(values: Tensor, name: str) -> None:
    """Raises when ``values`` hold a NaN or inf; a finite tensor whose sum overflowed passes."""
    count = int((~torch.isfinite(values)).sum())
    if count:
        raise NonFiniteInputError(f"ranking loss received {count} non-finite {name} (NaN or inf)")


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
    if logits.dim() != 1 or labels.shape != logits.shape:
        raise ValueError(
            f"logits and labels must be 1-D tensors of the same length, got {tuple(logits.shape)} "
            f"and {tuple(labels.shape)}"
        )
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {logits.dtype}")
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


def positives_of_labels(labels: Tensor) -> Tuple[Tensor, Tensor]:
    """The flat indices of the positives (in the order of ``labels``) and the (M,) mask of the
    entries that are not ignored."""
    return torch.nonzero(labels.reshape(-1) == 1).squeeze(1), labels.reshape(-1) >= 0
