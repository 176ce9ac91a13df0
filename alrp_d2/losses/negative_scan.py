"""The negatives of a ranking: their gaps among the positives' band edges and the passes over the logits.

The negatives are the entries of the flat logits that are neither positive nor ignored; they stay in the logits'
dtype. They are read in chunks, each chunk once per pass with buffers allocated once per pass
(:class:`ScanWorkspace`), so that no N-sized temporary exists: one pass in the forward (the gaps and the gap totals),
one in the backward (the gradient, written once). An entry below every edge or ignored lies in gap 0, which relates
to no positive; the pass takes the positives for negatives, and their gaps and share of the gap totals are removed
after it in O(P), so that no chunk looks at the positives.

Two implementations, one per path of :mod:`alrp_d2.losses.ranking_path`:

* :class:`ScanNegatives` (``scan``, the CPU's): the grid of :mod:`alrp_d2.losses.gap_lookup`, O(1) per entry, in
  chunks of :data:`CHUNK` that each stay on one thread;
* :class:`DenseNegatives` (``dense``, an accelerator's): one ``searchsorted`` per chunk of :data:`DENSE_CHUNK`
  (O(log P) per entry, a handful of kernels per chunk, no host synchronisation).

Both keep every entry's gap for the backward pass (:attr:`gaps`: the scan's int16, or int32 from 2^15 gaps on, the
dense path's int32, as ``searchsorted`` writes and ``index_select`` reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .band_edges import BandEdges
from .dense_relations import DenseEdges
from .gap_lookup import LookupBuffers
from .serial_indexing import take_rows

__all__ = ["CHUNK", "DENSE_CHUNK", "DenseNegatives", "ScanNegatives", "ScanWorkspace"]

#: Entries of the logits read at once by the scan: PyTorch runs an operation on one thread below 2^15 elements, so
#: that each chunk's operations wait for no other thread, on buffers that stay in the core's cache (about 1.3 MB).
CHUNK = 1 << 15
#: Entries read at once by the dense path (fewer launches; about 30 MB of temporaries).
DENSE_CHUNK = 1 << 20


def chunks(total: int, size: int) -> Iterator[Tuple[int, int]]:
    """``[start, end)`` of every chunk of ``size`` (the last one shorter)."""
    for start in range(0, total, size):
        yield start, min(start + size, total)


def gap_storage(total: int, num_gaps: int, device: torch.device) -> Tensor:
    """(total,) int16 (int32 from 2^15 gaps on): every entry's gap."""
    return torch.empty(total, dtype=torch.int16 if num_gaps < 1 << 15 else torch.int32, device=device)


class ScanWorkspace(NamedTuple):
    """The buffers of one scan, one entry per logit of a chunk: allocated once per pass, cut to each chunk with
    :meth:`first`.

    Attributes:
        values: compute dtype, the chunk as the lookup compares it (ignored entries -inf).
        lookup: the gap lookup's buffers (its ``position`` holds the gaps found).
        scatter_index: int64, the gaps as scatter indices.
        ones: float64, all 1 (the counts); shifted: float64, the chunk minus the offset (the score sums).
    """

    values: Tensor
    lookup: LookupBuffers
    scatter_index: Tensor
    ones: Tensor
    shifted: Tensor

    @staticmethod
    def allocate(size: int, compute: torch.dtype, device: torch.device) -> ScanWorkspace:
        ones, shifted = torch.ones(2, size, dtype=torch.float64, device=device)
        return ScanWorkspace(
            torch.empty(size, dtype=compute, device=device),
            LookupBuffers.allocate(size, compute, device),
            torch.empty(size, dtype=torch.long, device=device),
            ones,
            shifted,
        )

    def first(self, count: int) -> ScanWorkspace:
        """The buffers of the first ``count`` entries (views)."""
        return ScanWorkspace(
            self.values[:count],
            self.lookup.first(count),
            self.scatter_index[:count],
            self.ones[:count],
            self.shifted[:count],
        )


def ranked_values(logits: Tensor, valid: Optional[Tensor], below_every_edge: Tensor, buffer: Tensor) -> Tensor:
    """The ``logits`` as the gap lookup compares them: in ``buffer``'s dtype, the ignored entries (``valid``
    False) ``below_every_edge`` (0-d, -inf); the logits themselves where nothing changes, else written to
    ``buffer``."""
    if logits.dtype != buffer.dtype:
        logits = buffer.copy_(logits)
    if valid is None:
        return logits
    return torch.where(valid, logits, below_every_edge, out=buffer)


def _remove_positives(gaps: Tensor, totals: Tensor, positive_index: Tensor) -> None:
    """Gives the positives gap 0 in ``gaps``; gap 0 (below every edge, -inf included) relates to no positive: its
    (2, num_gaps) ``totals`` are set to 0 (the positives' share of the other gaps is removed by the caller)."""
    gaps.index_fill_(0, positive_index, 0)
    totals[:, 0] = 0.0


@dataclass(frozen=True)
class ScanNegatives:
    """The negatives found by the grid lookup (module docstring).

    Attributes:
        logits: (M,) the flat logits (detached, their dtype).
        offset: 0-d float64, subtracted from the logits to put them on the positives' scale.
        gaps: (M,) the gap of every entry, 0 for the positives and the ignored entries.
    """

    logits: Tensor
    offset: Tensor
    gaps: Tensor

    @staticmethod
    def scan(
        logits: Tensor, valid: Optional[Tensor], positive_index: Tensor, offset: Tensor, edges: BandEdges
    ) -> Tuple[ScanNegatives, Tensor]:
        """Finds the gaps of the (M,) flat ``logits`` and the negatives' gap totals ((2, num_gaps) float64:
        every gap's count and sum of shifted logits) in one pass; ``valid``: None or (M,) bool, False for
        the ignored entries; ``positive_index``: the flat indices of the positives."""
        lookup = edges.lookup(offset, logits.dtype)
        device, total = logits.device, logits.numel()
        size = min(total, CHUNK)
        workspace = ScanWorkspace.allocate(size, lookup.edges.dtype, device)
        gaps = gap_storage(total, edges.num_gaps, device)
        totals = torch.zeros(2, edges.num_gaps, dtype=torch.float64, device=device)
        below_every_edge = torch.full((), -torch.inf, dtype=lookup.edges.dtype, device=device)
        for start, end in chunks(total, size):
            buffers = workspace.first(end - start)
            chunk_valid = None if valid is None else valid[start:end]
            chunk = ranked_values(logits[start:end], chunk_valid, below_every_edge, buffers.values)
            chunk_gaps = lookup.gaps(chunk, buffers.lookup)
            gaps[start:end] = chunk_gaps
            chunk_index = buffers.scatter_index.copy_(chunk_gaps)
            totals[0].scatter_add_(0, chunk_index, buffers.ones)
            totals[1].scatter_add_(0, chunk_index, buffers.shifted.copy_(chunk).sub_(offset))
        positives = ScanWorkspace.allocate(positive_index.numel(), lookup.edges.dtype, device)
        positive_values = ranked_values(
            take_rows(logits, positive_index),
            None if valid is None else take_rows(valid, positive_index),
            below_every_edge,
            positives.values,
        )
        positive_gaps = lookup.gaps(positive_values, positives.lookup).long()
        totals -= edges.gap_totals(positive_values.double() - offset, positive_gaps)
        _remove_positives(gaps, totals, positive_index)
        return ScanNegatives(logits, offset, gaps), totals

    def relation_sums(self, coefficients: Tensor, dtype: torch.dtype) -> Tensor:
        """(M,) in ``dtype``: ``A[gap] + B[gap] (v - offset)`` of every negative ``v`` from the (2, num_gaps)
        ``coefficients`` (rows ``A``, ``B``; ``A`` alone for the unit step; 0 in gap 0), 0 for the other entries
        (one pass)."""
        intercept, slope = coefficients[0], coefficients[1] if len(coefficients) > 1 else None
        if slope is not None:
            intercept = intercept - slope * self.offset  # A + B (v - offset) = (A - B offset) + B v
        total = self.logits.numel()
        size = min(total, CHUNK)
        device = self.logits.device
        index = torch.empty(size, dtype=torch.int32, device=device)
        sums, coefficient = torch.empty(2, size, dtype=torch.float64, device=device)
        result = torch.empty(total, dtype=dtype, device=device)
        for start, end in chunks(total, size):
            n = end - start
            chunk_index = index[:n].copy_(self.gaps[start:end])
            torch.index_select(intercept, 0, chunk_index, out=sums[:n])
            if slope is not None:
                torch.index_select(slope, 0, chunk_index, out=coefficient[:n])
                sums[:n].addcmul_(coefficient[:n], self.logits[start:end])
            result[start:end] = sums[:n]
        return result


@dataclass(frozen=True)
class DenseNegatives:
    """The negatives found by ``searchsorted`` among the float64 band edges (module docstring): the logits are
    compared in float64 as they are (the dense path does not shift the scores).

    Attributes:
        logits: (M,) the flat logits (detached, their dtype).
        gaps: (M,) the gap of every entry, 0 for the positives and the ignored entries.
        chunk: the entries of a chunk of the backward pass.
    """

    logits: Tensor
    gaps: Tensor
    chunk: int

    @staticmethod
    def scan(
        logits: Tensor, valid: Optional[Tensor], positive_index: Tensor, positive_scores: Tensor, edges: DenseEdges
    ) -> Tuple[DenseNegatives, Tensor]:
        """As :meth:`ScanNegatives.scan`: the gaps and the (2, num_gaps) gap totals (count and sum of the
        logits) in one pass; ``positive_scores``: the float64 logits of the positives of ``positive_index``."""
        device, total = logits.device, logits.numel()
        size = min(total, DENSE_CHUNK)
        gaps = torch.empty(total, dtype=torch.int32, device=device)  # written by the search, read as it is
        totals = torch.zeros(2, edges.num_gaps, dtype=torch.float64, device=device)
        ones = torch.ones(max(size, positive_index.numel()), dtype=torch.float64, device=device)
        below_every_edge = torch.full((), -torch.inf, dtype=torch.float64, device=device)
        for start, end in chunks(total, size):
            values = logits[start:end].double()  # the logits themselves when they are float64: not written
            if valid is not None:
                values = torch.where(valid[start:end], values, below_every_edge)
            chunk_gaps = edges.locate(values, out=gaps[start:end])
            totals[0].index_add_(0, chunk_gaps, ones[: end - start])
            totals[1].index_add_(0, chunk_gaps, values)
        if valid is not None:
            positive_scores = torch.where(take_rows(valid, positive_index), positive_scores, below_every_edge)
        positive_gaps = edges.locate(positive_scores)
        totals[0].index_add_(0, positive_gaps, ones[: positive_index.numel()], alpha=-1)
        totals[1].index_add_(0, positive_gaps, positive_scores, alpha=-1)
        _remove_positives(gaps, totals, positive_index)
        return DenseNegatives(logits, gaps, DENSE_CHUNK), totals

    def relation_sums(self, coefficients: Tensor, dtype: torch.dtype) -> Tensor:
        """As :meth:`ScanNegatives.relation_sums` (with no offset): one gather of the coefficients and one
        fused multiply-add per chunk."""
        total = self.logits.numel()
        result = torch.empty(total, dtype=dtype, device=self.logits.device)
        for start, end in chunks(total, min(total, self.chunk)):
            rows = torch.index_select(coefficients, 1, self.gaps[start:end])
            if len(rows) == 1:
                result[start:end] = rows[0]
            else:
                torch.addcmul(rows[0], rows[1], self.logits[start:end], out=result[start:end])
        return result
