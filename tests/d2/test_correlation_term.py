"""Correlation Loss as a term of every head (``loss_<head>_corr``): the per-level mean of the official heads against
a loop over the levels, every head of the project, the focal-loss RetinaNet and FoveaBox with it, the configs."""

from __future__ import annotations

import functools

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from alrp_d2.criteria import CorrelationTerm, PositiveTargets
from alrp_d2.losses import correlation_loss
from alrp_d2.losses.localisation_error import paired_iou_giou
from alrp_d2.modeling import CorrelationRetinaNet

from .given_boxes import GivenBoxes
from .tiny_configs import tiny_batch, tiny_faster_rcnn_cfg, tiny_rank_sort_cfg, tiny_retinanet_cfg


def per_level_loop(scores, ious, levels, num_levels, kind):
    """The official ``use_loss_single`` branch: each level with >= 2 positives counts (a NaN correlation as 0),
    the mean of their losses."""
    losses = []
    for level in range(num_levels):
        chosen = levels == level
        if int(chosen.sum()) > 1:
            loss = correlation_loss(scores[chosen], ious[chosen], kind)
            losses.append(torch.nan_to_num(loss, nan=0.0))
    return sum(losses) / len(losses) if losses else scores.sum() * 0


@pytest.mark.parametrize("kind", ["spearman", "concordance", "pearson"])
@pytest.mark.parametrize("per_level", [True, False])
def test_term_is_the_official_placement(kind, per_level):
    gen = torch.Generator().manual_seed(4)
    rows, num_classes, num_levels = 40, 3, 4
    logits = torch.randn(rows, num_classes, generator=gen, dtype=torch.float64, requires_grad=True)
    gt = torch.rand(rows, 2, generator=gen, dtype=torch.float64) * 50
    gt = torch.cat([gt, gt + 20], 1)
    pred = gt + torch.randn(rows, 4, generator=gen, dtype=torch.float64) * 3
    # Level 3 has a single positive: it does not count.
    levels = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 3] * 4)
    labels = torch.full((rows,), num_classes)
    labels[:10] = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    positives = PositiveTargets.of_labels(labels, num_classes)
    term = CorrelationTerm(kind, weight=0.3, per_level=per_level)
    value = term(logits, positives, GivenBoxes(pred, gt, levels, num_levels), None)

    scores = logits[positives.row, positives.label].sigmoid()
    ious = paired_iou_giou(pred[:10], gt[:10])[0]
    if per_level:
        expected = 0.3 * per_level_loop(scores, ious, levels[:10], num_levels, kind)
    else:
        expected = 0.3 * correlation_loss(scores, ious, kind)
    torch.testing.assert_close(value, expected, rtol=1e-10, atol=1e-12)
    (grad,) = torch.autograd.grad(value, [logits])
    (expected_grad,) = torch.autograd.grad(expected, [logits])
    torch.testing.assert_close(grad, expected_grad, rtol=1e-8, atol=1e-12)


def tiny_fcos_cfg(**alrp):
    cfg = tiny_retinanet_cfg("alrp_fcos_R50_500.yaml", **alrp)
    cfg.MODEL.FCOS.NUM_CLASSES, cfg.MODEL.FCOS.NUM_CONVS, cfg.MODEL.FCOS.NORM = 3, 1, ""
    return cfg


def tiny_foveabox_cfg(config: str = "foveabox_alrp_R50_500.yaml", **alrp):
    cfg = tiny_retinanet_cfg(config, **alrp)
    cfg.MODEL.FOVEABOX.NUM_CLASSES, cfg.MODEL.FOVEABOX.NUM_CONVS = 3, 1
    return cfg


DETECTORS = {
    "retinanet": (tiny_retinanet_cfg, {"retinanet"}),
    "faster_rcnn": (tiny_faster_rcnn_cfg, {"rpn", "box"}),
    "rs_atss": (functools.partial(tiny_rank_sort_cfg, "rs_atss_R50_FPN_1x.yaml"), {"atss"}),
    "fcos": (tiny_fcos_cfg, {"fcos"}),
    "foveabox": (tiny_foveabox_cfg, {"fovea"}),
}


@pytest.mark.parametrize("detector", list(DETECTORS))
def test_every_head_takes_the_term(detector):
    build, heads = DETECTORS[detector]
    torch.manual_seed(0)
    model = build_model(build(CORR_WEIGHT=0.2, CORR_KIND="concordance")).train()
    with EventStorage():
        losses = model(tiny_batch())
    assert {f"loss_{head}_corr" for head in heads} <= set(losses)
    assert all(torch.isfinite(value) for value in losses.values())
    sum(losses.values()).backward()
    assert sum(p.grad.abs().sum() for p in model.parameters() if p.grad is not None) > 0


def test_detectron2_retinanet_with_correlation_loss():
    cfg = tiny_retinanet_cfg(CORR_WEIGHT=0.1, CORR_KIND="spearman")
    cfg.MODEL.META_ARCHITECTURE = "CorrelationRetinaNet"
    torch.manual_seed(0)
    model = build_model(cfg).train()
    assert isinstance(model, CorrelationRetinaNet)
    with EventStorage():
        losses = model(tiny_batch())
    assert set(losses) == {"loss_cls", "loss_box_reg", "loss_retinanet_corr"}
    corr = losses["loss_retinanet_corr"]
    assert torch.isfinite(corr) and 0 < corr.item() <= 0.2
    (grad,) = torch.autograd.grad(corr, [model.head.cls_score.weight])
    assert grad.abs().sum() > 0
    cfg.MODEL.ALRP.CORR_WEIGHT = 0.0
    with pytest.raises(ValueError, match="MODEL.ALRP.CORR_WEIGHT"):
        build_model(cfg)


@pytest.mark.parametrize("key, value", [("CORR_KIND", "kendall"), ("CORR_WEIGHT", -1.0)])
def test_bad_correlation_keys_name_the_key(key, value):
    with pytest.raises(ValueError, match=f"MODEL.ALRP.{key}"):
        build_model(tiny_retinanet_cfg(**{"CORR_WEIGHT": 0.1, key: value}))


@pytest.mark.parametrize(
    "build, corr_loss",
    [
        (functools.partial(tiny_retinanet_cfg, "corr_retinanet_R50_FPN_1x.yaml"), "loss_retinanet_corr"),
        (functools.partial(tiny_rank_sort_cfg, "rs_corr_atss_R50_FPN_1x.yaml"), "loss_atss_corr"),
        (functools.partial(tiny_foveabox_cfg, "foveabox_corr_R50_500.yaml"), "loss_fovea_corr"),
    ],
    ids=["corr_retinanet", "rs_corr_atss", "corr_foveabox"],
)
def test_correlation_configs_take_a_training_step(build, corr_loss):
    torch.manual_seed(0)
    model = build_model(build()).train()
    with EventStorage():
        losses = model(tiny_batch())
    assert corr_loss in losses and all(torch.isfinite(value) for value in losses.values())
    sum(losses.values()).backward()
