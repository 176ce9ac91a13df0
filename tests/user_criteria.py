"""Criteria as a user writes them (docs/criteria.md, "Write your own criterion"): subclasses of the project's
criteria that override ``__call__``, the one method every path calls (dense heads, box heads, DETR sets)."""

from __future__ import annotations

from typing import Any, Callable, List, Sequence

from alrp_d2.criteria import CriterionOutput, CriterionSet, RankingCriterion


def overridden(criterion: RankingCriterion, edit: Callable[[CriterionOutput], Any], name: str) -> RankingCriterion:
    """``criterion`` as an instance of a user's subclass ``name`` whose ``__call__`` returns ``edit`` of every
    output of the criterion's own."""
    parent = type(criterion)

    def edited(self: RankingCriterion, sets: Sequence[CriterionSet], group: Any) -> List[Any]:
        return [edit(output) for output in parent.__call__(self, sets, group)]

    user_class = type(name, (parent,), {"__call__": edited})
    user = user_class.__new__(user_class)
    user.__dict__.update(vars(criterion))
    return user


def zeroed(criterion: RankingCriterion) -> RankingCriterion:
    """:func:`overridden`: ``loss_cls`` times 0 (still connected to the logits), every other field the criterion's."""
    return overridden(criterion, lambda output: output._replace(loss_cls=output.loss_cls * 0.0), "ZeroedRanking")
