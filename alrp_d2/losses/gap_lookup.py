"""Every value's position among sorted edges, exactly, in O(1) per value: a uniform grid over the
edges' range and a bounded search inside one cell.

For ascending edges ``e_0 <= ... <= e_{D-1}`` and a value ``v``, the *gap* of ``v`` is the number of
edges below it, ``#{d: e_d < v}`` (``#{d: e_d <= v}`` when ``inclusive``). The grid cuts the edges'
range into ``G`` equal cells,

    cell(x) = trunc(min(max((x - e_0) * scale, 0), G - 1)),    scale = G / (e_{D-1} - e_0),

computed by the same floating-point operations for the edges and for the values (each rounded as
IEEE prescribes, so both get the same function). ``cell`` does not decrease with ``x``: an edge in an
earlier cell than ``v`` lies below ``v``, one in a later cell above it, and

    gap(v) = first[cell(v)] + #{edges of cell(v) below v},

where ``first[c]`` counts the edges of the cells before ``c``. The edges of a cell are a window of at
most ``K`` (the fullest cell) sorted entries starting at ``first[c]``, followed by the later cells'
edges (above ``v``) and NaN padding (no comparison with it holds): a branch-free binary search of the window takes
``ceil(log2(K + 1))`` steps of one gather and one comparison per value. Building the grid sorts
nothing: ``O(D + G)``; looking up ``N`` values: ``O(N log K)`` with ``K`` small unless many edges
crowd into one cell (``G`` is a multiple of ``D``). No value is approximated: rounding can only move a
value into a neighbouring cell, and the edges move with it. One host synchronisation reads ``K``
(the number of search steps).

Values in a dtype other than float64 are compared with the float64 edges rounded to that dtype, down
(up when ``inclusive``), so that ``e < v`` (``e <= v``) in that dtype holds exactly when it holds in
float64; a NaN value lands in cell 0, an infinite one in the first or last cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["GapLookup", "LookupBuffers", "round_to_dtype"]

#: Grid cells per edge: more cells hold fewer edges each (fewer search steps), in a table of 4 bytes per cell.
CELLS_PER_EDGE = 16


def round_to_dtype(values: Tensor, dtype: torch.dtype, up: bool) -> Tensor:
    """The float64 ``values`` rounded to ``dtype``, down (``up``: up), so that comparing a value of that
    dtype with them gives the float64 comparison (``v > rounded`` iff ``v > value`` when rounded down)."""
    rounded = values.to(dtype)
    if up:
        return torch.where(rounded.double() < values, torch.nextafter(rounded, rounded.new_tensor(torch.inf)), rounded)
    return torch.where(rounded.double() > values, torch.nextafter(rounded, rounded.new_tensor(-torch.inf)), rounded)


class LookupBuffers(NamedTuple):
    """The workspace of one lookup, one entry per value: allocated once for the largest chunk and cut to each
    chunk's length with :meth:`first`, so that a pass over the logits allocates nothing per chunk.

    Attributes:
        position: compute dtype, the gaps found (whole numbers).
        scratch: compute dtype, overwritten.
        cells: int32, the cells, then the search's gather positions.
    """

    position: Tensor
    scratch: Tensor
    cells: Tensor

    @staticmethod
    def allocate(size: int, compute: torch.dtype, device: torch.device) -> LookupBuffers:
        position, scratch = torch.empty(2, size, dtype=compute, device=device)
        return LookupBuffers(position, scratch, torch.empty(size, dtype=torch.int32, device=device))

    def first(self, count: int) -> LookupBuffers:
        """The buffers of the first ``count`` values (views)."""
        return LookupBuffers(self.position[:count], self.scratch[:count], self.cells[:count])


@dataclass(frozen=True)
class GapLookup:
    """The grid of one set of edges for values of one dtype (module docstring).

    Attributes:
        lower: 0-d, the smallest edge; ``scale``: 0-d, cells per unit (both in the compute dtype,
            float32 or float64, that of ``edges``).
        first: (G,) the number of edges in the cells before each cell, in the compute dtype (whole numbers,
            exact below 2^24 edges in float32).
        edges: the rounded edges in the compute dtype followed by NaN (at least a window past the last).
        steps: the binary search's steps, ``ceil(log2(K + 1))``.
        inclusive: the gap counts the edges equal to a value.
    """

    lower: Tensor
    scale: Tensor
    first: Tensor
    edges: Tensor
    steps: int
    inclusive: bool

    @staticmethod
    def build(edges: Tensor, offset: Tensor, dtype: torch.dtype, inclusive: bool) -> GapLookup:
        """``edges``: (E,) float64 ascending, ``+inf`` after the last real edge (at least one real edge);
        ``offset``: a 0-d float64 added to them; ``dtype``: the values' dtype."""
        compute = torch.promote_types(dtype, torch.float32)
        shifted = edges + offset
        rounded = (shifted if dtype == torch.float64 else round_to_dtype(shifted, dtype, inclusive)).to(compute)
        real = ~torch.isinf(edges)
        real[0] = True
        lower = rounded[0]
        upper = torch.where(real, rounded, lower).amax()
        num_cells = CELLS_PER_EDGE * len(edges)
        width = (upper - lower).double()
        scale = torch.where(width > 0, num_cells / width, 0.0).to(compute)
        unsearched = GapLookup(lower, scale, edges.new_zeros(num_cells, dtype=torch.int32), rounded, 0, inclusive)
        buffers = LookupBuffers.allocate(len(edges), compute, edges.device)
        # Padding goes past the last cell, so that no cell counts it.
        edge_cells = torch.where(real, unsearched.cells(rounded, buffers), num_cells)
        first = torch.searchsorted(edge_cells, torch.arange(num_cells + 1, device=edges.device))
        fullest = int((first[1:] - first[:-1]).max())  # the one host synchronisation
        steps = max(fullest, 1).bit_length()
        # NaN padding: no comparison with it holds, not even with an infinite value.
        padded = torch.cat([torch.where(real, rounded, torch.nan), rounded.new_full(((1 << steps),), torch.nan)])
        return GapLookup(lower, scale, first[:-1].to(compute), padded, steps, inclusive)

    @property
    def num_cells(self) -> int:
        return self.first.numel()

    def cells(self, values: Tensor, buffers: LookupBuffers) -> Tensor:
        """cell(x) of every value (compute dtype), written to ``buffers.cells`` (``buffers.scratch`` is
        overwritten); a NaN goes to cell 0."""
        scratch = torch.sub(values, self.lower, out=buffers.scratch)
        scratch.mul_(self.scale).clamp_(0, self.num_cells - 1)
        return buffers.cells.copy_(scratch).clamp_(0, self.num_cells - 1)  # a NaN becomes a number out of range

    def gaps(self, values: Tensor, buffers: LookupBuffers) -> Tensor:
        """The gap of every value (compute dtype), written to ``buffers.position`` (compute dtype, whole numbers;
        the buffers hold one entry per value).

        The search runs on floating-point positions (exact: the edges are fewer than 2^24) and
        comparisons written as 0 or 1 in place, which need no conversion of a bool tensor."""
        out, scratch, index = buffers
        torch.index_select(self.first, 0, self.cells(values, buffers), out=out)
        for level in reversed(range(self.steps)):
            # The window [out, out + 2 half - 1) keeps its upper half where its middle edge is below the value.
            half = 1 << level
            torch.index_select(self.edges[half - 1 :], 0, index.copy_(out), out=scratch)
            below = scratch.le_(values) if self.inclusive else scratch.lt_(values)
            out.add_(below, alpha=half)
        return out
