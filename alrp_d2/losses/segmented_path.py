"""Several independent rankings ("sets", e.g. the decoder layers, denoising groups and encoder proposals of one DETR
training step) computed in one call: one flattening of all sets' logits, one sort of all positives by (set, score),
one pass over the logits and one pass of the relations among the positives, with the sets' offsets
(:mod:`alrp_d2.losses.segmented_edges`). Every set is still its own exact ranking: no score of one set is compared
with another set's, and every set gets its own losses (:class:`alrp_d2.losses.ranking_reduction.PerSet`).

It takes the ``dense`` path's plan on every device (a constant number of operations whatever the number of sets, no
host synchronisation of its own); a global ranking exchanges the numbers of positives once for all sets."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, List, NamedTuple

import torch
from torch import Tensor

from .ranking_path import PathRelations, RankingPath, RankingRequest
from .ranking_reduction import PerSet
from .segmented_edges import SegmentedEdges, scan_sets
from .serial_indexing import take_rows
from .sorted_positives import SortedPositives, gathered_columns

if TYPE_CHECKING:
    pass

__all__ = ["SegmentedPath", "SetLayout"]


class SetLayout(NamedTuple):
    """Where the sets lie in the flattened logits and among this worker's positives.

    Attributes:
        starts: (2, S) int64, the first entry of every set in the flattened logits and the first of its positives
            among this worker's.
        sizes: (2, S) float64, this worker's positives of every set, and the same at least 1 (a mean's divisor).
        entry_sets: (M,) int32, the set of every entry of the flattened logits.
        positive_sets: (P,) int32, the set of every positive of this worker, in the order given (set by set).
    """

    starts: Tensor
    sizes: Tensor
    entry_sets: Tensor
    positive_sets: Tensor

    @staticmethod
    def of(entry_counts: List[int], positive_counts: List[int], device: torch.device) -> SetLayout:
        """From the number of logits and of positives of every set (copies to the device, no synchronisation)."""
        starts = [list(itertools.accumulate(counts, initial=0))[:-1] for counts in (entry_counts, positive_counts)]
        table = torch.tensor([entry_counts, positive_counts, *starts], dtype=torch.long, device=device)
        sizes = [positive_counts, [max(count, 1) for count in positive_counts]]
        set_ids = torch.arange(len(entry_counts), dtype=torch.int32, device=device)
        return SetLayout(
            table[2:],
            torch.tensor(sizes, dtype=torch.float64, device=device),
            torch.repeat_interleave(set_ids, table[0], output_size=sum(entry_counts)),
            torch.repeat_interleave(set_ids, table[1], output_size=sum(positive_counts)),
        )

    @property
    def num_sets(self) -> int:
        return self.starts.shape[1]


class SegmentedPath(RankingPath):
    """The sets of ``layout`` ranked together, each on its own (module docstring)."""

    name = "segmented"

    def __init__(self, layout: SetLayout):
        self.layout = layout

    def zeros(self, zero: Tensor) -> Tensor:
        return zero.expand(self.layout.num_sets)

    def relate(self, request: RankingRequest) -> PathRelations:
        flat, positive_index, valid, delta, exchange, positive_values = request
        layout = self.layout
        scores, gathered = gathered_columns(flat, positive_index, exchange, layout.positive_sets, positive_values)
        sets = layout.positive_sets if exchange is None else gathered[0].int()
        sorted_by_score, by_score = torch.sort(scores)
        score_sets = take_rows(sets, by_score)
        sorted_sets, by_set = torch.sort(score_sets, stable=True)
        order, sorted_scores = take_rows(by_score, by_set), take_rows(sorted_by_score, by_set)
        values = gathered[-1] if exchange is not None and positive_values is not None else None
        positives = SortedPositives.ordered(positive_index, exchange, order, sorted_scores, values)
        if exchange is None:
            starts, counts, divisor = layout.starts[1], *layout.sizes
        else:  # the positives of every worker
            counts = scores.new_zeros(layout.num_sets).index_add_(0, sets, torch.ones_like(scores))
            starts = (torch.cumsum(counts, 0) - counts).long()
            divisor = counts.clamp_min(1.0)
        edges = SegmentedEdges.of(sorted_scores, sorted_sets, starts, delta)
        local_sets = sorted_sets if exchange is None else layout.positive_sets
        negatives, totals = scan_sets(
            flat, valid, positives.flat_index, positives.local_scores(), local_sets, edges, layout.entry_sets
        )
        reduction = PerSet(sorted_sets, counts, divisor, starts, local_sets, edges.gaps_per_set)
        return PathRelations(positives, edges, negatives, totals, reduction)
