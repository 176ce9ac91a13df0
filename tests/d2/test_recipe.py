"""The paper configs reproduce the official recipe: schedules, 800-scale anchors, Faster
R-CNN proposals and RPN low-quality matches, torchvision initialisation with frozen BatchNorm statistics."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch
import torchvision
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.layers import FrozenBatchNorm2d, ShapeSpec
from detectron2.modeling import build_backbone, build_model
from detectron2.modeling.matcher import Matcher
from detectron2.solver import build_optimizer
from detectron2.structures import Boxes, Instances
from detectron2.utils.events import EventStorage
from torch import nn

from alrp_d2.config import validate_alrp_config
from alrp_d2.modeling import FrozenStatsBatchNorm2d
from alrp_d2.modeling.alrp_rpn import MinIoULowQualityMatcher

from ..float64_tolerance import assert_close_float64
from .tiny_configs import load_config, tiny_faster_rcnn_cfg
from .torchvision_weights import torchvision_to_detectron2

COCO_TRAIN_IMAGES = 117_266  # train2017 images with annotations
TORCHVISION_R50 = "detectron2://ImageNetPretrained/torchvision/R-50.pkl"

# config: (images per batch, base lr, lr steps in epochs) of the official config that produced its figure.
SCHEDULES = {
    "alrp_R50_500.yaml": (32, 0.008, (60, 80)),
    "ap_R50_500.yaml": (32, 0.002, (60, 80)),
    "ap_giou_R50_500.yaml": (32, 0.002, (60, 80)),
    "alrp_R50_ATSS_500.yaml": (32, 0.008, (75, 95)),
    "alrp_R101_ATSS_500.yaml": (32, 0.008, (75, 95)),
    "alrp_X101_ATSS_500.yaml": (32, 0.008, (75, 95)),
    "alrp_R101_ATSS_800.yaml": (16, 0.004, (60, 80)),
    "alrp_X101_ATSS_800.yaml": (16, 0.004, (60, 80)),
    "alrp_X101_DCN_ATSS_800.yaml": (16, 0.004, (60, 80)),
    "alrp_faster_rcnn_R50_FPN_500.yaml": (32, 0.012, (75, 95)),
    "faster_rcnn_R50_FPN_500.yaml": (32, 0.04, (75, 95)),
    "faster_rcnn_giou_R50_FPN_500.yaml": (32, 0.04, (75, 95)),
    "foveabox_alrp_R50_500.yaml": (32, 0.008, (75, 95)),
    "foveabox_ap_R50_500.yaml": (32, 0.002, (75, 95)),
    "foveabox_focal_R50_500.yaml": (32, 0.02, (75, 95)),
}
PAPER_CONFIGS = sorted(SCHEDULES)
CROSS_ENTROPY_CONFIGS = ("faster_rcnn_R50_FPN_500.yaml", "faster_rcnn_giou_R50_FPN_500.yaml")


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_schedule_is_the_official_one(name):
    batch, lr, steps = SCHEDULES[name]
    cfg = load_config(name)
    epoch = math.ceil(COCO_TRAIN_IMAGES / batch)
    assert (cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.BASE_LR) == (batch, lr)
    assert cfg.SOLVER.STEPS == tuple(e * epoch for e in steps)
    assert cfg.SOLVER.MAX_ITER == 100 * epoch
    assert (cfg.SOLVER.WARMUP_METHOD, cfg.SOLVER.WARMUP_FACTOR, cfg.SOLVER.WARMUP_ITERS) == ("linear", 0.001, 500)
    if name not in CROSS_ENTROPY_CONFIGS:  # the official heads update the self-balance weight every 3,665 iterations
        assert cfg.MODEL.ALRP.SB_PERIOD == 3665


@pytest.mark.parametrize("name", CROSS_ENTROPY_CONFIGS)
def test_cross_entropy_baselines_follow_the_official_configs(name):
    """faster_rcnn_r50_fpn(_giou)_100e_coco500.py: L1 (not Smooth L1) in both stages, RPN deltas of unit weights,
    256 / 0.5 and 512 / 0.25 sampling with the ground truths added, GIoU weight 10 for the GIoU baseline."""
    cfg = load_config(name)
    rpn, roi_heads, box_head = cfg.MODEL.RPN, cfg.MODEL.ROI_HEADS, cfg.MODEL.ROI_BOX_HEAD
    assert cfg.MODEL.PROPOSAL_GENERATOR.NAME == "MinIoULowQualityRPN" and cfg.MODEL.ALRP.RPN_LOW_QUALITY_MIN_IOU == 0.3
    assert (rpn.BBOX_REG_LOSS_TYPE, rpn.SMOOTH_L1_BETA, rpn.BBOX_REG_WEIGHTS) == ("smooth_l1", 0.0, (1.0,) * 4)
    assert (rpn.BATCH_SIZE_PER_IMAGE, rpn.POSITIVE_FRACTION) == (256, 0.5)
    assert (roi_heads.NAME, roi_heads.BATCH_SIZE_PER_IMAGE, roi_heads.POSITIVE_FRACTION) == (
        "StandardROIHeads",
        512,
        0.25,
    )
    assert roi_heads.PROPOSAL_APPEND_GT and box_head.BBOX_REG_WEIGHTS == (10.0, 10.0, 5.0, 5.0)
    expected = ("giou", 10.0) if "giou" in name else ("smooth_l1", 1.0)
    assert (box_head.BBOX_REG_LOSS_TYPE, box_head.BBOX_REG_LOSS_WEIGHT) == expected
    assert box_head.SMOOTH_L1_BETA == 0.0


def test_dcn_config_is_the_x101_800_config_with_dcnv2_on_res3_to_res5():
    dcn, plain = load_config("alrp_X101_DCN_ATSS_800.yaml"), load_config("alrp_X101_ATSS_800.yaml")
    assert dcn.MODEL.RESNETS.DEFORM_ON_PER_STAGE == [False, True, True, True]
    assert dcn.MODEL.RESNETS.DEFORM_MODULATED and dcn.MODEL.RESNETS.DEFORM_NUM_GROUPS == 1
    dcn.MODEL.RESNETS.DEFORM_ON_PER_STAGE, dcn.MODEL.RESNETS.DEFORM_MODULATED = [False] * 4, False
    assert dcn == plain


def test_official_ap_loss_retinanet_uses_smooth_l1_on_the_deltas():
    """ap_loss_retinanet_r50_fpn_100e_coco500.py: SmoothL1Loss(beta=1.0, loss_weight=1.0) on the encoded deltas;
    the paper's GIoU ablation is its own config."""
    cfg = load_config("ap_R50_500.yaml")
    alrp = cfg.MODEL.ALRP
    assert (alrp.CRITERION, alrp.AP_LOC_LOSS, cfg.MODEL.RETINANET.SMOOTH_L1_LOSS_BETA) == (
        "InterpolatedAPCriterion",
        "smooth_l1",
        1.0,
    )
    assert (alrp.SB_ENABLED, alrp.LOC_WEIGHT) == (False, 1.0)
    assert load_config("ap_giou_R50_500.yaml").MODEL.ALRP.AP_LOC_LOSS == "giou"


@pytest.mark.parametrize("name", ["alrp_R101_ATSS_800.yaml", "alrp_X101_ATSS_800.yaml"])
def test_800_anchors_are_octave_base_4_with_3_scales_per_octave(name):
    cfg = load_config(name)
    stride = [8, 16, 32, 64, 128]
    expected = [4 * s * 2 ** (i / 3) for s in stride for i in range(3)]
    assert [size for level in cfg.MODEL.ANCHOR_GENERATOR.SIZES for size in level] == pytest.approx(expected, abs=1e-4)
    assert cfg.MODEL.ANCHOR_GENERATOR.SIZES[0] == pytest.approx([32.0, 40.3175, 50.7968], abs=1e-4)
    assert cfg.MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS == [[1.0]]
    assert cfg.MODEL.ALRP.MATCHER == "atss"
    anchors = cfg.MODEL.ANCHOR_GENERATOR
    assert (anchors.NAME, anchors.OCTAVE_BASE_SCALE, anchors.SCALES_PER_OCTAVE) == ("OctaveAnchorGenerator", 4.0, 3)


def test_500_anchors_are_octave_base_4_with_2_scales_per_octave():
    cfg = load_config("alrp_R50_ATSS_500.yaml")
    assert cfg.MODEL.ANCHOR_GENERATOR.SIZES[0] == pytest.approx([32.0, 32 * 2**0.5], abs=1e-4)


def rpn_labels(min_iou: float) -> torch.Tensor:
    """Labels the RPN of the paper config gives four anchors: a0 is ground truth A's best anchor at IoU 0.25,
    a1 matches B exactly, a2 is C's best anchor at IoU 1/3 (a low-quality match), a3 overlaps nothing."""
    cfg = tiny_faster_rcnn_cfg()
    cfg.MODEL.ALRP.RPN_LOW_QUALITY_MIN_IOU = min_iou
    rpn = build_model(cfg).proposal_generator
    anchors = Boxes(torch.tensor([[0.0, 0, 10, 10], [100, 100, 140, 140], [200, 220, 240, 260], [300, 300, 310, 310]]))
    gt = Instances((400, 400))
    gt.gt_boxes = Boxes(torch.tensor([[0.0, 0, 20, 20], [100, 100, 140, 140], [200, 200, 240, 240]]))
    gt.gt_classes = torch.zeros(3, dtype=torch.int64)
    (labels,), _ = rpn.label_and_sample_anchors([anchors], [gt])
    return labels


def test_rpn_low_quality_match_needs_iou_0_3():
    cfg = load_config("Base-aLRP-FasterRCNN.yaml")
    assert cfg.MODEL.ALRP.RPN_LOW_QUALITY_MIN_IOU == 0.3
    assert rpn_labels(0.3).tolist() == [0, 1, 1, 0]
    # detectron2's Matcher makes A's best anchor a positive at IoU 0.25.
    assert rpn_labels(0.0).tolist() == [1, 1, 1, 0]


def test_min_iou_matcher():
    """Row 1's best IoU 0.5 (tied) gives two low-quality positives; row 2's best IoU 0.2 gives none at 0.3."""
    iou = torch.tensor([[0.9, 0.1, 0.0, 0.0, 0.0], [0.0, 0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.2, 0.2]])
    assert MinIoULowQualityMatcher([0.3, 0.7], [0, -1, 1], min_iou=0.3)(iou)[1].tolist() == [1, 1, 1, 0, 0]
    assert MinIoULowQualityMatcher([0.3, 0.7], [0, -1, 1], min_iou=0.0)(iou)[1].tolist() == [1, 1, 1, 1, 1]
    # min_iou 0 is detectron2's RPN Matcher, ties included.
    gen = torch.Generator().manual_seed(0)
    iou = (torch.rand(6, 50, generator=gen) * 10).round() / 10
    ours = MinIoULowQualityMatcher([0.3, 0.7], [0, -1, 1], min_iou=0.0)(iou)
    theirs = Matcher([0.3, 0.7], [0, -1, 1], allow_low_quality_matches=True)(iou)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_box_head_trains_on_the_proposals_without_gt_boxes():
    cfg = tiny_faster_rcnn_cfg()
    assert not cfg.MODEL.ROI_HEADS.PROPOSAL_APPEND_GT
    roi_heads = build_model(cfg).roi_heads
    proposals = Instances((96, 128))
    proposals.proposal_boxes = Boxes(torch.tensor([[10.0, 10, 50, 62], [0, 0, 30, 30], [60, 20, 118, 90]]))
    proposals.objectness_logits = torch.zeros(3)
    gt = Instances((96, 128))
    gt.gt_boxes = Boxes(torch.tensor([[10.0, 10, 50, 60], [60, 20, 120, 90]]))
    gt.gt_classes = torch.tensor([0, 2])
    with EventStorage():
        (labelled,) = roi_heads.label_and_sample_proposals([proposals], [gt])
    assert torch.equal(labelled.proposal_boxes.tensor, proposals.proposal_boxes.tensor)
    assert labelled.gt_classes.tolist() == [0, cfg.MODEL.ROI_HEADS.NUM_CLASSES, 2]


def randomised_bn(channels: int, seed: int = 0) -> nn.BatchNorm2d:
    gen = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(channels, generator=gen))
        bn.running_var.copy_(torch.rand(channels, generator=gen) + 0.5)
        bn.weight.copy_(torch.rand(channels, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(channels, generator=gen))
    return bn


def test_frozen_stats_bn_trains_affine_and_keeps_statistics():
    bn = randomised_bn(4)
    frozen = FrozenStatsBatchNorm2d.convert(copy.deepcopy(bn))
    assert type(frozen) is FrozenStatsBatchNorm2d
    frozen.train()
    x = torch.randn(2, 4, 5, 5) * 3 + 1
    out = frozen(x)
    out.square().sum().backward()
    assert torch.equal(frozen.running_mean, bn.running_mean) and torch.equal(frozen.running_var, bn.running_var)
    assert frozen.num_batches_tracked.item() == 0
    assert frozen.weight.grad is not None and frozen.weight.grad.abs().sum() > 0
    assert frozen.bias.grad is not None and frozen.bias.grad.abs().sum() > 0
    torch.testing.assert_close(out, bn.eval()(x))
    # Training-mode BatchNorm normalises by the batch and updates its statistics.
    assert not torch.allclose(out, bn.train()(x))


def norm_layers(module: nn.Module) -> dict:
    return {name: m for name, m in module.named_modules() if isinstance(m, (nn.BatchNorm2d, FrozenBatchNorm2d))}


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_paper_configs_start_from_torchvision_weights(name):
    cfg = load_config(name)
    assert cfg.MODEL.RESNETS.NORM == "FrozenStatsBN" and not cfg.MODEL.RESNETS.STRIDE_IN_1X1
    assert cfg.MODEL.BACKBONE.FREEZE_AT == 2  # official frozen_stages=1: the stem and the first stage
    assert cfg.INPUT.FORMAT == "RGB"
    assert cfg.MODEL.PIXEL_MEAN == pytest.approx([0.485 * 255, 0.456 * 255, 0.406 * 255])
    assert cfg.MODEL.PIXEL_STD == pytest.approx([0.229 * 255, 0.224 * 255, 0.225 * 255])
    assert cfg.SOLVER.WEIGHT_DECAY_NORM == cfg.SOLVER.WEIGHT_DECAY == 1e-4  # mmdet decays every parameter
    if cfg.MODEL.RESNETS.DEPTH == 50:
        assert cfg.MODEL.WEIGHTS == TORCHVISION_R50
    if "X101" in name:
        assert (cfg.MODEL.RESNETS.NUM_GROUPS, cfg.MODEL.RESNETS.WIDTH_PER_GROUP) == (64, 4)


def test_paper_backbone_freezes_bn_statistics_and_trains_bn_affine():
    cfg = load_config("alrp_R50_ATSS_500.yaml")
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.DEVICE = "cpu"
    model = build_model(cfg)
    norms = norm_layers(model.backbone)
    assert norms and all(type(m) in (FrozenBatchNorm2d, FrozenStatsBatchNorm2d) for m in norms.values())
    for name, m in norms.items():
        frozen_stage = name.startswith(("bottom_up.stem.", "bottom_up.res2."))
        assert type(m) is (FrozenBatchNorm2d if frozen_stage else FrozenStatsBatchNorm2d), name
        if not frozen_stage:
            assert m.weight.requires_grad and m.bias.requires_grad
    before = {name: m.running_var.clone() for name, m in norms.items()}
    model.backbone.train()
    model.backbone(torch.rand(1, 3, 64, 64))
    assert all(torch.equal(before[name], m.running_var) for name, m in norms.items())
    bn_weight = model.backbone.bottom_up.res3[0].conv1.norm.weight
    (group,) = [g for g in build_optimizer(cfg, model).param_groups if any(p is bn_weight for p in g["params"])]
    assert group["weight_decay"] == 1e-4


def test_detectron2_frozen_bn_stays_reachable_by_config():
    msra = load_config("alrp_R50_ATSS_500_MSRA.yaml")
    assert msra.MODEL.WEIGHTS == "detectron2://ImageNetPretrained/MSRA/R-50.pkl" and msra.INPUT.FORMAT == "BGR"
    override = load_config("alrp_R50_ATSS_500.yaml")
    override.MODEL.RESNETS.NORM = "FrozenBN"
    for cfg in (msra, override):
        norms = norm_layers(build_backbone(cfg))
        assert norms and all(type(m) is FrozenBatchNorm2d for m in norms.values())


def test_frozen_stats_bn_needs_a_backbone_that_builds_it():
    cfg = load_config("alrp_R50_ATSS_500.yaml")
    cfg.MODEL.BACKBONE.NAME = "build_retinanet_resnet_fpn_backbone"
    with pytest.raises(ValueError, match="MODEL.BACKBONE.NAME"):
        validate_alrp_config(cfg)


# torchvision's ResNet names -> detectron2's: the renaming that detectron2's
# tools/convert-torchvision-to-d2.py (docs/reproducing.md's conversion; not part of the installed package) applies.
@pytest.mark.parametrize("arch,groups,width", [("resnet50", 1, 64), ("resnext50_32x4d", 32, 4)])
def test_converted_torchvision_weights_give_torchvisions_features(tmp_path, arch, groups, width):
    """The paper configs' ResNet, loaded from converted torchvision weights and in training mode, computes the
    features of the torchvision network in eval mode (the official backbone with norm_eval)."""
    torch.manual_seed(0)
    net = getattr(torchvision.models, arch)(weights=None).eval()
    for i, m in enumerate(m for m in net.modules() if isinstance(m, nn.BatchNorm2d)):
        m.load_state_dict(randomised_bn(m.num_features, seed=i).state_dict())
    path = tmp_path / "converted.pkl"
    path.write_bytes(pickle.dumps(torchvision_to_detectron2(net.state_dict())))

    def features(stride_in_1x1: bool) -> list:
        cfg = load_config("alrp_R50_ATSS_500.yaml")
        cfg.MODEL.RESNETS.NUM_GROUPS = groups
        cfg.MODEL.RESNETS.WIDTH_PER_GROUP = width
        cfg.MODEL.RESNETS.STRIDE_IN_1X1 = stride_in_1x1
        cfg.MODEL.RESNETS.OUT_FEATURES = ["res2", "res3", "res4", "res5"]
        bottom_up = build_backbone(cfg, ShapeSpec(channels=3)).bottom_up.double()
        DetectionCheckpointer(bottom_up).load(str(path))
        with torch.no_grad():
            out = bottom_up.train()(x)
        return [out[f"res{i}"] for i in range(2, 6)]

    # In float64: the two networks normalise in different orders (detectron2's scale and shift against
    # torchvision's (x - mean) / std), so that float32 would differ by a rounding that depends on the CPU.
    net.double()
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        y = net.maxpool(net.relu(net.bn1(net.conv1(x))))
        expected = []
        for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
            y = layer(y)
            expected.append(y)
    for ours, theirs in zip(features(stride_in_1x1=False), expected):
        assert_close_float64(ours, theirs, scale=theirs.abs().max().item())
    # detectron2's default (MSRA) layout puts the stride in the 1x1 conv: not torchvision's network.
    assert not torch.allclose(features(stride_in_1x1=True)[-1], expected[-1], rtol=1e-2, atol=1e-2)
