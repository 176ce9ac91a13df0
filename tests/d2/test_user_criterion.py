"""A criterion registered by a user's module (docs/criteria.md) trains every kind of head, selected by config alone
(a YAML key, or its registered name in a LazyConfig)."""

from __future__ import annotations

import pytest
import torch
from detectron2.config import LazyCall as L
from detectron2.config import instantiate
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage
from omegaconf import DictConfig, OmegaConf

from alrp_d2.engine.self_balance import find_ranking_losses
from alrp_d2.lazy_config import ranked_rcnn, registered_criterion
from alrp_d2.modeling import HeadRankingLoss, RankSortMaskHead

from ..user_criteria import zeroed
from .balanced_criterion import BalancedCrossEntropyCriterion
from .docs_criterion import load_docs_criterion
from .tiny_configs import (
    ranking_statistics,
    tiny_batch,
    tiny_faster_rcnn_cfg,
    tiny_rank_sort_cfg,
    tiny_retinanet_cfg,
    with_masks,
)

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


@pytest.mark.parametrize("detector", list(CASES))
def test_a_subclass_that_overrides_call_changes_every_heads_loss(detector):
    """The method docs/criteria.md has users write is the one the heads call: a subclass zeroing ``loss_cls``
    zeroes every head's (a DETR's: tests/test_detr_one_call_ranking.py, tests/hf/test_hf_user_criterion.py)."""
    build, heads = CASES[detector]
    torch.manual_seed(0)
    model = build_model(build()).train()
    with EventStorage():
        stock = model(tiny_batch())
    for loss in find_ranking_losses(model).values():
        loss.criterion = zeroed(loss.criterion)
    with EventStorage():
        losses = model(tiny_batch())
    for head in heads:
        assert float(stock[f"loss_{head}_cls"].detach()) > 0 and float(losses[f"loss_{head}_cls"].detach()) == 0
        torch.testing.assert_close(losses[f"loss_{head}_loc"], stock[f"loss_{head}_loc"])


def test_an_unknown_criterion_names_the_key_and_the_registered_ones():
    with pytest.raises(ValueError, match=r"MODEL.ALRP.CRITERION='Nope'.*AlrpCriterion.*RankSortCriterion"):
        build_model(tiny_retinanet_cfg(CRITERION="Nope"))


def test_a_criterion_that_balances_like_rank_sort_trains_rs_mask_rcnn():
    """RS Mask R-CNN's box and mask heads with a value-balanced criterion of a test module, by config alone: the
    mask loss is weighted by the criterion's positive weights and balanced by its task weight."""
    torch.manual_seed(0)
    cfg = tiny_rank_sort_cfg("quickstart/rs_mask_rcnn_shapes.yaml", CRITERION="BalancedCrossEntropyCriterion")
    model = build_model(cfg).train()
    assert isinstance(model.roi_heads.box_predictor.ranking_loss.criterion, BalancedCrossEntropyCriterion)
    with EventStorage():
        losses = model(with_masks(tiny_batch()))
    box = ranking_statistics(model)["box"]
    assert box["mask"] > 0 and box["mask_weight"] == pytest.approx(box["cls"] / box["mask"], rel=1e-5)
    assert losses["loss_mask"].item() == pytest.approx(losses["loss_box_cls"].item(), rel=1e-5)
    assert losses["loss_box_loc"].item() == pytest.approx(losses["loss_box_cls"].item(), rel=1e-5)
    sum(losses.values()).backward()
    assert model.roi_heads.mask_head.predictor.weight.grad.abs().sum() > 0
    assert model.roi_heads.box_predictor.cls_score.weight.grad.abs().sum() > 0


def test_a_criterion_that_does_not_balance_tasks_is_refused_for_rs_mask_rcnn():
    cfg = tiny_rank_sort_cfg("quickstart/rs_mask_rcnn_shapes.yaml", CRITERION="AlrpCriterion")
    with pytest.raises(ValueError, match=r"MODEL.ALRP.CRITERION='AlrpCriterion': AlrpCriterion does not balance"):
        build_model(cfg)


def balanced_loss(name: str, **kwargs) -> DictConfig:
    """A head's ranking loss with the test module's criterion, by its registered name."""
    criterion = registered_criterion("BalancedCrossEntropyCriterion")
    return L(HeadRankingLoss)(name=name, criterion=criterion, loc_weight=1.0, self_balanced=False, **kwargs)


def test_a_user_criterion_plugs_into_a_lazyconfig_by_its_registered_name():
    """ranked_rcnn on a Mask R-CNN config (the nodes it edits) with a registered criterion of a test module that
    balances tasks gives RS Mask R-CNN's heads, as with Rank & Sort Loss: nothing in alrp_d2.lazy_config knows it."""
    nodes = {"proposal_generator": {}, "roi_heads": {"mask_head": {}, "box_predictor": {}}}
    mask_rcnn = OmegaConf.create(nodes, flags={"allow_objects": True})
    model = ranked_rcnn(mask_rcnn, balanced_loss)
    assert model.roi_heads.mask_head._target_ is RankSortMaskHead
    assert list(model.roi_heads.box_predictor.ranking_loss.balanced_tasks) == ["mask"]
    box_loss = instantiate(model.roi_heads.box_predictor.ranking_loss)
    assert isinstance(box_loss.criterion, BalancedCrossEntropyCriterion)
    with pytest.raises(ValueError, match=r"criterion name='Nope'.*AlrpCriterion.*RankSortCriterion"):
        instantiate(registered_criterion("Nope"))
