"""Rank & Sort Loss's sorting relations of several independent rankings ("sets", :mod:`alrp_d2.losses.segmented_path`)
computed together: the positives, sorted by (set, score), are laid out as ``S`` rows of ``width`` slots (the largest
set's number of positives; a set's positives fill the first slots of its row, the others hold zeros), and every set's
``H(s_k - s_i)`` among its own positives is one ``width x width`` matrix of an ``(S, width, width)`` batch: batched
matrix products sum them, a small constant number of operations whatever the number of sets, and the work is
``S width^2`` rather than the ``P^2`` of one matrix of every positive of the step. No score of one set meets
another set's: the padded slots carry zero weights, and their rows are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
from torch import Tensor

from .dense_relations import row_blocks
from .serial_indexing import take_rows

__all__ = ["SetBlocks", "SetSortingRelations"]


@dataclass(frozen=True)
class SetBlocks:
    """Where the (P,) positives sorted by (set, score) lie in the ``(S, width)`` slots of their sets.

    Attributes:
        slots: (P,) int64, the slot ``set * width + (position - first position of the set)`` of every positive.
        num_sets, width: the rows, and the slots of a row (at least 1).
    """

    slots: Tensor
    num_sets: int
    width: int

    @staticmethod
    def of(sets: Tensor, set_starts: Tensor, width: int) -> SetBlocks:
        """``sets`` (P,) ascending, ``set_starts`` (S,) the first position of every set, ``width`` its largest
        number of positives."""
        width = max(width, 1)
        position = torch.arange(sets.numel(), device=sets.device)
        slots = torch.add(position - take_rows(set_starts, sets), sets.long(), alpha=width)
        return SetBlocks(slots, set_starts.numel(), width)

    def pad(self, values: Tensor) -> Tensor:
        """(S, width, *rest) from the (P, *rest) ``values`` of the sorted positives, zeros in the empty slots."""
        padded = values.new_zeros(self.num_sets * self.width, *values.shape[1:])
        padded.index_copy_(0, self.slots, values)
        return padded.view(self.num_sets, self.width, *values.shape[1:])

    def unpad(self, padded: Tensor) -> Tensor:
        """The (P, *rest) values of the sorted positives from the (S, width, *rest) ``padded``."""
        return take_rows(padded.flatten(0, 1), self.slots)


class SetSortingRelations:
    """The sums of :class:`alrp_d2.losses.dense_relations.DenseSortingRelations` within every set: the
    ``(S, rows, width)`` blocks of ``H(s_k - s_i)`` (rows ``i``, at most ``BLOCK_ENTRIES`` entries a block) masked
    by ``t_k < t_i``. A single block is kept from :meth:`target_split_sums` for :meth:`larger_target_source_sums`.

    Attributes:
        blocks: the sets' slots; scaled: (S, width) ``c s`` (``s`` for the unit step), padded;
        targets: (P,) float64, the sorted positives' targets; padded_targets: (S, width).
    """

    def __init__(self, blocks: SetBlocks, scores: Tensor, delta: float, targets: Tensor):
        self.blocks, self.delta, self.targets = blocks, delta, targets
        self.scaled = blocks.pad(scores if delta == 0 else scores * (0.5 / delta))
        self.padded_targets = blocks.pad(targets)
        self._kept: Optional[Tensor] = None

    def _row_blocks(self) -> Iterator[Tuple[int, int, Tensor]]:
        """``(start, end, H)`` of the rows ``[start, end)`` of every set: ``(S, end - start, width)``."""
        width = self.blocks.width
        for start, end in row_blocks(width, self.blocks.num_sets * width):
            rows = self.scaled[:, start:end, None]
            if self.delta == 0:
                yield start, end, torch.ge(self.scaled[:, None, :], rows).double()
            else:
                yield start, end, torch.sub(self.scaled[:, None, :], rows).add_(0.5).clamp_(0.0, 1.0)

    def _smaller_target_rows(self, start: int, end: int, block: Tensor) -> Tensor:
        below = self.padded_targets[:, None, :] < self.padded_targets[:, start:end, None]
        return torch.where(below, block, 0.0)

    def target_split_sums(self, weights: Tensor) -> Tuple[Tensor, Tensor]:
        """(P, K) ``sum_{k: t_k >= t_i} u_k H(s_k - s_i)`` and ``sum_{k: t_k < t_i} u_k H(s_k - s_i)`` over the
        positives ``k`` of the set of every positive ``i``, for every column ``u`` of ``weights`` (P, K)."""
        padded = self.blocks.pad(weights)
        at_least, smaller = padded.new_empty(2, *padded.shape)
        single_block = True
        for start, end, block in self._row_blocks():
            smaller_rows = self._smaller_target_rows(start, end, block)
            torch.bmm(smaller_rows, padded, out=smaller[:, start:end])
            torch.bmm(block.sub_(smaller_rows), padded, out=at_least[:, start:end])
            single_block = single_block and start == 0 and end == self.blocks.width
            self._kept = smaller_rows if single_block else None
        return self.blocks.unpad(at_least), self.blocks.unpad(smaller)

    def larger_target_source_sums(self, weights: Tensor) -> Tensor:
        """(P, K) ``sum_{i: t_i > t_k} w_i H(s_k - s_i)`` over the positives ``i`` of the set of every positive
        ``k``, for every column ``w`` of ``weights`` (P, K)."""
        padded = self.blocks.pad(weights)
        if self._kept is not None:
            return self.blocks.unpad(torch.bmm(self._kept.transpose(1, 2), padded))
        result = torch.zeros_like(padded)
        for start, end, block in self._row_blocks():
            result.baddbmm_(self._smaller_target_rows(start, end, block).transpose(1, 2), padded[:, start:end])
        return self.blocks.unpad(result)
