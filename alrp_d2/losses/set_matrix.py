"""The relations among the positives of several independent rankings ("sets", :mod:`alrp_d2.losses.segmented_path`)
computed together, on the ``dense`` path's plan (:mod:`alrp_d2.losses.dense_relations`): the positives are sorted by
(set, score), so that every set's are contiguous, and the row of positive ``i`` holds ``H(s_k - s_i)`` for the
positives ``k`` of its own set only: column ``j`` is the positive ``start(i) + j``, ``width`` columns (the largest
set's number of positives), those past the end of the set with a score of ``-inf`` (``H = 0``). The work is ``P
width`` rather than the ``P^2`` of one matrix of every positive of the step, and a small constant number of
operations builds and sums it whatever the number of sets: the sums over a row are row sums and batched products with
the weights gathered by column; the transposed sums scatter-add every row to its columns. No score of one set meets
another set's.
"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

import torch
from torch import Tensor

from .dense_relations import row_blocks
from .serial_indexing import take_rows

__all__ = ["SetMatrix", "SetSortingRelations"]


class SetMatrix:
    """``H(s_k - s_i)`` of every sorted positive ``i`` (rows) against the positives ``k`` of its set (columns, module
    docstring), built a block of rows at a time (at most ``BLOCK_ENTRIES`` entries; a single block is built once):
    ``clamp(c s_k - c s_i + 0.5, 0, 1)`` with ``c = 1 / (2 delta)``, ``[s_k >= s_i]`` for the unit step, as
    :class:`alrp_d2.losses.dense_relations.PositiveMatrix` builds one ranking's.

    Attributes:
        columns: (P, width) int64, the positive of every column of every row (the set's last one past its end).
        scaled: (P,) ``c s`` (``s`` for the unit step); column_scaled: (P, width) the same of every column, ``-inf``
            past the end of the row's set.
        delta: the smoothness of H.
    """

    def __init__(self, scaled: Tensor, bounds: Tensor, width: int, delta: float):
        """``scaled`` (P,) as the attribute, ``bounds`` (2, P) the first position of every positive's set and one
        past its last, ``width`` the largest number of positives of a set."""
        position = torch.add(bounds[0, :, None], torch.arange(max(width, 1), device=scaled.device))
        past_end = position >= bounds[1, :, None]
        self.columns = position.clamp_(max=max(scaled.numel() - 1, 0))
        self.column_scaled = take_rows(scaled, self.columns).masked_fill_(past_end, -torch.inf)
        self.scaled, self.delta = scaled, delta
        self._whole: Optional[Tensor] = None

    @property
    def num(self) -> int:
        return self.scaled.numel()

    def _rows(self, start: int, end: int) -> Tensor:
        rows = self.scaled[start:end, None]
        if self.delta == 0:
            return torch.ge(self.column_scaled[start:end], rows).double()
        return torch.sub(self.column_scaled[start:end], rows).add_(0.5).clamp_(0.0, 1.0)

    def blocks(self) -> Iterator[Tuple[int, int, Tensor]]:
        """``(start, end, H)`` of every block of rows ``[start, end)``: ``(end - start, width)``, not to be written."""
        for start, end in row_blocks(self.num, self.columns.shape[1]):
            if start > 0 or end < self.num:
                yield start, end, self._rows(start, end)
                continue
            if self._whole is None:
                self._whole = self._rows(start, end)
            yield start, end, self._whole

    def sums(self, weights: Optional[Tensor] = None) -> Tensor:
        """(P,) ``sum_k w_k H(s_k - s_i)`` over the positives ``k`` of the set of every positive ``i`` (``k = i``
        included), ``weights`` (P,) float64 or None (all 1)."""
        by_column = None if weights is None else take_rows(weights, self.columns)
        result = self.scaled.new_empty(self.num)
        for start, end, block in self.blocks():
            if by_column is None:
                torch.sum(block, 1, out=result[start:end])
            else:
                torch.linalg.vecdot(block, by_column[start:end], out=result[start:end])
        return result


class SetSortingRelations:
    """The sums of :class:`alrp_d2.losses.dense_relations.DenseSortingRelations` within every set: the blocks of
    ``matrix`` masked by ``t_k < t_i``. A single block's mask is kept from :meth:`target_split_sums` for
    :meth:`larger_target_source_sums`.

    Attributes:
        matrix: the sets' relations by score; targets: (P,) float64, the sorted positives' targets;
        column_targets: (P, width) those of every column.
    """

    def __init__(self, matrix: SetMatrix, targets: Tensor):
        self.matrix, self.targets = matrix, targets
        self.column_targets = take_rows(targets, matrix.columns)
        self._kept: Optional[Tensor] = None

    def _smaller_target_rows(self, start: int, end: int, block: Tensor) -> Tensor:
        return torch.where(self.column_targets[start:end] < self.targets[start:end, None], block, 0.0)

    def target_split_sums(self, weights: Tensor) -> Tuple[Tensor, Tensor]:
        """(P, K) ``sum_{k: t_k >= t_i} u_k H(s_k - s_i)`` and ``sum_{k: t_k < t_i} u_k H(s_k - s_i)`` over the
        positives ``k`` of the set of every positive ``i``, for every column ``u`` of ``weights`` (P, K)."""
        by_column = take_rows(weights, self.matrix.columns)  # (P, width, K)
        at_least, smaller = weights.new_empty(2, self.matrix.num, 1, weights.shape[1])
        single_block = True
        for start, end, block in self.matrix.blocks():
            smaller_rows = self._smaller_target_rows(start, end, block)
            torch.bmm(smaller_rows[:, None], by_column[start:end], out=smaller[start:end])
            torch.bmm(torch.sub(block, smaller_rows)[:, None], by_column[start:end], out=at_least[start:end])
            single_block = single_block and start == 0 and end == self.matrix.num
            self._kept = smaller_rows if single_block else None
        return at_least.squeeze(1), smaller.squeeze(1)

    def larger_target_source_sums(self, weights: Tensor) -> Tensor:
        """(P, K) ``sum_{i: t_i > t_k} w_i H(s_k - s_i)`` over the positives ``i`` of the set of every positive
        ``k``, for every column ``w`` of ``weights`` (P, K): every row's terms added to its columns."""
        result = torch.zeros_like(weights)
        columns = self.matrix.columns
        if self._kept is not None:
            terms = self._kept[:, :, None] * weights[:, None]
            return result.index_add_(0, columns.view(-1), terms.view(-1, weights.shape[1]))
        for start, end, block in self.matrix.blocks():
            terms = self._smaller_target_rows(start, end, block)[:, :, None] * weights[start:end, None]
            result.index_add_(0, columns[start:end].reshape(-1), terms.view(-1, weights.shape[1]))
        return result
