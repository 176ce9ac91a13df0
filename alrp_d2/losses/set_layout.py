"""Where the sets of a segmented ranking (:mod:`alrp_d2.losses.segmented_path`) lie in the flattened logits and among
the positives."""

from __future__ import annotations

import itertools
from typing import List, NamedTuple, Optional

import torch
from torch import Tensor

__all__ = ["SetLayout", "SetSpans"]


class SetSpans(NamedTuple):
    """Where every set's positives lie among the positives sorted by (set, score) (of every worker in a global
    ranking).

    Attributes:
        starts: (S,) int64, the first position of every set; counts: (S,) float64, its number of positives.
        bounds: (2, P) int64, the first position of every positive's set and one past its last.
        edge_groups: (2P,) int64, ``set`` of every positive then ``S + set`` of every positive (the groups of its
            lower and upper band edges, :class:`alrp_d2.losses.segmented_edges.SegmentedEdges`).
        widest: the largest number of positives of a set, on the host; None where it is not known there.
    """

    starts: Tensor
    counts: Tensor
    bounds: Tensor
    edge_groups: Tensor
    widest: Optional[int]

    @staticmethod
    def of(sets: Tensor, counts: Tensor) -> SetSpans:
        """From the (P,) ascending ``sets`` of the sorted positives and the (S,) float64 ``counts``; ``widest`` is
        not known on the host."""
        ends = torch.cumsum(counts, 0).long()
        starts = ends - counts.long()
        bounds = torch.index_select(torch.stack([starts, ends]), 1, sets)
        return SetSpans(starts, counts, bounds, torch.cat([sets, sets + counts.numel()]).long(), None)

    def width(self) -> int:
        """:attr:`widest`, read from :attr:`counts` (one host synchronisation) where it is not known on the host."""
        return int(self.counts.max()) if self.widest is None else self.widest


class SetLayout(NamedTuple):
    """Where the sets lie in the flattened logits and among this worker's positives.

    Attributes:
        table: (7, S) int64, every set's entries in the flattened logits and positives of this worker, the first
            entry and the first positive of every set, one past its last positive, and ``s`` and ``S + s`` of set
            ``s``.
        sizes: (2, S) float64, this worker's positives of every set, and the same at least 1 (a mean's divisor).
        set_ids: (S,) int32, 0 to S - 1.
        positive_rows: (5, P) int64, the rows 2 to 6 of ``table`` of the set of every positive of this worker, in
            the order given (set by set).
        entry_counts, entry_starts: the entries of every set and the first of them, on the host.
        widest: the largest number of positives of a set of this worker, on the host.
    """

    table: Tensor
    sizes: Tensor
    set_ids: Tensor
    positive_rows: Tensor
    entry_counts: List[int]
    entry_starts: List[int]
    widest: int

    @staticmethod
    def of(entry_counts: List[int], positive_counts: List[int], device: torch.device) -> SetLayout:
        """From the number of logits and of positives of every set (copies to the device, no synchronisation)."""
        starts = [list(itertools.accumulate(counts, initial=0))[:-1] for counts in (entry_counts, positive_counts)]
        ends = list(itertools.accumulate(positive_counts))
        groups = [list(range(len(entry_counts))), list(range(len(entry_counts), 2 * len(entry_counts)))]
        rows = [entry_counts, positive_counts, *starts, ends, *groups]
        table = torch.tensor(rows, dtype=torch.long, device=device)
        sizes = [positive_counts, [max(count, 1) for count in positive_counts]]
        set_ids = torch.arange(len(entry_counts), dtype=torch.int32, device=device)
        return SetLayout(
            table,
            torch.tensor(sizes, dtype=torch.float64, device=device),
            set_ids,
            torch.repeat_interleave(table[2:], table[1], dim=1, output_size=sum(positive_counts)),
            entry_counts,
            starts[0],
            max(positive_counts, default=0),
        )

    @property
    def num_sets(self) -> int:
        return len(self.entry_counts)

    @property
    def positive_sets(self) -> Tensor:
        """(P,) int64, the set of every positive of this worker, in the order given (set by set)."""
        return self.positive_rows[3]

    def spans(self) -> SetSpans:
        """The :class:`SetSpans` of this worker's positives (given set by set, so sorted by (set, score) too)."""
        return SetSpans(
            self.table[3], self.sizes[0], self.positive_rows[1:3], self.positive_rows[3:].view(-1), self.widest
        )
