"""The relation sums of :mod:`alrp_d2.losses.relation_sums` as an accelerator computes them: a small constant
number of operations per call, each over many entries (the ``dense`` path of :mod:`alrp_d2.losses.ranking_path`).

* Among the positives, ``sum_k w_k H(q_k - q_i)`` is a product of the P x P matrix of ``H(q_k - q_i)`` (rows ``i``,
  columns ``k``) with the weights: two elementwise operations build a block of rows of the matrix, one matrix
  product sums it. Blocks hold at most :data:`BLOCK_ENTRIES` entries, so that the matrix of up to 4,096 positives is
  one block (128 MiB of float64) and larger sets are several.
* Against the negatives, the gaps among the band edges ``q_i -/+ delta`` are found by ``searchsorted``
  (:class:`alrp_d2.losses.negative_scan.DenseNegatives`) among the 2P sorted edges, ties kept (a gap between
  equal edges holds nothing). A source in gap ``g`` lies between the edges ``e[g-1]`` and ``e[g]``, and both sets
  of :mod:`alrp_d2.losses.relation_sums` follow from the gap's lower edge by one more ``searchsorted`` each way:

  - the sources above positive ``i`` are those of the gaps from ``1 + #{e < q_i + delta}`` on, those in its band
    the gaps from ``1 + #{e < q_i - delta}`` up to there (one search of the 2P edges among themselves), so that a
    cumulative sum of the gap totals gives ``sum_j u_j H(v_j - q_i)``;
  - the positives below a source of gap ``g`` are ``[0, #{i: q_i + delta <= e[g-1]})`` and those with it in their
    band extend to ``#{i: q_i - delta <= e[g-1]}``, so that prefix sums of the weights give the coefficients
    ``A[g] + B[g] v``.

  For the unit step (``delta = 0``) the gaps count the edges at or below a value and the same searches hold with an
  empty band. Every comparison is between the same float64 numbers as on the ``scan`` path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["BLOCK_ENTRIES", "DenseEdges", "DenseSortingRelations", "PositiveMatrix"]

#: Entries of one block of rows of a P x P relation matrix (float64: 128 MiB).
BLOCK_ENTRIES = 1 << 24


def row_blocks(num_rows: int, num_columns: int) -> Iterator[Tuple[int, int]]:
    """``[start, end)`` of the blocks of rows of a ``num_rows x num_columns`` matrix, each of at most
    :data:`BLOCK_ENTRIES` entries (at least one row)."""
    size = max(1, BLOCK_ENTRIES // max(num_columns, 1))
    for start in range(0, num_rows, size):
        yield start, min(start + size, num_rows)


@dataclass(frozen=True)
class PositiveMatrix:
    """``H(q_k - q_i)`` among the (P,) ascending float64 positive scores ``q``, built a block of rows at a time:
    ``clamp(c q_k - c q_i + 0.5, 0, 1)`` with ``c = 1 / (2 delta)`` from the (P,) vector ``scaled = c q`` (exactly
    0.5 for ``k = i`` and for tied scores), ``[q_k >= q_i]`` for the unit step (``scaled = q``)."""

    scores: Tensor
    delta: float
    scaled: Tensor

    @staticmethod
    def of(scores: Tensor, delta: float) -> PositiveMatrix:
        return PositiveMatrix(scores, delta, scores if delta == 0 else scores * (0.5 / delta))

    @property
    def num(self) -> int:
        return self.scores.numel()

    def rows(self, start: int, end: int) -> Tensor:
        """(end - start, P) float64: ``[i - start, k] = H(q_k - q_i)`` for the rows ``i`` in ``[start, end)``."""
        if self.delta == 0:
            return torch.ge(self.scaled[None, :], self.scaled[start:end, None]).double()
        return torch.sub(self.scaled[None, :], self.scaled[start:end, None]).add_(0.5).clamp_(0.0, 1.0)

    def blocks(self) -> Iterator[Tuple[int, int, Tensor]]:
        """``(start, end, rows(start, end))`` of every block of rows."""
        for start, end in row_blocks(self.num, self.num):
            yield start, end, self.rows(start, end)

    def sums(self, weights: Optional[Tensor] = None) -> Tensor:
        """(P,) ``sum_k w_k H(q_k - q_i)`` for every ``i`` (``k = i`` included), ``weights`` (P,) float64 or None
        (all 1)."""
        result = self.scores.new_empty(self.num)
        for start, end, block in self.blocks():
            if weights is None:
                torch.sum(block, 1, out=result[start:end])
            else:
                torch.mv(block, weights, out=result[start:end])
        return result


@functools.lru_cache(maxsize=16)
def band_mixing(delta: float, device: torch.device) -> Tensor:
    """(2, 4) float64: the coefficients ``A``, ``B`` from the prefix sums of ``w`` and ``w q`` at the ends of a gap's
    band and above part, ``A = (W_band + W_above) / 2 - (Q_band - Q_above) / (2 delta)`` and
    ``B = (W_band - W_above) / (2 delta)``. Made once per delta and device (a copy to the device, which may wait for
    it, is no operation to make per call)."""
    c = 0.5 / delta
    return torch.tensor([[0.5, 0.5, -c, c], [c, -c, 0.0, 0.0]], dtype=torch.float64, device=device)


class StepEdges:
    """What the band edges of both paths (:class:`DenseEdges`, :class:`~alrp_d2.losses.band_edges.BandEdges`)
    derive from their ``delta`` (the smoothness of H, App. E Eq. 14) and their 2P ``edges``."""

    delta: float
    edges: Tensor

    @property
    def num_gaps(self) -> int:
        return self.edges.numel() + 1

    @property
    def unit_step(self) -> bool:
        return self.delta == 0

    @property
    def self_relation(self) -> float:
        """H(0): 0.5 for the smoothed step, 1 for the unit step (``delta = 0``)."""
        return 1.0 if self.unit_step else 0.5


class DenseSortingRelations:
    """The sums of :class:`alrp_d2.losses.sorting_relations.SortingRelations` from the P x P blocks of
    ``H(s_k - s_i)`` (rows ``i``) masked by ``t_k < t_i`` (the ``dense`` path). A single block (up to 4,096
    positives) is kept from :meth:`target_split_sums` for :meth:`larger_target_source_sums`, which is called after it
    with weights that depend on it; several blocks are built again.

    Attributes:
        matrix: the relations among the positives, sorted by score.
        targets: (P,) their targets (float64).
    """

    def __init__(self, matrix: PositiveMatrix, targets: Tensor):
        self.matrix = matrix
        self.targets = targets
        self._kept: Optional[Tensor] = None

    def _smaller_target_rows(self, start: int, end: int, block: Tensor) -> Tensor:
        """The rows ``[start, end)`` of ``H(s_k - s_i) [t_k < t_i]`` from ``block``, their rows of ``H``."""
        return torch.where(self.targets[None, :] < self.targets[start:end, None], block, 0.0)

    def target_split_sums(self, weights: Tensor) -> Tuple[Tensor, Tensor]:
        """(P, K) ``sum_{k: t_k >= t_i} u_k H(s_k - s_i)`` (``k = i`` included) and (P, K)
        ``sum_{k: t_k < t_i} u_k H(s_k - s_i)`` for every positive ``i`` and every column ``u`` of ``weights``."""
        at_least, smaller = weights.new_empty(2, self.matrix.num, weights.shape[1])
        single_block = True
        for start, end, block in self.matrix.blocks():
            smaller_rows = self._smaller_target_rows(start, end, block)
            torch.mm(smaller_rows, weights, out=smaller[start:end])
            torch.mm(block.sub_(smaller_rows), weights, out=at_least[start:end])  # H - H [t_k < t_i], exactly
            single_block = single_block and start == 0 and end == self.matrix.num
            self._kept = smaller_rows if single_block else None
        return at_least, smaller

    def larger_target_source_sums(self, weights: Tensor) -> Tensor:
        """(P, K): ``sum_{i: t_i > t_k} w_i H(s_k - s_i)`` for every positive ``k`` and every column ``w`` of
        ``weights`` (P, K): the transposed product."""
        if self._kept is not None:
            return torch.mm(self._kept.T, weights)
        result = weights.new_zeros(self.matrix.num, weights.shape[1])
        for start, end, block in self.matrix.blocks():
            result.addmm_(self._smaller_target_rows(start, end, block).T, weights[start:end])
        return result


@dataclass(frozen=True)
class DenseEdges(StepEdges):
    """The 2P band edges of the sorted positive scores, ties kept, and where the positives and the gaps stand
    among them (module docstring); the interface of :class:`alrp_d2.losses.band_edges.BandEdges`, on the
    logits' own scale (no shift).

    Attributes:
        delta: smoothness of H (0: the unit step).
        scores: (P,) the sorted positive scores (float64).
        edges: (2P,) float64, ascending.
        query_gaps: (2, P) int64, ``#{e < q_i - delta}`` and ``#{e < q_i + delta}``.
        gap_ends: (2, 2P + 1) int64, for every gap ``g``: ``#{i: q_i - delta <= e[g-1]}`` (the end of the
            positives with a source of the gap in their band) and ``#{i: q_i + delta <= e[g-1]}`` (the end of
            those fully below it); 0 and 0 for gap 0.
        matrix: the relations among the positives.
        band_constant: (P,) ``0.5 - q / (2 delta)``, the weight of a band's count in ``H`` (unused for the unit
            step).
    """

    delta: float
    scores: Tensor
    edges: Tensor
    query_gaps: Tensor
    gap_ends: Tensor
    matrix: PositiveMatrix
    band_constant: Tensor

    @staticmethod
    def of(sorted_scores: Tensor, delta: float) -> DenseEdges:
        """The edges of the (P,) ascending float64 scores."""
        bounds = torch.stack([sorted_scores - delta, sorted_scores + delta])  # each row ascending
        edges = torch.sort(bounds.view(-1)).values
        lower_edges = F.pad(edges, (1, 0), value=-torch.inf).expand(2, -1).contiguous()  # gap g lies above e[g-1]
        gap_ends = torch.searchsorted(bounds, lower_edges, right=True)
        matrix = PositiveMatrix.of(sorted_scores, delta)
        band_constant = matrix.scaled if delta == 0 else 0.5 - matrix.scaled
        query_gaps = torch.searchsorted(edges, bounds)
        return DenseEdges(delta, sorted_scores, edges, query_gaps, gap_ends, matrix, band_constant)

    def locate(self, values: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """The gap of every float64 value (int32, written to ``out`` when given)."""
        return torch.searchsorted(self.edges, values, right=self.unit_step, out_int32=True, out=out)

    def sum_from_gap_totals(self, totals: Tensor) -> Tensor:
        """``sum_j u_j H(v_j - q_i)`` for every sorted positive from the sources' (2, num_gaps) gap totals (their
        sums of ``u`` and ``u v``): the totals of the gaps from ``1 + query_gaps`` on, by a cumulative sum."""
        cumulative = torch.cumsum(totals, 1)  # [:, g]: the gaps up to g
        at_queries = torch.index_select(cumulative, 1, self.query_gaps.view(-1)).view(2, 2, -1)
        above = cumulative[0, -1] - at_queries[0, 1]
        if self.unit_step:
            return above
        band = at_queries[:, 1] - at_queries[:, 0]  # the band's sums of u and of u v
        return torch.addcmul(above, band[0], self.band_constant).add_(band[1], alpha=0.5 / self.delta)

    def positive_sums(self, weights: Optional[Tensor] = None) -> Tensor:
        """``sum_k w_k H(q_k - q_i)`` for every sorted positive ``i`` (``k = i`` included; ``None``: all 1)."""
        return self.matrix.sums(weights)

    def coefficients(self, weights: Tensor) -> Tensor:
        """The (2, num_gaps) rows ``A``, ``B`` with ``sum_i w_i H(v - q_i) = A[gap] + B[gap] v`` (``A`` alone for
        the unit step), from the prefix sums of ``w`` and ``w q`` at every gap's ends."""
        columns = weights[None] if self.unit_step else torch.stack([weights, weights * self.scores])
        prefix = F.pad(torch.cumsum(columns, 1), (1, 0))  # [:, n]: the sum over the first n positives
        at_ends = torch.index_select(prefix, 1, self.gap_ends.view(-1))  # [column, (band end, above end) x gap]
        if self.unit_step:
            return at_ends[:, self.num_gaps :]
        return torch.mm(band_mixing(self.delta, prefix.device), at_ends.view(4, -1))

    def sorting_relations(self, targets: Tensor) -> DenseSortingRelations:
        """The relations of these positives by target and by score (P x P blocks), for the (P,) float64 targets."""
        return DenseSortingRelations(self.matrix, targets)
