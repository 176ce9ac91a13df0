"""Several independent rankings ("sets", e.g. the decoder layers, denoising groups and encoder proposals of one DETR
training step) computed in one call: one flattening of all sets' logits, one sort of all positives by (set, score),
one pass over the logits and one pass of the relations among the positives, with the sets' offsets
(:mod:`alrp_d2.losses.segmented_edges`). Every set is still its own exact ranking: no score of one set is compared
with another set's, and every set gets its own losses (:class:`alrp_d2.losses.ranking_reduction.PerSet`).

The relations among the positives are every positive's row over its own set's positives on the ``dense`` path, and
those of their gaps in their own set's row and the wavelet trees over blocks of sets on the ``scan`` path
(:mod:`alrp_d2.losses.segmented_edges`): the work grows with the sets' own sizes, not with the step's number of
positives squared. The negatives find their gaps by the grid lookup on the ``scan`` path (the CPU's: one host
synchronisation) or by ``searchsorted`` on the ``dense`` one (a constant number of operations whatever the number of
sets, no host synchronisation of its own). A global ranking exchanges the numbers of positives once for all sets; the
``dense`` path's rows then read their width, the largest set's number of positives of all workers, on the host (one
host synchronisation more)."""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import torch
from torch import Tensor

from .ranking_path import PathRelations, RankingNegatives, RankingPath, RankingRequest
from .ranking_reduction import PerSet
from .segmented_edges import SegmentedEdges
from .segmented_scan import SetPositives, dense_scan, grid_scan
from .serial_indexing import take_rows
from .set_layout import SetLayout, SetSpans
from .sorted_positives import SortedPositives, gathered_columns

__all__ = ["SCANS", "SegmentedPath"]

#: The pass over the logits of every path (:func:`alrp_d2.losses.ranking_path.choose_path`).
SCANS: Dict[str, Callable[..., Tuple[RankingNegatives, Tensor]]] = {"scan": grid_scan, "dense": dense_scan}


class SegmentedPath(RankingPath):
    """The sets of ``layout`` ranked together, each on its own (module docstring); the negatives are found as
    ``path`` finds them (:mod:`alrp_d2.losses.segmented_scan`)."""

    name = "segmented"

    def __init__(self, layout: SetLayout, path: RankingPath):
        self.layout = layout
        self.scan = SCANS[path.name]
        self.batched = path.name == "dense"

    def zeros(self, zero: Tensor) -> Tensor:
        return zero.expand(self.layout.num_sets)

    def relate(self, request: RankingRequest) -> PathRelations:
        flat, positive_index, valid, delta, exchange, positive_values = request
        layout = self.layout
        scores, gathered = gathered_columns(flat, positive_index, exchange, layout.positive_sets, positive_values)
        sets = layout.positive_sets if exchange is None else gathered[0].long()
        sorted_by_score, by_score = torch.sort(scores)
        score_sets = take_rows(sets, by_score)
        sorted_sets, by_set = torch.sort(score_sets, stable=True)
        order, sorted_scores = take_rows(by_score, by_set), take_rows(sorted_by_score, by_set)
        values = gathered[-1] if exchange is not None and positive_values is not None else None
        positives = SortedPositives.ordered(positive_index, exchange, order, sorted_scores, values)
        if exchange is None:
            spans, divisor = layout.spans(), layout.sizes[1]
        else:  # the positives of every worker
            counts = scores.new_zeros(layout.num_sets).index_add_(0, sets, torch.ones_like(scores))
            spans, divisor = SetSpans.of(sorted_sets, counts), counts.clamp_min(1.0)
        edges = SegmentedEdges.of(sorted_scores, sorted_sets, spans, delta, self.batched)
        local_sets = sorted_sets if exchange is None else layout.positive_sets
        local = SetPositives(positives.flat_index, positives.local_scores(), local_sets)
        negatives, totals = self.scan(flat, valid, local, edges, layout)
        reduction = PerSet(sorted_sets, spans.counts, divisor, spans.starts, local_sets, edges.gaps_per_set)
        return PathRelations(positives, edges, negatives, totals, reduction)
