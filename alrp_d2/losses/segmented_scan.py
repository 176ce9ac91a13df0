"""The passes over the logits of the segmented ranking (:mod:`alrp_d2.losses.segmented_path`): every entry's gap in
the row of its set (:class:`alrp_d2.losses.segmented_edges.SegmentedEdges`) and the gap totals, forward; the gradient
is written by :meth:`alrp_d2.losses.negative_scan.DenseNegatives.relation_sums`, backward. One per path:

* :func:`grid_scan` (``scan``, the CPU's): the grid lookup of :mod:`alrp_d2.losses.gap_lookup` among the edges of all
  sets (one host synchronisation), in chunks of :data:`alrp_d2.losses.negative_scan.CHUNK` within each set;
* :func:`dense_scan` (``dense``): one ``searchsorted`` per chunk of :data:`SET_CHUNK` (a DETR step's sets in one),
  a constant number of operations whatever the number of sets.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .gap_lookup import GapLookup
from .negative_scan import CHUNK, DenseNegatives, ScanNegatives, ScanWorkspace, chunks, ranked_values
from .segmented_edges import SegmentedEdges
from .serial_indexing import take_rows
from .set_layout import SetLayout

__all__ = ["SET_CHUNK", "SetPositives", "dense_scan", "grid_scan"]

#: Entries of the logits read at once by :func:`dense_scan`: a DETR step's sets (13 x 4 x 300 x 80 logits) in one.
SET_CHUNK = 1 << 22


class SetPositives(NamedTuple):
    """This worker's positives: their flat indices, their float64 scores and their sets."""

    flat_index: Tensor
    scores: Tensor
    sets: Tensor


def _remove_positives(
    gaps: Tensor, totals: Tensor, positives: SetPositives, edges: SegmentedEdges, ones: Tensor
) -> None:
    """Takes the positives out of the (2, num_gaps) ``totals`` and gives them gap 0 in ``gaps``; every set's gap below
    its edges (the ignored entries, -inf) relates to no positive: its totals are set to 0."""
    positive_gaps = edges.locate(positives.scores, positives.sets)
    totals[0].index_add_(0, positive_gaps, ones, alpha=-1)
    totals[1].index_add_(0, positive_gaps, positives.scores, alpha=-1)
    gaps.index_fill_(0, positives.flat_index, 0)
    totals.view(2, edges.spans.starts.numel(), -1)[:, :, 0] = 0.0


def grid_scan(
    flat: Tensor, valid: Optional[Tensor], positives: SetPositives, edges: SegmentedEdges, layout: SetLayout
) -> Tuple[ScanNegatives, Tensor]:
    """As :func:`dense_scan`, the gaps found by the grid lookup, in chunks that each stay on one thread (and so
    the gradient's pass, :meth:`alrp_d2.losses.negative_scan.ScanNegatives.relation_sums` with no offset)."""
    no_offset = edges.edges.new_zeros(())
    lookup = GapLookup.build(edges.edges, no_offset, flat.dtype, inclusive=edges.unit_step)
    device, total = flat.device, flat.numel()
    workspace = ScanWorkspace.allocate(min(total, CHUNK), lookup.edges.dtype, device)
    gaps = torch.empty(total, dtype=torch.int32, device=device)
    totals = torch.zeros(2, edges.num_gaps, dtype=torch.float64, device=device)
    below_every_edge = torch.full((), -torch.inf, dtype=lookup.edges.dtype, device=device)
    for index, (first, count) in enumerate(zip(layout.entry_starts, layout.entry_counts)):
        for start, end in chunks(count, CHUNK):
            start, end = first + start, first + end
            buffers = workspace.first(end - start)
            chunk_valid = None if valid is None else valid[start:end]
            chunk = ranked_values(flat[start:end], chunk_valid, below_every_edge, buffers.values)
            found = lookup.gaps(chunk, buffers.lookup)
            chunk_gaps = buffers.scatter_index.copy_(found).add_(index * edges.gaps_per_set)
            gaps[start:end] = chunk_gaps
            totals[0].scatter_add_(0, chunk_gaps, buffers.ones)
            totals[1].scatter_add_(0, chunk_gaps, buffers.shifted.copy_(chunk))
    scores = positives.scores
    if valid is not None:
        scores = torch.where(take_rows(valid, positives.flat_index), scores, below_every_edge.double())
    _remove_positives(gaps, totals, positives._replace(scores=scores), edges, torch.ones_like(scores))
    return ScanNegatives(flat, no_offset, gaps), totals


def dense_scan(
    flat: Tensor, valid: Optional[Tensor], positives: SetPositives, edges: SegmentedEdges, layout: SetLayout
) -> Tuple[DenseNegatives, Tensor]:
    """As :meth:`alrp_d2.losses.negative_scan.DenseNegatives.scan` for the (M,) logits of all sets one after the
    other: every entry's gap (one ``searchsorted`` per chunk of :data:`SET_CHUNK`) and the (2, num_gaps) gap
    totals, with the positives and every set's gap below its edges (the ignored entries) removed."""
    positive_index, positive_scores, positive_sets = positives
    entry_sets = torch.repeat_interleave(layout.set_ids, layout.table[0], output_size=flat.numel())
    device, total = flat.device, flat.numel()
    size = min(total, SET_CHUNK)
    gaps = torch.empty(total, dtype=torch.int32, device=device)
    totals = torch.zeros(2, edges.num_gaps, dtype=torch.float64, device=device)
    ones = torch.ones(max(size, positive_index.numel()), dtype=torch.float64, device=device)
    if valid is not None:
        below_every_edge = torch.full((), -torch.inf, dtype=torch.float64, device=device)
        positive_scores = torch.where(take_rows(valid, positive_index), positive_scores, below_every_edge)
        positives = positives._replace(scores=positive_scores)
    for start, end in chunks(total, size):
        values = flat[start:end].double()
        if valid is not None:
            values = torch.where(valid[start:end], values, below_every_edge)
        chunk_gaps = edges.locate(values, entry_sets[start:end], out=gaps[start:end])
        totals[0].index_add_(0, chunk_gaps, ones[: end - start])
        totals[1].index_add_(0, chunk_gaps, values)
    _remove_positives(gaps, totals, positives, edges, ones[: positive_index.numel()])
    return DenseNegatives(flat, gaps, SET_CHUNK), totals
