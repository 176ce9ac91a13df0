"""The inputs of the ranking losses: their sets, each by its positives' flat indices and a validity mask
(:class:`RankingSet`, not validated) or by a label of every entry (:class:`LabelledSet`, validated once), as the
losses compute them (:class:`RankingInputs`)."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union, cast

import torch
from torch import Tensor

from .error_driven import output_dtype, zero_connected
from .global_ranking import PositiveExchange, RankingGroup, exchange_checked
from .input_checks import check_rank_sort_inputs, check_ranking_inputs
from .ranking_path import RankingPath, choose_path
from .relation_sums import PositiveRanking
from .segmented_path import SegmentedPath
from .serial_indexing import take_rows
from .set_layout import SetLayout

__all__ = ["TARGETS", "AnySet", "LabelledSet", "RankingInputs", "RankingSet", "set_values"]

Terms = TypeVar("Terms", bound=tuple)


class RankingSet(NamedTuple):
    """One ranking (e.g. a head's batch, or one decoder layer's predictions of a DETR step) by its positives' indices:
    what a detection head already has, not validated.

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

    def checked_positives(self, values: Optional[str]) -> int:
        """The number of positives (nothing is validated)."""
        return self.positive_index.numel()

    def indexed(self, values: Optional[str]) -> RankingSet:
        """The set itself."""
        return self

    def values(self) -> Tensor:
        """The ``positive_values``, which the caller has checked (:func:`set_values`)."""
        if self.positive_values is None:
            raise ValueError("this set has no positive_values")
        return self.positive_values


class LabelledSet(NamedTuple):
    """One ranking by a label of every entry, validated once (shapes, label values, NaN or infinite logits, errors or
    targets raise, naming what is wrong; :mod:`alrp_d2.losses.input_checks`).

    Attributes:
        logits: (M,) the scores.
        labels: (M,) 1 positive, 0 negative, -1 ignored (an integer or bool tensor) for aLRP and AP Loss; for Rank &
            Sort Loss the continuous targets (floating-point): in (0, 1] (e.g. the IoU) for a positive, 0 for a
            negative, < 0 for an ignored entry.
        positive_values: (P,) aLRP Loss's E_loc of the positives in the order in which they appear in ``logits``;
            None for AP and Rank & Sort Loss.
    """

    logits: Tensor
    labels: Tensor
    positive_values: Optional[Tensor] = None

    def checked_positives(self, values: Optional[str]) -> int:
        """Validates the set for a loss whose positives carry ``values`` (:func:`set_values`'s name; ``"targets"``:
        Rank & Sort Loss's continuous labels) with one host synchronisation; returns its number of positives."""
        if values == TARGETS:
            if self.positive_values is not None:
                raise ValueError("Rank & Sort Loss's LabelledSet: its labels are the targets, positive_values None")
            return check_rank_sort_inputs(self.logits, self.labels)
        return check_ranking_inputs(self.logits, self.labels, self.positive_values if values else None)

    def indexed(self, values: Optional[str]) -> RankingSet:
        """The set by its positives' indices (call :meth:`checked_positives` first)."""
        flat = self.labels.detach().reshape(-1)
        if values == TARGETS:
            index = torch.nonzero(flat > 0).squeeze(1)
            return RankingSet(self.logits, index, take_rows(flat, index), flat >= 0)
        return RankingSet(self.logits, torch.nonzero(flat == 1).squeeze(1), self.positive_values, flat >= 0)


#: What the ranking losses take: sets by their positives' indices or by labels, in any mix.
AnySet = Union[RankingSet, LabelledSet]
#: The name of Rank & Sort Loss's positive values (:func:`set_values`), whose label form is continuous targets.
TARGETS = "targets"


def set_values(sets: Sequence[RankingSet], name: Optional[str]) -> Optional[Tensor]:
    """The ``positive_values`` of all sets one after the other (None without a ``name``: the loss takes none); a
    ValueError naming the sets without them."""
    if name is None:
        return None
    missing = [index for index, ranking_set in enumerate(sets) if ranking_set.positive_values is None]
    if missing:
        raise ValueError(f"every set needs its positives' {name} (positive_values); set(s) {missing} have none")
    if len(sets) == 1:
        return sets[0].values()
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
    def of_sets(
        sets: Sequence[AnySet], group: Optional[RankingGroup], path: str, values: Optional[str]
    ) -> Tuple[RankingInputs, Optional[Tensor]]:
        """The inputs of ``sets`` (every set validated first if labelled; with a group, the numbers of positives
        exchanged) and their positives' ``values`` (:func:`set_values`). One set is one ranking; several are ranked
        in one call, each on its own (:mod:`alrp_d2.losses.segmented_path`), their logits flattened one after the
        other. ``path``: one of :data:`alrp_d2.losses.ranking_path.PATHS`."""
        if not sets:
            raise ValueError("a ranking loss needs at least one set")
        device = sets[0].logits.device
        chosen = choose_path(path, device)
        num_positives, exchange = exchange_checked(
            lambda: sum(ranking_set.checked_positives(values) for ranking_set in sets), device, group
        )
        indexed = [ranking_set.indexed(values) for ranking_set in sets]
        positive_values = set_values(indexed, values)
        if len(indexed) == 1:
            logits, positive_index, _, valid = indexed[0]
            return RankingInputs(logits, positive_index, valid, num_positives, exchange, chosen), positive_values
        flat_logits = torch.cat([ranking_set.logits.reshape(-1) for ranking_set in indexed])
        positive_counts = [ranking_set.positive_index.numel() for ranking_set in indexed]
        layout = SetLayout.of([ranking_set.logits.numel() for ranking_set in indexed], positive_counts, device)
        flat_index = torch.cat([ranking_set.positive_index.reshape(-1) for ranking_set in indexed])
        flat_index = flat_index + layout.positive_rows[0]
        inputs = RankingInputs(
            flat_logits, flat_index, _flat_valid(indexed), num_positives, exchange, SegmentedPath(layout, chosen)
        )
        return inputs, positive_values

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
        ``from_ranking(self.rank(delta, positive_values))`` with autocast off (float64 relation sums); every field of
        the result (S,), one value a set (views of one ranking's scalars)."""
        logits = self.logits
        if self.num_positives == 0:
            terms = without_positives(self.path.zeros(zero_connected(logits, output_dtype(logits))))
        else:
            with torch.autocast(device_type=logits.device.type, enabled=False):
                terms = from_ranking(self.rank(delta, positive_values))
        return cast(Terms, type(terms)(*(field.reshape(-1) for field in terms)))
