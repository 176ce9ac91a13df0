"""Relation sums among the positives restricted by their targets, in O(P log P).

Sorting positives by a continuous target ``t`` (e.g. IoU) needs, for every positive ``i`` and the
step ``H`` of :mod:`alrp_d2.losses.relation_sums` (smoothed, or the unit step for ``delta = 0``),
sums over the positives ``k`` that compare both the targets and the scores:

    sum_{k: t_k <  t_i} u_k H(s_k - s_i),   sum_{k: t_k >= t_i} u_k H(s_k - s_i)   for every query i,
    sum_{i: t_i >  t_k} w_i H(s_k - s_i)                                           for every source k.

Taken in ascending (descending) target order, ``{k: t_k < t_i}`` (``{k: t_k >= t_i}``,
``{i: t_i > t_k}``) is a prefix, whose length a binary search over the sorted targets gives
(tied targets are one run, so a prefix never splits them). ``H`` is 1 above a score band, 0 below
it and linear inside: each sum is the sum of ``u`` over a range of score positions plus the sums
of ``u`` and ``u s`` over another, all restricted to a prefix of the target order. These are 2-D
dominance sums (target position < prefix, score position < cut), answered exactly by a wavelet
tree over the target order:

* level ``l`` cuts the target order into blocks of ``2^l`` positions and lists every block's
  members by score, with the prefix sums of the weight columns within the block (float64); a
  block's list is the stable partition of its parent's list, with the count, for every prefix of
  the parent's list, of the members that went to the left child;
* a query descends from the root (all positives, by score, where the members below a cut of the
  score positions are the cut itself) along the bits of its prefix length: where a bit is set, the
  whole left child lies inside the prefix and adds its prefix sum up to the number of its members
  below the cut, which the parent's left counts give by one lookup; the descent continues into the
  right child (bit set) or the left one with that number.

Every level is one vectorised pass: O(P) to build, O(P + queries) to answer, so O(P log P) time
and memory in all, integer counts only (no float comparison), no P x P matrix and no loop over
positives. The score positions are those of the ranking's sorted positive scores; the band ends are
binary searches of ``s -/+ delta`` among them (H is continuous, so rounding at an end changes
nothing). This is the ``scan`` path of :mod:`alrp_d2.losses.ranking_path`: the least work, in some ten
operations per level and query set.

On the ``dense`` path, :class:`alrp_d2.losses.dense_relations.DenseSortingRelations` gives the same sums as products
of the P x P blocks of ``H(s_k - s_i)``, masked by ``t_k < t_i``, with the weights: a few operations per block, O(P^2)
work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .serial_indexing import take_rows

__all__ = ["SortingRelations", "TargetOrderTree", "score_cuts"]


class TargetOrderTree:
    """The wavelet tree of the positives over one target order (module docstring).

    The target order is padded to ``2^depth > P`` positions with weightless dummies placed after
    every positive in both orders. Level ``l`` cuts the target positions into blocks of ``2^l`` and
    lists every block's members by score (``arrangement``); ``left_before`` counts, for every
    prefix of a level-``(l + 1)`` block's score-ordered list, the members that fall into its left
    child at level ``l``.

    Flat layouts (every level's tensors are 1-D or row-major over its blocks, so that one gather reads a
    block's entry for every query at once):

    * ``arrangement`` (size,): the blocks of the level one after the other, block ``b`` at
      ``[b 2^l, (b + 1) 2^l)``, each listing its members' score positions ascending;
    * ``left_before`` (size / 2^(l+1), 2^(l+1) + 1): row ``b`` for parent block ``b``, entry ``c`` the number of
      the first ``c`` members of the parent's list that go to its left child; flattened, parent ``b`` and count
      ``c`` are entry ``b (2^(l+1) + 1) + c``;
    * in :meth:`dominance_sums`, ``child_sums`` (size / 2^l blocks x (2^l + 1), width): the prefix sums of the
      columns within every child block, a leading 0 per block; child ``b`` and prefix length ``c`` are row
      ``b (2^l + 1) + c``.
    """

    def __init__(self, order: Tensor):
        """``order``: (P,) the score position of the positive at each position of the target order."""
        num = order.numel()
        device = order.device
        self.num = num
        self.size = 1 << num.bit_length()
        target_position = torch.arange(self.size, device=device).scatter_(0, order, torch.arange(num, device=device))
        arrangement = torch.arange(self.size, device=device)  # the root: every score position, in order
        index = torch.arange(self.size, device=device)
        self.levels: List[Tuple[int, Tensor, Tensor]] = []
        for level in reversed(range(num.bit_length())):
            parent_size = 2 << level
            goes_left = ((take_rows(target_position, arrangement) >> level) & 1) == 0
            left_before = F.pad(torch.cumsum(goes_left.view(-1, parent_size), 1), (1, 0))
            left_rank = left_before[:, :-1].reshape(-1)
            # Stable partition of every parent block into its left and right child.
            offset = index % parent_size
            within = torch.where(goes_left, left_rank, (parent_size >> 1) + offset - left_rank)
            position = index - offset + within
            arrangement = torch.empty_like(arrangement).scatter_(0, position, arrangement)
            self.levels.append((level, left_before, arrangement))

    def dominance_sums(self, columns: Tensor, prefix: Tensor, cuts: Tensor) -> Tensor:
        """(Q, R, C): for every query ``q`` and cut ``r``, the sum of ``columns`` (P, C) over the
        positives at target positions ``< prefix[q]`` and score positions ``< cuts[q, r]``.

        Every query descends from the root along the bits of its prefix, carrying for every cut
        the number of members of its current block below the cut: where the bit is set, the whole
        left child lies inside the prefix and adds its prefix sum up to that number."""
        width = columns.shape[1]
        padded = columns.new_zeros(self.size, width)
        padded[: self.num] = columns
        total = columns.new_zeros(prefix.numel(), cuts.shape[1], width)
        block = torch.zeros_like(prefix).unsqueeze(1)
        count = cuts.clone()  # at the root, the score positions below a cut are the cut
        for level, left_before, arrangement in self.levels:
            child_size = 1 << level
            left = take_rows(left_before.view(-1), block * (2 * child_size + 1) + count)
            bit = ((prefix >> level) & 1).unsqueeze(1)
            child_sums = F.pad(
                torch.cumsum(take_rows(padded, arrangement).view(-1, child_size, width), 1), (0, 0, 1, 0)
            )
            left_child = 2 * block
            # A query whose bit is 0 reads the left child's empty prefix (0).
            total += take_rows(child_sums.view(-1, width), left_child * (child_size + 1) + left * bit)
            count = torch.where(bit == 1, count - left, left)
            block = left_child + bit
        return total


def score_cuts(sorted_scores: Tensor, scores: Tensor, delta: float) -> Tuple[Tensor, Tensor]:
    """The :attr:`SortingRelations.query_cuts` (P, 3) and ``source_cuts`` (P, 2) of the (P,) ``scores``: score
    positions among the ascending ``sorted_scores`` (those of every positive)."""
    smooth = delta > 0
    # Query i: H(s_k - s_i) = 1 for s_k > s_i + delta, linear for s_k in [s_i - delta, s_i + delta];
    # with the unit step, 1 for s_k >= s_i (an empty band at the first tie of s_i).
    band_start = torch.searchsorted(sorted_scores, scores - delta)
    band_end = torch.searchsorted(sorted_scores, scores + delta, right=smooth)
    # Source k: H(s_k - s_i) = 1 for s_i < s_k - delta, linear for s_i in the band; with the
    # unit step, 1 for s_i <= s_k.
    source_start = torch.searchsorted(sorted_scores, scores - delta, right=not smooth)
    source_end = torch.searchsorted(sorted_scores, scores + delta, right=True)
    query_cuts = torch.stack([band_start, band_end, torch.full_like(band_end, sorted_scores.numel())], 1)
    return query_cuts, torch.stack([source_start, source_end], 1)


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
        query_cuts, source_cuts = score_cuts(scores, scores, delta)
        return SortingRelations(
            scores=scores,
            targets=targets,
            delta=delta,
            ascending=TargetOrderTree(order),
            descending=TargetOrderTree(torch.flip(order, [0])),
            num_smaller=torch.searchsorted(sorted_targets, targets),
            num_not_larger=torch.searchsorted(sorted_targets, targets, right=True),
            query_cuts=query_cuts,
            source_cuts=source_cuts,
        )

    @property
    def num_positives(self) -> int:
        return self.scores.numel()

    def target_split_sums(self, weights: Tensor) -> Tuple[Tensor, Tensor]:
        """:meth:`at_least_target_sums` and :meth:`smaller_target_sums` of the (P, K) ``weights``."""
        return self.at_least_target_sums(weights), self.smaller_target_sums(weights)

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
        return self._plus_band(sums[:, 0, : weights.shape[1]], sums, weights.shape[1], own_score_is_source=True)

    def _with_scores(self, weights: Tensor) -> Tensor:
        """(P, 2K): the columns ``u`` and ``u s``."""
        return torch.cat([weights, weights * self.scores[:, None]], 1)

    def _query_sums(self, tree: TargetOrderTree, prefix: Tensor, weights: Tensor) -> Tensor:
        sums = tree.dominance_sums(self._with_scores(weights), prefix, self.query_cuts)
        width = weights.shape[1]
        return self._plus_band(sums[:, 2, :width] - sums[:, 1, :width], sums, width, own_score_is_source=False)

    def _plus_band(self, outside: Tensor, sums: Tensor, width: int, own_score_is_source: bool) -> Tensor:
        """``outside`` (the sum over the partners where H is 0 or 1) plus the band's
        ``sum u (0.5 + (s_source - s_query) / (2 delta))`` from the band rows of ``sums`` (columns:
        ``u`` then ``u s`` of the partners); the row's own score is the source's or the query's."""
        if self.delta == 0:
            return outside
        band = sums[:, 1] - sums[:, 0]
        difference = band[:, width:] - self.scores[:, None] * band[:, :width]  # sum u (s_partner - s_own)
        if own_score_is_source:
            difference = -difference
        return outside + 0.5 * band[:, :width] + difference * (0.5 / self.delta)
