"""A switched Hugging Face DETR runs no more Hungarian matchings (``scipy.optimize.linear_sum_assignment`` calls) in
a training step than the stock model, on every supported class: ``box_terms="model"`` ranks each set with the
indices of the model's own matching; the own-box-term modes match each set once (the encoder proposals of a two-stage
Deformable-DETR, a set HF's loss leaves out, too). scipy matches one image a call."""

from __future__ import annotations

import sys
from typing import Any, Iterator, List

import pytest
import scipy.optimize
import torch

from alrp_d2.detr import set_prediction_criterion, use_ranking_loss
from alrp_d2.detr.hf_model_losses import RecordedRTDetrLoss, recorded_sets

from .tiny_detrs import OWN_BOX_TERMS_DETRS, TINY_DETRS, fixed_batch, seeded_forward, tiny_detr


@pytest.fixture
def matchings(monkeypatch: pytest.MonkeyPatch) -> Iterator[List[int]]:
    """A list to which every ``linear_sum_assignment`` call appends the size of its cost matrix: scipy's function
    counted wherever a loaded module imported it by name."""
    calls: List[int] = []
    original = scipy.optimize.linear_sum_assignment

    def counted(cost: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(cost.shape[0] * cost.shape[1])
        return original(cost, *args, **kwargs)

    holders = [
        module for module in list(sys.modules.values()) if getattr(module, "linear_sum_assignment", None) is original
    ]
    assert any(module.__name__.startswith("transformers.loss") for module in holders)
    for module in holders:
        monkeypatch.setattr(module, "linear_sum_assignment", counted)
    yield calls


def step_matchings(model: Any, calls: List[int]) -> int:
    """The matchings of one training forward and backward of ``model`` on the fixed batch."""
    del calls[:]
    seeded_forward(model, fixed_batch()).loss.backward()
    return len(calls)


@pytest.mark.parametrize("name", list(TINY_DETRS) + list(OWN_BOX_TERMS_DETRS))
def test_the_model_mode_matches_each_set_once_as_the_stock_model(name, matchings):
    stock = step_matchings(tiny_detr(name), matchings)
    criterion = set_prediction_criterion("RankSortCriterion")
    switched = step_matchings(use_ranking_loss(tiny_detr(name), criterion, box_terms="model"), matchings)
    assert stock > 0 and switched == stock


@pytest.mark.parametrize("box_terms", ["value_balanced", "fixed", "own"])
@pytest.mark.parametrize("name", list(TINY_DETRS))
def test_the_own_box_term_modes_match_each_set_once(name, box_terms, matchings):
    stock = step_matchings(tiny_detr(name), matchings)
    criterion = set_prediction_criterion("RankSortCriterion")
    switched = step_matchings(use_ranking_loss(tiny_detr(name), criterion, box_terms=box_terms), matchings)
    encoder = len(fixed_batch()["labels"]) if name == "deformable_detr_two_stage" else 0  # one matching an image
    assert switched == stock + encoder


def test_a_set_the_criterion_did_not_visit_is_named():
    """A transformers version whose criterion lays out its sets otherwise: the sets recorded and expected named."""
    model = tiny_detr("rt_detr")
    criterion = RecordedRTDetrLoss(model.config)
    loss_outputs = {"logits": torch.zeros(1, 4, 3), "pred_boxes": torch.zeros(1, 4, 4), "auxiliary_outputs": [{}]}
    with pytest.raises(
        RuntimeError, match=r"RTDetrLoss computed its 'vfl' term for the sets \[\], .* \['', '_aux_0'\]"
    ):
        recorded_sets(criterion, loss_outputs, "_aux_")
