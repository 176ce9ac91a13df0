"""Where the sets of a segmented ranking (:mod:`alrp_d2.losses.segmented_path`) lie in the flattened logits and among
the positives."""

from __future__ import annotations

import itertools
from typing import List, NamedTuple

import torch
from torch import Tensor

__all__ = ["SetLayout"]


class SetLayout(NamedTuple):
    """Where the sets lie in the flattened logits and among this worker's positives.

    Attributes:
        table: (4, S) int64, every set's entries in the flattened logits and positives of this worker, and the first
            entry and the first positive of every set.
        sizes: (2, S) float64, this worker's positives of every set, and the same at least 1 (a mean's divisor).
        set_ids: (S,) int32, 0 to S - 1.
        positive_sets: (P,) int32, the set of every positive of this worker, in the order given (set by set).
        entry_counts, entry_starts: the entries of every set and the first of them, on the host.
        widest: the largest number of positives of a set of this worker, on the host.
    """

    table: Tensor
    sizes: Tensor
    set_ids: Tensor
    positive_sets: Tensor
    entry_counts: List[int]
    entry_starts: List[int]
    widest: int

    @staticmethod
    def of(entry_counts: List[int], positive_counts: List[int], device: torch.device) -> SetLayout:
        """From the number of logits and of positives of every set (copies to the device, no synchronisation)."""
        starts = [list(itertools.accumulate(counts, initial=0))[:-1] for counts in (entry_counts, positive_counts)]
        table = torch.tensor([entry_counts, positive_counts, *starts], dtype=torch.long, device=device)
        sizes = [positive_counts, [max(count, 1) for count in positive_counts]]
        set_ids = torch.arange(len(entry_counts), dtype=torch.int32, device=device)
        return SetLayout(
            table,
            torch.tensor(sizes, dtype=torch.float64, device=device),
            set_ids,
            torch.repeat_interleave(set_ids, table[1], output_size=sum(positive_counts)),
            entry_counts,
            starts[0],
            max(positive_counts, default=0),
        )

    @property
    def num_sets(self) -> int:
        return len(self.entry_counts)
