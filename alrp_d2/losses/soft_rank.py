"""The l2-regularised soft rank of Blondel et al. (ICML 2020, "Fast Differentiable Sorting and
Ranking", Eq. 7 and Prop. 3), as ``torchsort.soft_rank(values, "l2", regularization_strength)``
computes it, in pure torch with no compiled extension.

The soft rank of ``theta = values / strength`` (descending: the largest value gets rank n) is
``r = s - v`` in sorted order, where ``s`` is ``theta`` sorted in descending order, ``w = (n, ..., 1)``
and ``v`` is the decreasing isotonic regression of ``y = s - w`` (argmin of ``||v - y||`` over
``v_1 >= ... >= v_n``). ``torchsort`` solves the regression with the pool-adjacent-violators
algorithm (PAV); here it is solved exactly, without a loop over elements, by the min-max formula
``v_i = min_{j <= i} max_{k >= i} mean(y[j..k])`` on prefix sums, over chunks of ``j``. The value is
then recomputed differentiably as the mean of ``y`` over its block, the maximal run of equal
solution values (``torchsort``'s backward pass merges neighbours closer than 1e-9), so the Jacobian
``dr/ds = I - block average`` is ``torchsort``'s.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["soft_rank"]

#: Neighbouring solution values closer than this belong to one block (torchsort's ``partition``).
_BLOCK_TOLERANCE = 1e-9
#: Entries of one chunk of the (j, k) table of block means.
_CHUNK_ELEMENTS = 1 << 21


def soft_rank(values: Tensor, regularization_strength: float = 1.0, groups: Optional[Tensor] = None) -> Tensor:
    """The l2 soft rank of every entry, equal to ``torchsort.soft_rank(values, "l2", strength)``.

    Args:
        values: (n,) or, as in ``torchsort``, (batch, n) with every row ranked on its own.
        regularization_strength: epsilon of the paper; the soft rank tends to the hard rank as it
            goes to 0 and is an affine function of ``values`` once it exceeds the range of ``values``.
        groups: only with 1-D ``values``: (n,) integer group of every entry; each group is ranked
            on its own, as if its entries were a separate vector. None ranks all entries together.

    Returns:
        The soft ranks, the shape of ``values``; the largest value of a vector (group) of n entries
        has soft rank close to n, the smallest close to 1. Computed in O(n^2) time and O(n) memory
        (chunks of ``2**21`` table entries) with no host synchronisation.
    """
    if not values.is_floating_point():
        raise TypeError(f"soft_rank: values must be a floating-point tensor, got {values.dtype}")
    if not regularization_strength > 0:
        raise ValueError(f"soft_rank: regularization_strength must be > 0, got {regularization_strength}")
    if values.dim() == 2:
        if groups is not None:
            raise ValueError(
                "soft_rank: groups can only be given with 1-D values; the rows of 2-D values are the groups"
            )
        rows, length = values.shape
        row_index = torch.arange(rows, device=values.device).repeat_interleave(length)
        return _grouped_soft_rank(values.reshape(-1), row_index, regularization_strength).reshape(rows, length)
    if values.dim() != 1:
        raise ValueError(f"soft_rank: values must be 1-D or 2-D, got shape {tuple(values.shape)}")
    if groups is None:
        groups = torch.zeros(values.shape, dtype=torch.long, device=values.device)
    elif groups.shape != values.shape or groups.is_floating_point() or groups.dtype == torch.bool:
        raise ValueError(
            f"soft_rank: groups must be an integer tensor of the shape of values {tuple(values.shape)}, "
            f"got {groups.dtype} of shape {tuple(groups.shape)}"
        )
    return _grouped_soft_rank(values, groups, regularization_strength)


def _grouped_soft_rank(values: Tensor, groups: Tensor, regularization_strength: float) -> Tensor:
    """Soft ranks of 1-D ``values`` within each group (see :func:`soft_rank`)."""
    count = values.numel()
    theta = values * (1.0 / regularization_strength)
    position = torch.arange(count, device=values.device)
    with torch.no_grad():
        # Descending by value inside ascending groups: every group is a contiguous run.
        order = torch.argsort(theta, descending=True)
        order = order[torch.argsort(groups[order], stable=True)]
        sorted_groups = groups[order]
        first = torch.ones(count, dtype=torch.bool, device=values.device)
        first[1:] = sorted_groups[1:] != sorted_groups[:-1]
        last = torch.ones_like(first)
        last[:-1] = first[1:]
        start = torch.cummax(torch.where(first, position, 0), 0).values
        end = torch.cummin(torch.where(last, position + 1, count).flip(0), 0).values.flip(0)
        solution = _isotonic_solution(theta[order].double(), start, end)
        new_block = first.clone()
        new_block[1:] |= (solution[1:] - solution[:-1]).abs() > _BLOCK_TOLERANCE
        block = torch.cumsum(new_block, 0) - 1
        block_size = torch.zeros(count, dtype=theta.dtype, device=values.device).index_add_(
            0, block, torch.ones_like(theta)
        )
    sorted_theta = theta[order]
    # w = (n_g, ..., 1) inside every group of n_g entries: the distance to the group's end.
    target = sorted_theta - (end - position).to(theta.dtype)
    block_mean = torch.zeros_like(theta).index_add(0, block, target)[block] / block_size[block]
    inverse = torch.empty_like(order)
    inverse[order] = position
    return (sorted_theta - block_mean)[inverse]


def _isotonic_solution(sorted_theta: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """Decreasing isotonic regression of ``y = s - w`` inside every group ``[start_i, end_i)``, up to
    a constant per group: ``v_i = min_{start_i <= j <= i} max_{i <= k < end_i} mean(y[j..k])`` (the
    min-max formula of isotonic regression), with ``mean(y[j..k]) = mean(s[j..k]) + (j + k) / 2 - end``
    from prefix sums of the centred ``s`` in float64, over chunks of rows ``j``; the columns of a
    chunk run from the last ``k`` down to its first row, so that one cumulative maximum gives
    ``max_{k >= i}``."""
    count = sorted_theta.numel()
    device = sorted_theta.device
    centred = sorted_theta - sorted_theta.mean()
    prefix = torch.cat([centred.new_zeros(1), torch.cumsum(centred, 0)])
    position = torch.arange(count, device=device)
    half_position = position.to(torch.float64) / 2
    solution = torch.empty(count, dtype=torch.float64, device=device)
    chunk = max(1, _CHUNK_ELEMENTS // max(count, 1))
    for first_row in range(0, count, chunk):
        rows = position[first_row : first_row + chunk, None]
        columns = position[first_row:].flip(0)[None]
        length = (columns - rows + 1).to(torch.float64)
        means = (prefix[columns + 1] - prefix[rows]).div_(length.clamp_(min=1))
        means += half_position[rows] + half_position[columns]
        means.masked_fill_((columns < rows) | (columns >= end[rows]), float("-inf"))
        largest_after = torch.cummax(means, 1).values
        largest_after.masked_fill_((columns < rows) | (rows < start[columns]), float("inf"))
        smallest = largest_after.amin(0).flip(0)
        solution[first_row:] = smallest if first_row == 0 else torch.minimum(solution[first_row:], smallest)
    return solution - end.to(torch.float64)
