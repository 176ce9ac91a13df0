"""The inputs of one ranking as the losses compute them, from the index API (the positives' flat
indices and a validity mask, not validated) or from the label API (validated once)."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, TypeVar

import torch
from torch import Tensor

from .error_driven import output_dtype, zero_connected
from .global_ranking import PositiveExchange, RankingGroup, exchange_checked
from .input_checks import check_rank_sort_inputs, check_ranking_inputs
from .ranking_path import RankingPath, choose_path
from .relation_sums import PositiveRanking

__all__ = ["RankingInputs"]

Terms = TypeVar("Terms")


class RankingInputs(NamedTuple):
    """Attributes:
    logits: the scores, of any shape (M entries).
    positive_index: (P,) distinct indices of this worker's positives into the flattened logits.
    valid: None, or a bool tensor broadcastable to ``logits.shape``, False for ignored examples.
    num_positives: the number of positives of the ranking (of all workers in a global ranking).
    exchange: the communication of a global ranking; None for this worker's examples only.
    """

    logits: Tensor
    positive_index: Tensor
    valid: Optional[Tensor]
    num_positives: int
    exchange: Optional[PositiveExchange]
    path: RankingPath

    @staticmethod
    def indexed(
        logits: Tensor, positive_index: Tensor, valid: Optional[Tensor], group: Optional[RankingGroup], path: str
    ) -> RankingInputs:
        """The index API: nothing is validated (with a group, the numbers of positives are exchanged); ``path``:
        one of :data:`alrp_d2.losses.ranking_path.PATHS`."""
        chosen = choose_path(path, logits.device)
        num_positives, exchange = exchange_checked(lambda: positive_index.numel(), logits.device, group)
        return RankingInputs(logits, positive_index, valid, num_positives, exchange, chosen)

    @staticmethod
    def labelled(
        logits: Tensor, labels: Tensor, extra: Optional[Tensor], group: Optional[RankingGroup], path: str
    ) -> RankingInputs:
        """The label API: (M,) ``labels`` 1 / 0 / -1 and the positives' ``extra`` values (E_loc),
        validated (:func:`alrp_d2.losses.input_checks.check_ranking_inputs`) on every worker."""
        chosen = choose_path(path, logits.device)
        num_positives, exchange = exchange_checked(
            lambda: check_ranking_inputs(logits, labels, extra), logits.device, group
        )
        flat = labels.reshape(-1)
        return RankingInputs(logits, torch.nonzero(flat == 1).squeeze(1), flat >= 0, num_positives, exchange, chosen)

    @staticmethod
    def targeted(logits: Tensor, targets: Tensor, group: Optional[RankingGroup], path: str) -> RankingInputs:
        """Rank & Sort Loss's label API: (M,) continuous ``targets`` (> 0 positive, 0 negative,
        < 0 ignored), validated (:func:`alrp_d2.losses.input_checks.check_rank_sort_inputs`)."""
        chosen = choose_path(path, logits.device)
        num_positives, exchange = exchange_checked(
            lambda: check_rank_sort_inputs(logits, targets), logits.device, group
        )
        flat = targets.detach().reshape(-1)
        return RankingInputs(logits, torch.nonzero(flat > 0).squeeze(1), flat >= 0, num_positives, exchange, chosen)

    def rank(self, delta: float, positive_values: Optional[Tensor] = None) -> PositiveRanking:
        """The positives sorted and related to the relevant negatives (:meth:`PositiveRanking.build`)."""
        return PositiveRanking.build(
            self.logits, self.positive_index, self.valid, delta, self.path, self.exchange, positive_values
        )

    def loss_terms(
        self,
        delta: float,
        positive_values: Optional[Tensor],
        without_positives: Callable[[Tensor], Terms],
        from_ranking: Callable[[PositiveRanking], Terms],
    ) -> Terms:
        """What every ranking loss does with its inputs: ``without_positives(zero)`` when no worker has a
        positive (``zero``: a scalar of the output dtype, connected to the logits), otherwise
        ``from_ranking(self.rank(delta, positive_values))`` with autocast off (float64 relation sums)."""
        logits = self.logits
        if self.num_positives == 0:
            return without_positives(zero_connected(logits, output_dtype(logits)))
        with torch.autocast(device_type=logits.device.type, enabled=False):
            return from_ranking(self.rank(delta, positive_values))
