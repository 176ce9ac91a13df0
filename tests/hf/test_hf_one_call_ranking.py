"""A step of a Hugging Face DETR switched by ``use_ranking_loss`` ranks all its sets in one criterion call
(``SetRankingLoss.forward``): its loss terms and the parameters' gradients equal those of the same model ranking
its sets one by one (a criterion that calls its own once a set), in float64 to 1e-6: a tiny RT-DETR v2 in training
(decoder layers, denoising sets, the encoder's proposals) with each criterion, and D-FINE with its own box terms."""

from __future__ import annotations

from typing import Any, Dict

import pytest
import torch

from alrp_d2.detr import set_prediction_criterion, use_ranking_loss

from ..detr_step_cases import CRITERIA, per_set_criterion
from .tiny_detrs import SUFFIXES, fixed_batch, seeded_forward, tiny_detr


def in_float64(batch: Dict[str, Any]) -> Dict[str, Any]:
    labels = [{**label, "boxes": label["boxes"].double()} for label in batch["labels"]]
    return {"pixel_values": batch["pixel_values"].double(), "labels": labels}


def step(name: str, criterion, training: bool = True, **options: Any) -> Dict[str, torch.Tensor]:
    """The loss terms and the parameters' gradients of one seeded float64 step of the tiny ``name``."""
    model = use_ranking_loss(tiny_detr(name), criterion, **options).double().train(training)
    outputs = seeded_forward(model, in_float64(fixed_batch(batch_size=3)))
    outputs.loss.backward()
    gradients = {f"grad.{n}": p.grad for n, p in model.named_parameters() if p.grad is not None}
    return {"loss": outputs.loss.detach(), **{k: v.detach() for k, v in outputs.loss_dict.items()}, **gradients}


def assert_same_step(actual: Dict[str, torch.Tensor], expected: Dict[str, torch.Tensor]) -> None:
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        torch.testing.assert_close(actual[key], value, rtol=1e-6, atol=1e-9, msg=key)


@pytest.mark.parametrize("name", CRITERIA)
def test_rt_detr_v2_step_ranked_in_one_call(name):
    actual = step("rt_detr_v2", set_prediction_criterion(name), box_terms="value_balanced")
    expected = step("rt_detr_v2", per_set_criterion(name), box_terms="value_balanced")
    assert {key[len("loss_rank") :] for key in actual if key.startswith("loss_rank")} == SUFFIXES["rt_detr_v2"]
    assert_same_step(actual, expected)
    assert float(actual["loss_rank_dn_0"]) > 0


def test_d_fine_with_its_own_box_terms_ranked_in_one_call():
    """float64 in eval mode (the last layer and the first, ranked in one call): HF's D-FINE loss fails in float64 in
    training (its FGL term writes float64 weights into a float32 tensor, transformers 5.23). In training, float32,
    with four layers: nine sets (the layers and their denoising sets), the ranking terms to float32 rounding."""
    criterion = set_prediction_criterion("RankSortCriterion")
    actual = step("d_fine", criterion, training=False, box_terms="model")
    expected = step("d_fine", per_set_criterion("RankSortCriterion"), training=False, box_terms="model")
    assert {key for key in actual if key.startswith("loss_rank")} == {"loss_rank", "loss_rank_aux_0"}
    assert_same_step(actual, expected)
    batch = fixed_batch(batch_size=3)
    terms = []
    for ranking in (criterion, per_set_criterion("RankSortCriterion")):
        model = use_ranking_loss(tiny_detr("d_fine", decoder_layers=4), ranking, box_terms="model")
        with torch.no_grad():
            terms.append({k: v for k, v in seeded_forward(model, batch).loss_dict.items() if k.startswith("loss_rank")})
    assert len(terms[0]) == 9 and sorted(terms[0]) == sorted(terms[1])
    for key, value in terms[1].items():
        torch.testing.assert_close(terms[0][key], value, rtol=1e-6, atol=1e-7, msg=key)
