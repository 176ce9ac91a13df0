"""aLRP FCOS: detectron2's FCOS assignment and head trained by aLRP Loss, with and without the
centre-ness branch; the yacs-built focal-loss FCOS baseline; configs."""

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.modeling.meta_arch.fcos import FCOS, FCOSHead
from detectron2.utils.events import EventStorage

from alrp_d2.engine import find_ranking_losses
from alrp_d2.modeling import AlrpFCOS, ConfigurableFCOS

from .tiny_configs import load_config, make_tiny, ranking_statistics, tiny_batch

NUM_CLASSES = 3


def tiny_fcos_cfg(config: str = "alrp_fcos_R50_500.yaml", centerness: str = "bce", **alrp):
    cfg = make_tiny(load_config(config), NUM_CLASSES)
    cfg.MODEL.FPN.OUT_CHANNELS = 64  # GroupNorm heads: 32 groups of two channels (P7 is 1 x 1)
    cfg.MODEL.FCOS.NUM_CONVS = 1
    cfg.MODEL.FCOS.NUM_CLASSES = NUM_CLASSES
    cfg.MODEL.FCOS.CENTERNESS = centerness
    for key, value in alrp.items():
        setattr(cfg.MODEL.ALRP, key, value)
    return cfg


@pytest.mark.parametrize("centerness", ["bce", "none"])
@pytest.mark.parametrize("with_objects", [True, False])
def test_training_step(centerness, with_objects):
    torch.manual_seed(0)
    model = build_model(tiny_fcos_cfg(centerness=centerness)).train()
    assert isinstance(model, AlrpFCOS) and isinstance(model, FCOS)
    assert isinstance(model.head, FCOSHead) == (centerness == "bce")
    with EventStorage():
        losses = model(tiny_batch(with_objects))
        sum(losses.values()).backward()
    names = {"loss_fcos_cls", "loss_fcos_loc"} | ({"loss_fcos_ctr"} if centerness == "bce" else set())
    assert set(losses) == names
    assert all(torch.isfinite(v) for v in losses.values())
    head = model.head
    if with_objects:
        assert all(v > 0 for v in losses.values())
        # Random init: nearly every negative outranks the positives; L_loc carries the initial SB weight 50.
        assert 0.9 < losses["loss_fcos_cls"].item() <= 1.0
        logged = ranking_statistics(model)["fcos"]
        assert losses["loss_fcos_loc"].item() == pytest.approx(50 * logged["loc"], rel=1e-5)
        grads = [head.cls_score.weight.grad, head.bbox_pred.weight.grad]
        grads += [head.ctrness.weight.grad] if centerness == "bce" else []
        assert all(g is not None and g.abs().sum() > 0 for g in grads)
    else:
        assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_focal_fcos_baseline_has_the_same_assignment():
    torch.manual_seed(0)
    focal_cfg = tiny_fcos_cfg()
    focal_cfg.MODEL.META_ARCHITECTURE = "ConfigurableFCOS"
    baseline, alrp = build_model(focal_cfg).train(), build_model(tiny_fcos_cfg()).train()
    assert type(baseline) is ConfigurableFCOS
    assert AlrpFCOS.label_anchors is FCOS.label_anchors
    counts, names = [], []
    for model in (baseline, alrp):
        with EventStorage() as storage:
            losses = model(tiny_batch())
            if model is baseline:  # aLRP FCOS's backward on this batch: test_training_step[True-bce]
                sum(losses.values()).backward()
        assert all(torch.isfinite(v) for v in losses.values())
        counts.append(storage.latest()["num_pos_anchors"][0])
        names.append(set(losses))
    assert names[0] == {"loss_fcos_cls", "loss_fcos_loc", "loss_fcos_ctr"}
    assert counts[0] == counts[1] > 0


@pytest.mark.parametrize("centerness", ["bce", "none"])
def test_inference(centerness):
    torch.manual_seed(0)
    cfg = tiny_fcos_cfg(centerness=centerness)
    cfg.MODEL.FCOS.SCORE_THRESH_TEST = 0.0
    model = build_model(cfg).eval()
    with torch.no_grad():
        (output,) = model([{"image": torch.rand(3, 96, 128) * 255, "height": 48, "width": 64}])
    result = output["instances"]
    assert result.image_size == (48, 64) and 0 < len(result) <= cfg.TEST.DETECTIONS_PER_IMAGE
    assert (result.scores >= 0).all() and (result.scores <= 1).all()


def test_centerness_choice_is_validated():
    cfg = tiny_fcos_cfg(centerness="none")
    cfg.MODEL.META_ARCHITECTURE = "ConfigurableFCOS"
    with pytest.raises(ValueError, match="MODEL.FCOS.CENTERNESS"):
        build_model(cfg)
    with pytest.raises(ValueError, match="MODEL.FCOS.CENTERNESS"):
        build_model(tiny_fcos_cfg(centerness="iou"))


def test_self_balance_hook_sees_the_head():
    losses = find_ranking_losses(build_model(tiny_fcos_cfg()))
    assert list(losses) == ["fcos"] and losses["fcos"].self_balanced
    losses = find_ranking_losses(build_model(tiny_fcos_cfg(CRITERION="APCriterion", SB_ENABLED=False)))
    assert (
        list(losses) == ["fcos"]
        and not losses["fcos"].self_balanced
        and type(losses["fcos"].criterion).__name__ == "APCriterion"
    )


@pytest.mark.parametrize("config", ["alrp_fcos_R50_500.yaml", "quickstart/alrp_fcos_shapes.yaml"])
def test_config_builds(config):
    cfg = load_config(config)
    if config == "alrp_fcos_R50_500.yaml":
        assert cfg.SOLVER.BASE_LR == 0.008
        assert cfg.SOLVER.STEPS == (75 * 3665, 95 * 3665) and cfg.SOLVER.MAX_ITER == 100 * 3665
    cfg = make_tiny(cfg, NUM_CLASSES)
    cfg.MODEL.FPN.OUT_CHANNELS = 64
    model = build_model(cfg).eval()
    assert isinstance(model, AlrpFCOS)
    # P6 and P7 come from P5 (FCOS), not from C5 (RetinaNet).
    assert model.backbone.top_block.in_feature == "p5"
    with torch.no_grad():
        (output,) = model([{"image": torch.rand(3, 96, 128) * 255}])
    assert output["instances"].image_size == (96, 128)
