"""The two exact implementations of the ranking statistics, behind one interface (:class:`RankingPath`) that the
positive ranking (:class:`alrp_d2.losses.relation_sums.PositiveRanking`) holds.

* ``scan`` (:class:`ScanPath`, the CPU's): the scores are shifted by the smallest positive one; the negatives find
  their gaps among the positives' distinct band edges (:class:`alrp_d2.losses.band_edges.BandEdges`) by a uniform
  grid (:mod:`alrp_d2.losses.gap_lookup`, one host synchronisation) in chunks of 2^15 that each stay on one thread,
  and Rank & Sort Loss's sorting relations come from wavelet trees (:mod:`alrp_d2.losses.sorting_relations`): the
  least work, in many small operations.
* ``dense`` (:class:`DensePath`, an accelerator's, where every operation is a kernel launch): the scores as they
  are; the negatives find their gaps by one ``searchsorted`` per chunk of 2^20, and the relations among the
  positives are P x P comparisons in blocks of rows (:mod:`alrp_d2.losses.dense_relations`): more arithmetic, a
  small constant number of operations per call (``benchmarks/op_count.py``), no host synchronisation of their own.

Both give the same values and gradients (the exactness tests run on both). Every ranking loss takes the path as an
argument, ``path="auto"`` by default: ``scan`` on the CPU, ``dense`` on every other device (:func:`choose_path`);
``"scan"`` or ``"dense"`` forces one, so that a CPU can run and count the accelerator's path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, NamedTuple, Optional, Protocol, Tuple

import torch
from torch import Tensor

from .band_edges import BandEdges
from .dense_relations import DenseEdges
from .negative_scan import DenseNegatives, ScanNegatives
from .ranking_reduction import Reduction, WholeRanking
from .sorted_positives import SortedPositives

if TYPE_CHECKING:
    from .global_ranking import PositiveExchange

__all__ = [
    "PATHS",
    "DensePath",
    "PathRelations",
    "RankingEdges",
    "RankingNegatives",
    "RankingPath",
    "RankingRequest",
    "ScanPath",
    "SortingSums",
    "check_path",
    "choose_path",
]

PATHS = ("auto", "scan", "dense")


class SortingSums(Protocol):
    """Rank & Sort Loss's relations among the positives by target and by score (both paths' classes)."""

    @property
    def targets(self) -> Tensor: ...

    def target_split_sums(self, weights: Tensor) -> Tuple[Tensor, Tensor]: ...

    def larger_target_source_sums(self, weights: Tensor) -> Tensor: ...


class RankingEdges(Protocol):
    """The positives' band edges of a path: the relation sums among the positives and the per-gap coefficients of
    the sums over the negatives (notation of :mod:`alrp_d2.losses.relation_sums`)."""

    @property
    def scores(self) -> Tensor: ...

    @property
    def num_gaps(self) -> int: ...

    @property
    def self_relation(self) -> float: ...

    def sum_from_gap_totals(self, totals: Tensor) -> Tensor: ...

    def positive_sums(self, weights: Optional[Tensor] = None) -> Tensor: ...

    def coefficients(self, weights: Tensor) -> Tensor: ...

    def sorting_relations(self, targets: Tensor) -> SortingSums: ...


class RankingNegatives(Protocol):
    """The negatives of a path: the pass over the logits that writes their relation sums."""

    def relation_sums(self, coefficients: Tensor, dtype: torch.dtype) -> Tensor: ...


class RankingRequest(NamedTuple):
    """What a path relates: the (M,) ``flat`` logits, the ``positive_index`` of this worker's positives, ``valid``
    (None or (M,) bool, False for the ignored entries), the smoothness ``delta``, the ``exchange`` of a global
    ranking (None: this worker's examples) and per-positive ``positive_values`` gathered with the scores in a global
    ranking (None: none)."""

    flat: Tensor
    positive_index: Tensor
    valid: Optional[Tensor]
    delta: float
    exchange: Optional[PositiveExchange]
    positive_values: Optional[Tensor]


class PathRelations(NamedTuple):
    """The sorted positives, their edges, the negatives, the negatives' (2, num_gaps) gap totals (their count and
    sum of scores, on the edges' scale, per gap) and how the ranking's losses reduce over the positives."""

    positives: SortedPositives
    edges: RankingEdges
    negatives: RankingNegatives
    negative_totals: Tensor
    reduction: Reduction


class RankingPath(ABC):
    """One implementation of the ranking statistics (module docstring)."""

    name: str

    @abstractmethod
    def relate(self, request: RankingRequest) -> PathRelations:
        """Sorts the positives of the request (of all workers with an exchange, their values gathered with them),
        builds their band edges and finds the negatives and their gap totals in one pass over the logits."""

    def zeros(self, zero: Tensor) -> Tensor:
        """The losses of a call without positives, from a connected 0-d ``zero``: one ranking's."""
        return zero


class ScanPath(RankingPath):
    """The CPU's path: shifted scores, grid lookup, wavelet trees (module docstring)."""

    name = "scan"

    def relate(self, request: RankingRequest) -> PathRelations:
        flat, positive_index, valid, delta, exchange, positive_values = request
        positives = SortedPositives.of(flat, positive_index, exchange, positive_values)
        # The shift by the smallest score leaves every x_ij unchanged and keeps the prefix sums small.
        offset = positives.scores[0]
        edges = BandEdges.of(positives.scores - offset, delta)
        negatives, totals = ScanNegatives.scan(flat, valid, positives.flat_index, offset, edges)
        return PathRelations(positives, edges, negatives, totals, WholeRanking(positives.scores.numel()))


class DensePath(RankingPath):
    """An accelerator's path: the scores as they are, ``searchsorted``, P x P blocks (module docstring)."""

    name = "dense"

    def relate(self, request: RankingRequest) -> PathRelations:
        flat, positive_index, valid, delta, exchange, positive_values = request
        positives = SortedPositives.of(flat, positive_index, exchange, positive_values)
        edges = DenseEdges.of(positives.scores, delta)
        negatives, totals = DenseNegatives.scan(flat, valid, positives.flat_index, positives.local_scores(), edges)
        return PathRelations(positives, edges, negatives, totals, WholeRanking(positives.scores.numel()))


_PATHS = {"scan": ScanPath(), "dense": DensePath()}


def check_path(path: str) -> str:
    """``path`` if it is one of :data:`PATHS`; a ValueError naming them otherwise."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    return path


def choose_path(path: str, device: torch.device) -> RankingPath:
    """The :class:`RankingPath` named by ``path`` (one of :data:`PATHS`); ``"auto"``: ``scan`` on the CPU, ``dense``
    on every other ``device``."""
    if check_path(path) == "auto":
        path = "scan" if device.type == "cpu" else "dense"
    return _PATHS[path]
