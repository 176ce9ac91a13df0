"""``box_normaliser="global"`` with ``box_terms="model"``: on one process it changes nothing; where it does not apply
it is refused. On 2 gloo workers (tests/hf/test_hf_global_ranking.py, :func:`box_normaliser_cases.check_worker`): HF's
RT-DETR v2 and D-FINE divide their box terms by the worker's own targets; rescaled, each term's gradients over the world
size (every decoder layer, the denoising groups, the encoder's top-k, D-FINE's FGL) and its value averaged over the
workers equal one process's on both images, normalised by the targets of all workers (float64); D-FINE's DDF is left as
it is; the twin with the model's normaliser differs."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.detr import SetRankingLoss, set_prediction_criterion, use_ranking_loss

from .box_normaliser_cases import MODELS, WHOLE_BATCH, box_terms, loss_inputs
from .tiny_detrs import tiny_detr


@pytest.mark.parametrize("name", MODELS)
def test_one_process_the_global_normaliser_changes_nothing(name):
    inputs = loss_inputs(name)
    result, expected = (box_terms(name, inputs, WHOLE_BATCH, normaliser) for normaliser in ("global", "model"))
    assert result.keys() == expected.keys()
    assert all(torch.equal(value, expected[key]) for key, value in result.items())


def test_the_global_normaliser_is_refused_where_it_does_not_apply():
    criterion = set_prediction_criterion("RankSortCriterion")
    with pytest.raises(ValueError, match="box_normaliser must be one of"):
        SetRankingLoss(criterion, box_terms="model", box_normaliser="all")
    with pytest.raises(ValueError, match="applies to box_terms='model' only"):
        SetRankingLoss(criterion, box_terms="fixed", box_normaliser="global")
    for name, reason in [("deformable_detr", "ImageLoss"), ("detr", "ImageLoss"), ("deimv2", "dense one-to-one")]:
        with pytest.raises(ValueError, match=f"not supported for .*{reason}"):
            use_ranking_loss(tiny_detr(name), criterion, box_terms="model", box_normaliser="global")
    for name, config in [("deimv2", {"use_dense_one_to_one": False}), ("lw_detr", {})]:
        use_ranking_loss(tiny_detr(name, **config), criterion, box_terms="model", box_normaliser="global")
