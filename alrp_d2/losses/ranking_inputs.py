"""The inputs of one ranking as the losses compute them, from the index API (the positives' flat
indices and a validity mask, not validated) or from the label API (validated once)."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence, TypeVar

import torch
from torch import Tensor

from .error_driven import output_dtype, zero_connected
from .global_ranking import PositiveExchange, RankingGroup, exchange_checked
from .input_checks import check_rank_sort_inputs, check_ranking_inputs
from .ranking_path import RankingPath, choose_path
from .relation_sums import PositiveRanking
from .segmented_path import SegmentedPath
from .set_layout import SetLayout

__all__ = ["RankingInputs", "RankingSet", "set_values"]

Terms = TypeVar("Terms", bound=tuple)


class RankingSet(NamedTuple):
    """One set of a segmented ranking (e.g. one decoder layer's predictions of a DETR step), as the index API
    takes a ranking.

    Attributes:
        logits: the set's scores, of any shape (e.g. (B, Q, C)).
        positive_index: (P_s,) distinct indices of its positives into its flattened logits.
        positive_values: (P_s,) the positives' E_loc (aLRP Loss) or targets (Rank & Sort Loss), in the order of
            ``positive_index``; None for AP Loss.
        valid: None, or a bool tensor broadcastable to ``logits.shape``, False for ignored examples.
    """

    logits: Tensor
    positive_index: Tensor
    positive_values: Optional[Tensor] = None
    valid: Optional[Tensor] = None

    def values(self) -> Tensor:
        """The ``positive_values``, which the caller has checked (:func:`set_values`)."""
        if self.positive_values is None:
            raise ValueError("this set has no positive_values")
        return self.positive_values


def set_values(sets: Sequence[RankingSet], name: str) -> Tensor:
    """The ``positive_values`` of all sets one after the other; a ValueError naming the set without them."""
    missing = [index for index, ranking_set in enumerate(sets) if ranking_set.positive_values is None]
    if missing:
        raise ValueError(f"every set needs its positives' {name} (positive_values); set(s) {missing} have none")
    return torch.cat([ranking_set.values() for ranking_set in sets])


def _flat_valid(sets: Sequence[RankingSet]) -> Optional[Tensor]:
    """The validity of the flattened logits of all sets; None when no set ignores an entry."""
    if all(ranking_set.valid is None for ranking_set in sets):
        return None
    return torch.cat(
        [
            torch.ones(s.logits.numel(), dtype=torch.bool, device=s.logits.device)
            if s.valid is None
            else s.valid.expand(s.logits.shape).reshape(-1)
            for s in sets
        ]
    )


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
    def of_sets(sets: Sequence[RankingSet], group: Optional[RankingGroup], path: str) -> RankingInputs:
        """The index API for several sets ranked in one call, each on its own
        (:mod:`alrp_d2.losses.segmented_path`): their logits flattened one after the other."""
        if not sets:
            raise ValueError("a segmented ranking needs at least one set")
        device = sets[0].logits.device
        logits = torch.cat([ranking_set.logits.reshape(-1) for ranking_set in sets])
        positive_counts = [ranking_set.positive_index.numel() for ranking_set in sets]
        layout = SetLayout.of([ranking_set.logits.numel() for ranking_set in sets], positive_counts, device)
        positive_index = torch.cat([ranking_set.positive_index.reshape(-1) for ranking_set in sets])
        positive_index = positive_index + layout.positive_rows[0]
        num_positives, exchange = exchange_checked(lambda: sum(positive_counts), device, group)
        chosen = SegmentedPath(layout, choose_path(path, device))
        return RankingInputs(logits, positive_index, _flat_valid(sets), num_positives, exchange, chosen)

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
        positive (``zero``: the loss of every ranking, 0 of the output dtype, connected to the logits), otherwise
        ``from_ranking(self.rank(delta, positive_values))`` with autocast off (float64 relation sums)."""
        logits = self.logits
        if self.num_positives == 0:
            return without_positives(self.path.zeros(zero_connected(logits, output_dtype(logits))))
        with torch.autocast(device_type=logits.device.type, enabled=False):
            return from_ranking(self.rank(delta, positive_values))
