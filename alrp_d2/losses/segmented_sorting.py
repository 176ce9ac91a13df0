"""Rank & Sort Loss's sorting relations (:mod:`alrp_d2.losses.sorting_relations`) of several independent rankings
("sets", :mod:`alrp_d2.losses.segmented_path`) in one pass of the wavelet trees, O(P log P) for all sets together.

The trees of one ranking answer dominance sums over a prefix of a target order and the score positions below a cut.
For several sets, the target order lists every set's positives as one block (ascending target within the block, or
descending), and the score positions are those of all positives sorted by score: a sum restricted to the first
``m`` positions of a set's block is the tree's sum up to the block's start plus ``m`` less its sum up to the block's
start, and within that range only the set's own positives lie, so a cut among the scores of every set (one
``searchsorted`` for all) selects exactly the set's positives below it. No score of one set meets another set's, and
the sums of one ranking (:class:`alrp_d2.losses.sorting_relations.SortingRelations`) hold as they are with the numbers
of smaller and not larger targets counted within every set.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .serial_indexing import take_rows
from .set_layout import SetSpans
from .sorting_relations import SortingRelations, TargetOrderTree, score_cuts

__all__ = ["SetOrderTree", "segmented_sorting_relations"]


class SetOrderTree(TargetOrderTree):
    """:class:`TargetOrderTree` over a target order of blocks of sets, whose prefixes are taken within the block of
    every query's set (module docstring).

    Attributes:
        block_starts: (P,) the first position of the block of the set of every query (every sorted positive).
        prefix_shift: (P,) added to a query's prefix to make it a position of the whole order.
        by_score: (P,) the sorted positive at every score position.
    """

    def __init__(self, order: Tensor, block_starts: Tensor, prefix_shift: Tensor, by_score: Tensor):
        super().__init__(order)
        self.block_starts, self.prefix_shift, self.by_score = block_starts, prefix_shift, by_score

    def dominance_sums(self, columns: Tensor, prefix: Tensor, cuts: Tensor) -> Tensor:
        """As :meth:`TargetOrderTree.dominance_sums` for the (P, C) ``columns`` of the sorted positives, the
        ``prefix`` of every query counted within its set's block."""
        ends = torch.cat([prefix + self.prefix_shift, self.block_starts])
        both = super().dominance_sums(take_rows(columns, self.by_score), ends, cuts.repeat(2, 1))
        return both[: prefix.numel()] - both[prefix.numel() :]


def _within_set_ranks(targets_in_order: Tensor, bounds: Tensor) -> Tensor:
    """(2, P): for every position of a target order of set blocks (each ascending), the number of its set's positives
    with a smaller target and with a target not larger (tied targets are one run, never split)."""
    num = targets_in_order.numel()
    position = torch.arange(num, device=targets_in_order.device)
    first = position == bounds[0]
    first[1:] |= targets_in_order[1:] != targets_in_order[:-1]
    last = position == bounds[1] - 1
    last[:-1] |= targets_in_order[:-1] != targets_in_order[1:]
    run_start = torch.cummax(torch.where(first, position, 0), 0).values
    run_end = torch.flip(torch.cummin(torch.flip(torch.where(last, position, num), [0]), 0).values, [0]) + 1
    return torch.stack([run_start, run_end]) - bounds[0]


def segmented_sorting_relations(
    scores: Tensor, targets: Tensor, sets: Tensor, spans: SetSpans, delta: float
) -> SortingRelations:
    """The sorting relations of every set, for the (P,) float64 ``scores`` sorted by (set, score), their
    ``targets`` and ``sets``; ``spans``: where the sets' positives lie (module docstring)."""
    num = scores.numel()
    position = torch.arange(num, device=scores.device)
    global_scores, by_score = torch.sort(scores, stable=True)
    score_position = torch.empty_like(by_score).scatter_(0, by_score, position)
    by_target = torch.sort(targets, stable=True).indices
    ascending = take_rows(by_target, torch.sort(take_rows(sets, by_target), stable=True).indices)
    descending = take_rows(ascending, spans.bounds[0] + spans.bounds[1] - 1 - position)
    ranks_in_order = _within_set_ranks(take_rows(targets, ascending), spans.bounds)
    ranks = torch.empty_like(ranks_in_order).scatter_(1, ascending.expand(2, -1), ranks_in_order)
    query_cuts, source_cuts = score_cuts(global_scores, scores, delta)
    return SortingRelations(
        scores=scores,
        targets=targets,
        delta=delta,
        ascending=SetOrderTree(take_rows(score_position, ascending), spans.bounds[0], spans.bounds[0], by_score),
        descending=SetOrderTree(
            take_rows(score_position, descending), spans.bounds[0], spans.bounds[1] - num, by_score
        ),
        num_smaller=ranks[0],
        num_not_larger=ranks[1],
        query_cuts=query_cuts,
        source_cuts=source_cuts,
    )
