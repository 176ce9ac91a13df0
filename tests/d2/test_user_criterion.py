"""A criterion registered by a user's module (docs/criteria.md) trains every kind of head, selected by config alone."""

from __future__ import annotations

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from alrp_d2.engine.self_balance import find_ranking_losses

from .docs_criterion import load_docs_criterion
from .tiny_configs import tiny_batch, tiny_faster_rcnn_cfg, tiny_retinanet_cfg

CASES = {
    "retinanet": (tiny_retinanet_cfg, {"retinanet"}),
    "faster_rcnn": (tiny_faster_rcnn_cfg, {"rpn", "box"}),
}


@pytest.mark.parametrize("detector", list(CASES))
def test_a_user_criterion_trains_the_detector_by_its_config_name(detector):
    module = load_docs_criterion()
    assert not module.CrossEntropyCriterion.__module__.startswith("alrp_d2")
    build, heads = CASES[detector]
    torch.manual_seed(0)
    model = build_model(build(CRITERION="CrossEntropyCriterion")).train()
    losses_of = find_ranking_losses(model)
    assert set(losses_of) == heads
    assert all(isinstance(loss.criterion, module.CrossEntropyCriterion) for loss in losses_of.values())
    with EventStorage():
        losses = model(tiny_batch())
    assert {f"loss_{head}_{part}" for head in heads for part in ("cls", "loc")} <= set(losses)
    assert all(torch.isfinite(value) and value > 0 for value in losses.values())
    sum(losses.values()).backward()
    gradients = [p.grad.abs().sum() for p in model.parameters() if p.grad is not None]
    assert gradients and sum(gradients) > 0


def test_an_unknown_criterion_names_the_key_and_the_registered_ones():
    with pytest.raises(ValueError, match=r"MODEL.ALRP.CRITERION='Nope'.*AlrpCriterion.*RankSortCriterion"):
        build_model(tiny_retinanet_cfg(CRITERION="Nope"))
