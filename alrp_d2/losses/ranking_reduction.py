"""How the per-positive quantities of a ranking become its losses: over one ranking (:class:`WholeRanking`, every
ranking loss call) or over each of several independent rankings computed together (:class:`PerSet`, the segmented
ranking of :mod:`alrp_d2.losses.segmented_path`, e.g. the sets of a DETR training step)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .serial_indexing import take_rows

__all__ = ["PerSet", "Reduction", "WholeRanking"]


class Reduction(ABC):
    """The reductions over the sorted positives (``P``) and the gaps of a ranking."""

    @property
    @abstractmethod
    def normaliser(self) -> Union[int, Tensor]:
        """|P| of the ranking of every positive (an int, or (P,) float64)."""

    @abstractmethod
    def mean(self, values: Tensor) -> Tensor:
        """``1/|P| sum_i values_i`` of every ranking."""

    @abstractmethod
    def norm1(self, values: Tensor) -> Tensor:
        """``sum_i |values_i|`` of every ranking."""

    @abstractmethod
    def dot_mean(self, first: Tensor, second: Tensor) -> Tensor:
        """``1/|P| sum_i first_i second_i`` of every ranking."""

    @abstractmethod
    def gap_total(self, coefficients: Tensor, totals: Tensor) -> Tensor:
        """``sum_g A[g] count[g] + B[g] (sum of v in g)`` of every ranking, from the (R, num_gaps) coefficients and
        the (2, num_gaps) gap totals."""

    @abstractmethod
    def scaled(self, coefficients: Tensor, local_positive_grad: Tensor, scale: Tensor) -> Tuple[Tensor, Tensor]:
        """The coefficients and this worker's positive gradients times the float64 ``scale`` of their ranking."""

    @abstractmethod
    def at_or_below_sums(self, scores: Tensor, values: Tensor) -> Tensor:
        """``sum_{k: s_k <= s_i} v_k`` over the positives of the ranking of every sorted positive ``i``."""

    @abstractmethod
    def running_min_at_ties(self, scores: Tensor, values: Tensor) -> Tensor:
        """``min_{k: s_k <= s_i} v_k`` over the positives of the ranking of every sorted positive ``i``."""

    @abstractmethod
    def zeros(self, zero: Tensor) -> Tensor:
        """The loss of every ranking without positives, from a connected 0-d ``zero``."""


class WholeRanking(Reduction):
    """One ranking of ``num_positives`` positives."""

    def __init__(self, num_positives: int):
        self.num_positives = num_positives

    @property
    def normaliser(self) -> int:
        return self.num_positives

    def mean(self, values: Tensor) -> Tensor:
        return values.mean()

    def norm1(self, values: Tensor) -> Tensor:
        return torch.linalg.vector_norm(values, 1)

    def dot_mean(self, first: Tensor, second: Tensor) -> Tensor:
        return torch.dot(first, second) / self.num_positives

    def gap_total(self, coefficients: Tensor, totals: Tensor) -> Tensor:
        return torch.dot(coefficients.reshape(-1), totals[: len(coefficients)].reshape(-1))

    def scaled(self, coefficients: Tensor, local_positive_grad: Tensor, scale: Tensor) -> Tuple[Tensor, Tensor]:
        return coefficients * scale, local_positive_grad * scale

    def at_or_below_sums(self, scores: Tensor, values: Tensor) -> Tensor:
        # Tied positives count together (the unit step H(x) = [x >= 0] of App. E line 14).
        prefix = F.pad(torch.cumsum(values, 0), (1, 0))
        return take_rows(prefix, torch.searchsorted(scores, scores, right=True))

    def running_min_at_ties(self, scores: Tensor, values: Tensor) -> Tensor:
        running = torch.cummin(values, 0).values
        return take_rows(running, torch.searchsorted(scores, scores, right=True) - 1)

    def zeros(self, zero: Tensor) -> Tensor:
        return zero


class PerSet(Reduction):
    """``S`` independent rankings whose positives are sorted by (set, score) and whose gaps are ``S`` rows of
    ``gaps_per_set`` (:mod:`alrp_d2.losses.segmented_edges`).

    Attributes:
        sets: (P,) the set of every sorted positive (ascending).
        counts: (S,) float64, the positives of every set (of all workers in a global ranking); divisor: the same,
            at least 1.
        starts: (S,) the position of the first positive of every set.
        local_sets: the set of every positive of this worker, in the order of its gradient.
        gaps_per_set: the gaps of every set.
    """

    def __init__(
        self, sets: Tensor, counts: Tensor, divisor: Tensor, starts: Tensor, local_sets: Tensor, gaps_per_set: int
    ):
        self.sets, self.counts, self.divisor, self.starts = sets, counts, divisor, starts
        self.local_sets, self.gaps_per_set = local_sets, gaps_per_set
        self._normaliser = take_rows(counts, sets)

    @property
    def num_sets(self) -> int:
        return self.counts.numel()

    @property
    def normaliser(self) -> Tensor:
        return self._normaliser

    def _sums(self, values: Tensor) -> Tensor:
        return values.new_zeros(self.num_sets).index_add_(0, self.sets, values)

    def mean(self, values: Tensor) -> Tensor:
        return self._sums(values) / self.divisor

    def norm1(self, values: Tensor) -> Tensor:
        return self._sums(values.abs())

    def dot_mean(self, first: Tensor, second: Tensor) -> Tensor:
        return self.mean(first * second)

    def gap_total(self, coefficients: Tensor, totals: Tensor) -> Tensor:
        products = coefficients * totals[: len(coefficients)]
        return products.view(len(coefficients), self.num_sets, self.gaps_per_set).sum((0, 2))

    def scaled(self, coefficients: Tensor, local_positive_grad: Tensor, scale: Tensor) -> Tuple[Tensor, Tensor]:
        by_set = coefficients.view(len(coefficients), self.num_sets, self.gaps_per_set) * scale[:, None]
        return by_set.view(len(coefficients), -1), local_positive_grad * take_rows(scale, self.local_sets)

    def _tie_ends(self, scores: Tensor) -> Tensor:
        """(P,) one past the last positive with the same set and score as every positive."""
        num = scores.numel()
        last = torch.ones(num, dtype=torch.bool, device=scores.device)
        last[:-1] = (scores[1:] != scores[:-1]) | (self.sets[1:] != self.sets[:-1])
        position = torch.where(last, torch.arange(num, device=scores.device), num)
        return torch.flip(torch.cummin(torch.flip(position, [0]), 0).values, [0]) + 1

    def at_or_below_sums(self, scores: Tensor, values: Tensor) -> Tensor:
        prefix = F.pad(torch.cumsum(values, 0), (1, 0))
        return take_rows(prefix, self._tie_ends(scores)) - take_rows(take_rows(prefix, self.starts), self.sets)

    def running_min_at_ties(self, scores: Tensor, values: Tensor) -> Tensor:
        """A cumulative minimum per set: the values (in [0, 1]) of every earlier set are lifted above those of the
        later ones by 2 per set (exact to the rounding of the lift, ~1e-15)."""
        lift = 2.0 * (self.num_sets - 1 - self.sets).double()
        running = torch.cummin(values + lift, 0).values - lift
        return take_rows(running, self._tie_ends(scores) - 1)

    def zeros(self, zero: Tensor) -> Tensor:
        return zero.expand(self.num_sets)
