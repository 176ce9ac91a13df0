"""The positives of one ranking sorted by score (of all workers in a global ranking), before either path of
:mod:`alrp_d2.losses.ranking_path` relates them to each other and to the negatives."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .serial_indexing import take_rows

if TYPE_CHECKING:
    from .global_ranking import PositiveExchange

__all__ = ["SortedPositives", "gathered_columns"]


def gathered_columns(
    flat: Tensor, positive_index: Tensor, exchange: Optional[PositiveExchange], *columns: Optional[Tensor]
) -> Tuple[Tensor, List[Tensor]]:
    """The float64 scores of the positives of the (M,) ``flat`` logits and, in a global ranking, those of every
    worker with the (detached, float64) per-positive ``columns`` given (None: left out); without an exchange,
    this worker's scores and no column."""
    scores = take_rows(flat, positive_index).double()
    if exchange is None:
        return scores, []
    given = [column.detach().double() for column in columns if column is not None]
    gathered = exchange.gather(torch.stack([scores, *given], 1))
    return gathered[:, 0], list(gathered[:, 1:].unbind(1))


class SortedPositives(NamedTuple):
    """Attributes as those of :class:`alrp_d2.losses.relation_sums.PositiveRanking`: ``flat_index`` is its
    ``positive_index``, ``scores`` (P,) the float64 scores ascending, as they are."""

    flat_index: Tensor
    order: Tensor
    scores: Tensor
    local_slot: Optional[Tensor]
    gathered_values: Optional[Tensor]

    @staticmethod
    def of(
        flat: Tensor,
        positive_index: Tensor,
        exchange: Optional[PositiveExchange],
        positive_values: Optional[Tensor],
    ) -> SortedPositives:
        """Gathers the scores of the (M,) ``flat`` logits (with the ``positive_values`` in a global ranking) and
        sorts them."""
        scores, gathered = gathered_columns(flat, positive_index, exchange, positive_values)
        sorted_scores, order = torch.sort(scores)
        gathered_values = gathered[-1] if gathered else None
        return SortedPositives.ordered(positive_index, exchange, order, sorted_scores, gathered_values)

    @staticmethod
    def ordered(
        positive_index: Tensor,
        exchange: Optional[PositiveExchange],
        order: Tensor,
        sorted_scores: Tensor,
        gathered_values: Optional[Tensor],
    ) -> SortedPositives:
        """The positives in the sorted ``order`` (of all workers' positives in a global ranking)."""
        local_slot = None
        if exchange is None:
            positive_index = take_rows(positive_index, order)
        else:
            slot = torch.empty_like(order).scatter_(0, order, torch.arange(len(order), device=order.device))
            local_slot = slot[exchange.local_start : exchange.local_start + exchange.num_local]
        return SortedPositives(positive_index, order, sorted_scores, local_slot, gathered_values)

    def local_scores(self) -> Tensor:
        """(num_local,) the scores of this worker's positives, in the order of :attr:`flat_index`."""
        return self.scores if self.local_slot is None else take_rows(self.scores, self.local_slot)
