"""``use_ranking_loss(model, criterion)`` (``box_terms="model"``, the default) on every supported Hugging Face DETR:
the model's own box terms (L1, GIoU, D-FINE's and DEIMv2's FGL and DDF) exactly as the model computes them, its
classification terms replaced by the ranking terms of the same sets; training lowers the ranking term;
``restore_loss`` gives back the stock loss; the labels are checked before the model's matcher."""

from __future__ import annotations

from typing import Dict

import pytest
import torch

from alrp_d2.detr import restore_loss, set_prediction_criterion, use_ranking_loss
from alrp_d2.detr.hf_families import LOSS_FAMILIES
from alrp_d2.losses import NonFiniteInputError

from .tiny_detrs import OWN_BOX_TERMS_DETRS, TINY_DETRS, fixed_batch, seeded_forward, tiny_detr

MODELS = [name for name in TINY_DETRS if name != "deformable_detr"] + list(OWN_BOX_TERMS_DETRS)


def ranked(name: str):
    """The tiny ``name`` switched to Rank & Sort Loss with the default ``box_terms``."""
    return use_ranking_loss(tiny_detr(name), set_prediction_criterion("RankSortCriterion"))


def classification_weight(model, key: str) -> float:
    """The weight of ``key`` in the model's own ``loss`` (1 where HF's ``loss_dict`` is weighted already)."""
    family = LOSS_FAMILIES[model.loss_type]
    return 1.0 if family.weights is None else family.weights(model.config)[key]


@pytest.mark.parametrize("name", MODELS)
def test_the_models_box_terms_and_ranked_classification(name):
    batch = fixed_batch()
    stock = seeded_forward(tiny_detr(name), batch)
    model = ranked(name)
    assert model.loss_function.loss.box_terms == "model"
    outputs = seeded_forward(model, batch)
    key = LOSS_FAMILIES[model.loss_type].classification_key
    suffixes = {k[len(key) :] for k in stock.loss_dict if k == key or k.startswith(key + "_")}
    assert (
        "" in suffixes
        and len(suffixes) >= (1 if name == "yolos" else 2)
        and set(outputs.loss_dict)
        == {k for k in stock.loss_dict if k[len(key) :] not in suffixes or not k.startswith(key)}
        | {"loss_rank" + suffix for suffix in suffixes}
    )
    for term, value in stock.loss_dict.items():
        if not term.startswith(key):
            torch.testing.assert_close(outputs.loss_dict[term], value, rtol=0, atol=1e-6)
    weight = classification_weight(model, key)
    classification = sum(weight * stock.loss_dict[key + suffix] for suffix in suffixes)
    ranking = sum(outputs.loss_dict["loss_rank" + suffix] for suffix in suffixes)
    torch.testing.assert_close(outputs.loss, stock.loss - classification + ranking, rtol=1e-5, atol=1e-5)


#: The tiny RF-DETR's and DAB-DETR's last-layer ranking terms stay flat over a short run (within 0.01 of their start
#: over 12 steps at 1e-2 to 1e-1; their class heads get gradients): not asserted.
TRAINED = [name for name in MODELS if name not in ("rf_detr", "dab_detr")]


@pytest.mark.parametrize("name", TRAINED)
def test_a_short_adam_run_lowers_the_last_layers_ranking_term(name):
    """AP Loss of the last decoder layer, its mean over the last 3 of 12 Adam steps against the first (its matching
    changes from step to step: single values are noisy)."""
    model = use_ranking_loss(tiny_detr(name), set_prediction_criterion("APCriterion"), box_terms="model")
    batch = fixed_batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    values = []
    for _ in range(12):
        outputs = seeded_forward(model, batch)
        values.append(float(outputs.loss_dict["loss_rank"].detach()))
        optimizer.zero_grad()
        outputs.loss.backward()
        optimizer.step()
    assert sum(values[-3:]) / 3 < values[0], values


@pytest.mark.parametrize("name", list(OWN_BOX_TERMS_DETRS))
def test_restore_loss_gives_back_the_stock_loss(name):
    batch = fixed_batch()
    stock = seeded_forward(tiny_detr(name), batch)
    restored = seeded_forward(restore_loss(ranked(name)), batch)
    assert restored.loss_dict.keys() == stock.loss_dict.keys()
    torch.testing.assert_close(restored.loss, stock.loss, rtol=0, atol=0)


@pytest.mark.parametrize("box_terms", ["value_balanced", "fixed", "own"])
@pytest.mark.parametrize("name", ["d_fine", "detr"])
def test_a_model_without_the_own_modes_says_so(name, box_terms):
    model = tiny_detr(name)
    with pytest.raises(ValueError, match=f"{type(model).__name__} takes box_terms='model'.*RTDetrForObjectDetection"):
        use_ranking_loss(model, set_prediction_criterion("AlrpCriterion"), box_terms=box_terms)


def bad_labels() -> Dict[str, list]:
    labels = fixed_batch()["labels"]
    second = labels[1]
    return {
        r'labels\[1\]\["class_labels"\] holds class 3, outside \[0, num_labels = 3\)': [
            labels[0],
            {**second, "class_labels": torch.tensor([3])},
        ],
        r"labels\[0\].*outside \[0, 1\] \(up to 448\).*Hugging Face's image processors": [
            {**labels[0], "boxes": labels[0]["boxes"] * 640},
            second,
        ],
        r"labels\[1\].*zero or negative width": [labels[0], {**second, "boxes": torch.tensor([[0.5, 0.5, -0.1, 0.2]])}],
        r"labels\[1\].*NaN or infinite": [
            labels[0],
            {**second, "boxes": torch.tensor([[0.5, float("nan"), 0.1, 0.2]])},
        ],
    }


@pytest.mark.parametrize("message", list(bad_labels()))
@pytest.mark.parametrize("name", ["rt_detr", "d_fine", "deformable_detr_two_stage"])
def test_bad_labels_are_named_before_the_matcher(name, message):
    model = ranked(name)
    error = NonFiniteInputError if "NaN" in message else ValueError
    with pytest.raises(error, match=message):
        model(pixel_values=fixed_batch()["pixel_values"], labels=bad_labels()[message])
