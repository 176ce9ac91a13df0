"""A user's criterion on a Hugging Face DETR (docs/criteria.md): a subclass that overrides ``__call__`` is what ranks
every set of a switched tiny D-FINE's step, as it is on a dense head (tests/d2/test_user_criterion.py); a criterion
whose ``loss_cls`` is a vector or detached stops the step with an error naming its class and the field."""

from __future__ import annotations

import pytest

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.criteria.output_check import CriterionOutputError
from alrp_d2.detr import use_ranking_loss

from ..user_criteria import overridden, zeroed
from .tiny_detrs import fixed_batch, seeded_forward, tiny_detr


def rank_terms(criterion) -> dict:
    model = use_ranking_loss(tiny_detr("d_fine"), criterion, box_terms="model").train()
    outputs = seeded_forward(model, fixed_batch())
    return {key: float(value.detach()) for key, value in outputs.loss_dict.items() if key.startswith("loss_rank")}


def test_a_subclass_that_overrides_call_changes_every_sets_loss():
    stock = rank_terms(RankSortCriterion(loc_error_kind="giou"))
    user = rank_terms(zeroed(RankSortCriterion(loc_error_kind="giou")))
    assert sorted(user) == sorted(stock) and len(stock) > 1
    assert all(value > 0 for value in stock.values()) and all(value == 0 for value in user.values())


@pytest.mark.parametrize(
    "name, edit, message",
    [
        ("VectorLoss", lambda output: output._replace(loss_cls=output.loss_cls.reshape(1)), r"shape \(1,\)"),
        ("DetachedLoss", lambda output: output._replace(loss_cls=output.loss_cls.detach()), "without a gradient"),
    ],
)
def test_a_loss_that_cannot_train_names_the_criterion_and_the_field(name, edit, message):
    criterion = overridden(RankSortCriterion(loc_error_kind="giou"), edit, name)
    model = use_ranking_loss(tiny_detr("d_fine"), criterion, box_terms="model").train()
    with pytest.raises(CriterionOutputError, match=rf"{name} returned loss_cls .*{message}"):
        seeded_forward(model, fixed_batch())
