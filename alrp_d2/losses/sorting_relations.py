"""Relation sums among the positives restricted by their targets, in O(P log^2 P).

Sorting positives by a continuous target ``t`` (e.g. IoU) needs, for every positive ``i`` and the
step ``H`` of :mod:`alrp_d2.losses.relation_sums` (smoothed, or the unit step for ``delta = 0``),
sums over the positives ``k`` that compare both the targets and the scores:

    sum_{k: t_k <  t_i} u_k H(s_k - s_i),   sum_{k: t_k >= t_i} u_k H(s_k - s_i)   for every query i,
    sum_{i: t_i >  t_k} w_i H(s_k - s_i)                                           for every source k.

Taken in ascending (descending) target order, ``{k: t_k < t_i}`` (``{k: t_k >= t_i}``,
``{i: t_i > t_k}``) is a prefix, whose length a binary search over the sorted targets gives
(tied targets are one run, so a prefix never splits them). ``H`` is 1 above a score band, 0 below
it and linear inside: each sum is the sum of ``u`` over a score range plus the sums of ``u`` and
``u s`` over another, all restricted to a prefix of the target order. These are 2-D dominance sums
(target position < prefix, score position < cut), answered by a merge-sort tree:

* at level ``l`` the target order is cut into blocks of ``2^l`` positions (the incomplete last one
  is never needed), and every block lists its members by score position, with the prefix sums of
  the weight columns within the block (float64);
* a prefix ``[0, f)`` is the union of the blocks ``(f >> l) - 1`` of the levels ``l`` whose bit
  is set in ``f``; the members of such a block below a score position are counted by one binary
  search of the integer key ``block * P + score position`` (exact, no float comparison).

Every level is one vectorised pass over all queries: O(P log P) per level, O(P log^2 P) time and
O(P) memory per level in all, with no P x P matrix and no loop over positives. The score
positions are those of the ranking's sorted positive scores; the band ends are binary searches of
``s -/+ delta`` among them (H is continuous, so rounding at an end changes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["SortingRelations", "TargetOrderTree"]


class TargetOrderTree:
    """The merge-sort tree of the positives taken in one target order (module docstring)."""

    def __init__(self, order: Tensor):
        """``order``: (P,) the score position of the positive at each position of the target order."""
        num = order.numel()
        positions = torch.arange(num, device=order.device)
        self.num = num
        self.levels: List[Tuple[int, Tensor, Tensor]] = []
        for level in range(num.bit_length()):
            count = (num >> level) << level
            members = order[:count]
            keys, by_key = torch.sort((positions[:count] >> level) * num + members)
            self.levels.append((level, keys, members[by_key]))

    def dominance_sums(self, columns: Tensor, prefix: Tensor, cuts: Tensor) -> Tensor:
        """(Q, R, C): for every query ``q`` and cut ``r``, the sum of ``columns`` (P, C) over the
        positives at target positions ``< prefix[q]`` and score positions ``< cuts[q, r]``."""
        num, width = self.num, columns.shape[1]
        total = columns.new_zeros(prefix.numel(), cuts.shape[1], width)
        for level, keys, members in self.levels:
            size = 1 << level
            blocks = prefix >> level
            uses_level = (blocks & 1).bool()
            block = (blocks - 1).clamp_min(0).unsqueeze(1)
            within = torch.searchsorted(keys, block * num + cuts) - block * size
            block_sums = F.pad(torch.cumsum(columns[members].view(-1, size, width), 1), (0, 0, 1, 0))
            total += torch.where(uses_level[:, None, None], block_sums[block, within], 0.0)
        return total


@dataclass(frozen=True)
class SortingRelations:
    """The positives of one ranking related by target and by score.

    Attributes:
        scores: (P,) the positive scores, ascending (float64); positive ``i`` is score position ``i``.
        targets: (P,) their targets (float64).
        delta: smoothness of H; 0 is the unit step with H(0) = 1.
        ascending, descending: the trees of the positives in ascending and descending target order.
        num_smaller, num_not_larger: (P,) ``#{k: t_k < t_i}`` and ``#{k: t_k <= t_i}``.
        query_cuts: (P, 3) score positions: where the band of ``H(s_k - s_i)`` around ``s_i``
            begins and ends, and P.
        source_cuts: (P, 2) where the band of ``H(s_k - s_i)`` around ``s_k`` begins and ends,
            over ``i``.
    """

    scores: Tensor
    targets: Tensor
    delta: float
    ascending: TargetOrderTree
    descending: TargetOrderTree
    num_smaller: Tensor
    num_not_larger: Tensor
    query_cuts: Tensor
    source_cuts: Tensor

    @staticmethod
    def build(scores: Tensor, targets: Tensor, delta: float) -> SortingRelations:
        """``scores``: (P,) ascending float64; ``targets``: (P,) of the same positives; ``delta`` >= 0."""
        sorted_targets, order = torch.sort(targets, stable=True)
        smooth = delta > 0
        # Query i: H(s_k - s_i) = 1 for s_k > s_i + delta, linear for s_k in [s_i - delta, s_i + delta];
        # with the unit step, 1 for s_k >= s_i (an empty band at the first tie of s_i).
        band_start = torch.searchsorted(scores, scores - delta)
        band_end = torch.searchsorted(scores, scores + delta, right=smooth)
        # Source k: H(s_k - s_i) = 1 for s_i < s_k - delta, linear for s_i in the band; with the
        # unit step, 1 for s_i <= s_k.
        source_start = torch.searchsorted(scores, scores - delta, right=not smooth)
        source_end = torch.searchsorted(scores, scores + delta, right=True)
        return SortingRelations(
            scores=scores,
            targets=targets,
            delta=delta,
            ascending=TargetOrderTree(order),
            descending=TargetOrderTree(torch.flip(order, [0])),
            num_smaller=torch.searchsorted(sorted_targets, targets),
            num_not_larger=torch.searchsorted(sorted_targets, targets, right=True),
            query_cuts=torch.stack([band_start, band_end, torch.full_like(band_end, scores.numel())], 1),
            source_cuts=torch.stack([source_start, source_end], 1),
        )

    @property
    def num_positives(self) -> int:
        return self.scores.numel()

    def smaller_target_sums(self, weights: Tensor) -> Tensor:
        """(P, K): ``sum_{k: t_k < t_i} u_k H(s_k - s_i)`` for every positive ``i`` and every column
        ``u`` of ``weights`` (P, K)."""
        return self._query_sums(self.ascending, self.num_smaller, weights)

    def at_least_target_sums(self, weights: Tensor) -> Tensor:
        """(P, K): ``sum_{k: t_k >= t_i} u_k H(s_k - s_i)`` (``k = i`` included, with H(0))."""
        return self._query_sums(self.descending, self.num_positives - self.num_smaller, weights)

    def larger_target_source_sums(self, weights: Tensor) -> Tensor:
        """(P, K): ``sum_{i: t_i > t_k} w_i H(s_k - s_i)`` for every positive ``k`` and every column
        ``w`` of ``weights`` (P, K)."""
        prefix = self.num_positives - self.num_not_larger
        sums = self.descending.dominance_sums(self._with_scores(weights), prefix, self.source_cuts)
        width = weights.shape[1]
        below = sums[:, 0, :width]
        if self.delta == 0:
            return below
        band = sums[:, 1] - sums[:, 0]
        return (
            below
            + 0.5 * band[:, :width]
            + (self.scores[:, None] * band[:, :width] - band[:, width:]) * (0.5 / self.delta)
        )

    def _with_scores(self, weights: Tensor) -> Tensor:
        """(P, 2K): the columns ``u`` and ``u s``."""
        return torch.cat([weights, weights * self.scores[:, None]], 1)

    def _query_sums(self, tree: TargetOrderTree, prefix: Tensor, weights: Tensor) -> Tensor:
        sums = tree.dominance_sums(self._with_scores(weights), prefix, self.query_cuts)
        width = weights.shape[1]
        above = sums[:, 2, :width] - sums[:, 1, :width]
        if self.delta == 0:
            return above
        band = sums[:, 1] - sums[:, 0]
        return (
            above
            + 0.5 * band[:, :width]
            + (band[:, width:] - self.scores[:, None] * band[:, :width]) * (0.5 / self.delta)
        )
