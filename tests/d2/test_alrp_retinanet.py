"""aLRP RetinaNet: training steps of every variant, robustness, inference."""

import itertools

import pytest
import torch
from detectron2.engine import SimpleTrainer
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from alrp_d2.config import setup_cfg

from .tiny_configs import ranking_statistics, tiny_batch, tiny_retinanet_cfg


@pytest.mark.parametrize(
    "matcher,loc_error,criterion",
    itertools.product(["iou", "atss"], ["giou", "iou"], ["AlrpCriterion", "APCriterion"]),
)
def test_training_step(matcher, loc_error, criterion):
    torch.manual_seed(0)
    model = build_model(tiny_retinanet_cfg(MATCHER=matcher, LOC_ERROR=loc_error, CRITERION=criterion))
    model.train()
    with EventStorage():
        losses = model(tiny_batch())
        sum(losses.values()).backward()
    assert set(losses) == {"loss_retinanet_cls", "loss_retinanet_loc"}
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    # At random init nearly every negative outranks the positives: L_cls is close to 1.
    assert 0.9 < losses["loss_retinanet_cls"].item() <= 1.0
    # The localisation part is reported with the initial self-balance weight of 50.
    logged = ranking_statistics(model)["retinanet"]
    assert losses["loss_retinanet_loc"].item() == pytest.approx(50 * logged["loc"], rel=1e-5)
    assert logged["ratio"] == pytest.approx(1.0, rel=1e-4)
    head = model.head
    assert head.cls_score.weight.grad.abs().sum() > 0 and head.bbox_pred.weight.grad.abs().sum() > 0


def test_constant_localisation_weight_without_self_balance():
    model = build_model(tiny_retinanet_cfg(SB_ENABLED=False, LOC_WEIGHT=5.0))
    model.train()
    with EventStorage():
        losses = model(tiny_batch())
    assert losses["loss_retinanet_loc"].item() == pytest.approx(5.0 * ranking_statistics(model)["retinanet"]["loc"])


@pytest.mark.parametrize("matcher", ["iou", "atss"])
def test_batch_without_positives_gives_finite_zero_loss(matcher):
    model = build_model(tiny_retinanet_cfg(MATCHER=matcher))
    model.train()
    with EventStorage():
        losses = model(tiny_batch(with_objects=False))
        total = sum(losses.values())
        total.backward()
    assert total.item() == 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_non_finite_logits_stop_training_with_detectron2_error():
    model = build_model(tiny_retinanet_cfg())
    model.train()
    with torch.no_grad():
        model.head.cls_score.bias[0] = float("nan")
    trainer = SimpleTrainer(model, itertools.repeat(tiny_batch()), torch.optim.SGD(model.parameters(), lr=0.0))
    with pytest.raises(FloatingPointError, match="Loss became infinite or NaN"):
        trainer.train(0, 1)


@pytest.mark.parametrize(
    "key,value",
    [
        ("DELTA", 0.0),
        ("LOC_ERROR", "l1"),
        ("TAU", 1.0),
        ("CRITERION", "FocalCriterion"),
        ("DELTA", None),
        ("SB_INIT_WEIGHT", -1.0),
        ("LOC_WEIGHT", 0.0),
        ("MATCHER", "hungarian"),
        ("ATSS_TOPK", 0),  # read with MATCHER "atss"
    ],
)
def test_bad_config_fails_at_build_time_naming_the_key(key, value):
    """The localisation weight read is SB_INIT_WEIGHT with self-balance, LOC_WEIGHT without; ATSS_TOPK with ATSS."""
    matcher = {"MATCHER": "atss"} if key == "ATSS_TOPK" else {}
    with pytest.raises(ValueError, match=f"MODEL.ALRP.{key}"):
        build_model(tiny_retinanet_cfg(**{"SB_ENABLED": key != "LOC_WEIGHT", **matcher, key: value}))


def test_a_moved_key_names_its_new_key():
    with pytest.raises(KeyError, match="MODEL.ALRP.CLS_LOSS was renamed to MODEL.ALRP.CRITERION"):
        setup_cfg(None, ["MODEL.ALRP.CLS_LOSS", "alrp"])
    with pytest.raises(KeyError, match="MODEL.FOVEABOX.AP_LOC_LOSS was renamed to MODEL.ALRP.AP_LOC_LOSS"):
        setup_cfg(None, ["MODEL.FOVEABOX.AP_LOC_LOSS", "giou"])


def test_inference_returns_instances_with_probabilities():
    model = build_model(tiny_retinanet_cfg())
    model.eval()
    with torch.no_grad():
        outputs = model([{"image": torch.rand(3, 96, 128) * 255, "height": 192, "width": 256}])
    result = outputs[0]["instances"]
    assert result.image_size == (192, 256)
    assert len(result) <= 100
    assert torch.all((result.scores >= 0.05) & (result.scores <= 1))
