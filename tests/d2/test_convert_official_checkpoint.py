"""tools/convert_official_checkpoint.py: the official aLRP Loss checkpoints (mmdetection 2.1) in this project's
models.

- Key sets: every one of the 14 published models (state-dict names and shapes of the official models built from
  their configs, tests/fixtures/official/keysets) is identified from its checkpoint's config text and converted
  into a state dict that loads strictly into the model of the mapped project config (built on the meta device).
- Numbers: the reduced-width official networks of tests/fixtures/official, converted, give the official backbone
  features C2-C5, FPN levels P3-P6 (P2-P6 for Faster R-CNN), dense-head outputs (given the official FPN features;
  anchors matched by their boxes, which checks the anchor-order permutation) and box-head outputs (given the
  official RoI features), DCNv2 included.
- The command line converts a checkpoint file into one that detectron2's checkpointer loads, and stops naming the
  keys it cannot map.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Dict, List

import pytest
import torch
import torchvision
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.modeling import META_ARCH_REGISTRY, build_model
from torch import Tensor

from alrp_d2.checkpoint import AlrpCheckpointer

from .official_fixtures import KEYSET_DIR, REPO_ROOT, inputs, load_converter, load_keyset, network, reduced_project_cfg

converter = load_converter()

KEYSETS = sorted(KEYSET_DIR.glob("*.json"))
PHASE_B_CONFIGS = {
    "alrp_loss_retinanet_x101_64x4d_fpn_dcn_ATSS_100e_coco800.py",
    "faster_rcnn_r50_fpn_100e_coco500.py",
    "faster_rcnn_r50_fpn_giou_100e_coco500.py",
}
# Relative to the largest magnitude of the official tensor; float32 with the same operations in another order
# (FrozenBatchNorm2d's folded scale, the FPN's additions) differs by at most 5e-7.
TOLERANCE = 1e-5


def relative_error(ours: Tensor, official: Tensor) -> float:
    assert ours.shape == official.shape, (ours.shape, official.shape)
    return ((ours - official).abs().max() / official.abs().max()).item()


def test_fourteen_key_sets():
    assert len(KEYSETS) == 14 == len(converter.OFFICIAL_MODELS)
    assert {k.name.replace(".json", ".py") for k in KEYSETS} == {m.config for m in converter.OFFICIAL_MODELS}


def loc_weights(converted: Dict[str, Tensor]) -> List[str]:
    """The ranking losses' localisation weights, which the converter adds (the official checkpoints have none)."""
    return [key for key in converted if key.endswith("ranking_loss.loc_weight")]


@pytest.mark.parametrize("keyset", KEYSETS, ids=lambda p: p.stem)
def test_published_model_is_identified_from_its_config_text(keyset):
    record = load_keyset(keyset)
    parsed = converter.parse_config_text(record["meta_config"])
    assert converter.identify_official_model(parsed).config == record["official_config"]


def _phase_b(keyset):
    if keyset.name.replace(".json", ".py") in PHASE_B_CONFIGS:
        return pytest.param(keyset, marks=pytest.mark.xfail(strict=True, reason="config added in phase B"))
    return keyset


@pytest.mark.parametrize("keyset", [_phase_b(k) for k in KEYSETS], ids=lambda p: p.stem)
def test_published_model_converts_and_loads_strictly(keyset):
    """The official key set as meta tensors (names and shapes only) through the converter, then a strict load into
    the project model on the meta device."""
    record = load_keyset(keyset)
    official = {k: torch.empty(shape, device="meta") for k, shape in record["state_dict_shapes"].items()}
    project_config, model_info = converter.resolve_project_config({"config": record["meta_config"]}, None)
    cfg = converter.setup_cfg(project_config)
    converted = converter.convert_state_dict(official, cfg)
    with torch.device("meta"):
        model = META_ARCH_REGISTRY.get(cfg.MODEL.META_ARCHITECTURE)(cfg)
    model.load_state_dict(converted, strict=True, assign=True)
    assert model_info.config == record["official_config"]
    assert len(converted) - len(loc_weights(converted)) == len(official)
    alrp = cfg.MODEL.ALRP
    initial = alrp.SB_INIT_WEIGHT if alrp.SB_ENABLED else alrp.LOC_WEIGHT
    assert all(converted[key].item() == initial for key in loc_weights(converted))


@pytest.mark.parametrize(
    "keyset_name, overrides",
    [
        (
            "alrp_loss_retinanet_x101_64x4d_fpn_dcn_ATSS_100e_coco800",
            {"MODEL.RESNETS.DEFORM_ON_PER_STAGE": [False, True, True, True], "MODEL.RESNETS.DEFORM_MODULATED": True},
        ),
        ("faster_rcnn_r50_fpn_100e_coco500", {"MODEL.ROI_HEADS.NAME": "StandardROIHeads"}),
    ],
)
def test_dcn_and_softmax_key_sets_map_onto_detectron2_layers(keyset_name, overrides):
    """Until their project configs exist: the DCN ResNeXt and the softmax box head convert onto detectron2's own
    layers (the closest existing config with the network's keys changed)."""
    record = load_keyset(KEYSET_DIR / f"{keyset_name}.json")
    base = "alrp_X101_ATSS_800.yaml" if "dcn" in keyset_name else "alrp_faster_rcnn_R50_FPN_500.yaml"
    cfg = converter.setup_cfg(str(REPO_ROOT / "configs" / base))
    cfg.defrost()
    for key, value in overrides.items():
        node = cfg
        *path, leaf = key.split(".")
        for part in path:
            node = getattr(node, part)
        setattr(node, leaf, value)
    official = {k: torch.empty(shape, device="meta") for k, shape in record["state_dict_shapes"].items()}
    converted = converter.convert_state_dict(official, cfg)
    assert len(converted) - len(loc_weights(converted)) == len(official)


# ---------------------------------------------------------------------------------------------------------------
# The reduced-width official networks, number for number.
# ---------------------------------------------------------------------------------------------------------------

NETWORKS = ["retinanet_iou", "atss_500", "atss_800", "atss_dcn_800", "foveabox", "faster_rcnn_ce", "faster_rcnn_alrp"]


def _torchvision_modulated_deform_conv(x, offset, mask, weight, bias, stride, padding, dilation, groups, dg):
    return torchvision.ops.deform_conv2d(
        x, offset, weight, bias, stride=stride, padding=padding, dilation=dilation, mask=mask
    )


def project_cfg_for(fixture: Dict):
    """The mapped project config with the fixture's widths; the networks whose configs come later (DCN, softmax
    Faster R-CNN) use the closest config with detectron2's DCN / RPN and box head."""
    name = fixture["meta"]["fixture"]
    reduction = fixture["meta"]["reduction"]
    if name == "atss_dcn_800":
        cfg = reduced_project_cfg("configs/alrp_X101_ATSS_800.yaml", reduction)
        cfg.MODEL.RESNETS.DEFORM_ON_PER_STAGE = [False, True, True, True]
        cfg.MODEL.RESNETS.DEFORM_MODULATED = True
        return cfg
    if name == "faster_rcnn_ce":
        cfg = reduced_project_cfg("configs/alrp_faster_rcnn_R50_FPN_500.yaml", reduction)
        cfg.MODEL.PROPOSAL_GENERATOR.NAME = "RPN"
        cfg.MODEL.RPN.BBOX_REG_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
        cfg.MODEL.ROI_HEADS.NAME = "StandardROIHeads"
        return cfg
    official_config = next(iter(fixture["variants"].values()))["official_config"]
    return reduced_project_cfg(converter.official_model_by_name(official_config).project_config, reduction)


def converted_model(name: str, monkeypatch):
    fixture = network(name)
    cfg = project_cfg_for(fixture)
    if any(cfg.MODEL.RESNETS.DEFORM_ON_PER_STAGE):
        # detectron2's DCN has no CPU kernel; torchvision's has the same offset (dy, dx per tap) and mask layout.
        import detectron2.layers.deform_conv as deform_conv

        monkeypatch.setattr(deform_conv, "modulated_deform_conv", _torchvision_modulated_deform_conv)
    converted = converter.convert_state_dict(fixture["official_state_dict"], cfg)
    model = build_model(cfg)
    model.load_state_dict(converted, strict=True)
    model.eval()
    return fixture, model, converted


def anchor_order(official_anchors: Tensor, our_anchors: Tensor, num_anchors: int) -> Tensor:
    """For each of our anchors at the first location, the official anchor with the same box (rounded sizes in the
    configs differ by < 1e-4 px)."""
    distance = (our_anchors[:num_anchors, None, :] - official_anchors[None, :num_anchors, :]).abs().amax(-1)
    assert distance.min(dim=1).values.max() < 1e-3, "an anchor of the project config has no official counterpart"
    order = distance.argmin(dim=1)
    assert sorted(order.tolist()) == list(range(num_anchors))
    return order


def reorder_blocks(official: Tensor, order: Tensor) -> Tensor:
    n, channels, h, w = official.shape
    return official.view(n, len(order), channels // len(order), h, w)[:, order].reshape(n, channels, h, w)


@pytest.mark.parametrize("name", NETWORKS)
@torch.no_grad()
def test_converted_backbone_and_fpn_equal_official(name, monkeypatch):
    fixture, model, converted = converted_model(name, monkeypatch)
    images = inputs()["images"]
    bottom_up = model.backbone.bottom_up
    x = bottom_up.stem(images)
    ours: List[Tensor] = []
    for stage in bottom_up.stages:
        x = stage(x)
        ours.append(x)
    for level, (mine, official) in enumerate(zip(ours, fixture["backbone_features"]), start=2):
        assert relative_error(mine, official) < TOLERANCE, f"C{level}"
    pyramid = model.backbone(images)
    names = model.backbone._out_features
    # P7: the official FPN takes conv(P6) without ReLU, detectron2's LastLevelP6P7 conv(ReLU(P6)).
    compared = [n for n in names if n != "p7"]
    for level, official in zip(names, fixture["neck_features"]):
        if level in compared:
            assert relative_error(pyramid[level], official) < TOLERANCE, level
    if name == "atss_dcn_800":
        offsets = [v for k, v in converted.items() if k.endswith("conv2_offset.weight")]
        assert len(offsets) == 13 and all(v.abs().sum() > 0 for v in offsets), "the DCN offsets must be exercised"


@pytest.mark.parametrize("name", NETWORKS)
@torch.no_grad()
def test_converted_heads_equal_official_given_official_features(name, monkeypatch):
    fixture, model, _ = converted_model(name, monkeypatch)
    features = fixture["neck_features"]
    kind = fixture["meta"]["kind"]
    if kind == "two_stage":
        logits, deltas = model.proposal_generator.rpn_head(features)
        official_logits = fixture["network"]["head"]["rpn_cls_scores"]
        official_deltas = fixture["network"]["head"]["rpn_bbox_preds"]
        anchors = model.proposal_generator.anchor_generator(features)
    else:
        logits, deltas = model.head(features)
        official_logits = fixture["network"]["head"]["cls_scores"]
        official_deltas = fixture["network"]["head"]["bbox_preds"]
        anchors = model.anchor_generator(features) if kind == "anchor" else None
    for level in range(len(features)):
        num_anchors = official_deltas[level].shape[1] // 4
        if anchors is None:
            order = torch.arange(num_anchors)
        else:
            order = anchor_order(fixture["network"]["anchors"][level], anchors[level].tensor, num_anchors)
        expected_logits = reorder_blocks(official_logits[level], order)
        expected_deltas = reorder_blocks(official_deltas[level], order)
        assert relative_error(logits[level], expected_logits) < TOLERANCE, f"logits, level {level}"
        assert relative_error(deltas[level], expected_deltas) < TOLERANCE, f"deltas, level {level}"
    if kind == "two_stage":
        for variant, record in fixture["variants"].items():
            box_features = model.roi_heads.box_head(record["train"]["roi_features"])
            scores, box_deltas = model.roi_heads.box_predictor(box_features)
            assert relative_error(scores, record["train"]["box_head"]["cls_score"]) < TOLERANCE, variant
            assert relative_error(box_deltas, record["train"]["box_head"]["bbox_pred"]) < TOLERANCE, variant


def test_retinanet_anchor_order_is_permuted():
    """Three ratios x two sizes: detectron2's anchor a = size * 3 + ratio is mmdetection's ratio * 2 + size."""
    assert converter.anchor_permutation(2, 3).tolist() == [0, 2, 4, 1, 3, 5]
    assert converter.anchor_permutation(3, 1).tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------------
# The command line and its errors.
# ---------------------------------------------------------------------------------------------------------------


def write_reduced_project_config(tmp_path, fixture) -> str:
    """A project .yaml with the widths of the reduced retinanet_iou network, for --config."""
    reduction = fixture["meta"]["reduction"]
    path = tmp_path / "reduced.yaml"
    path.write_text(
        f'_BASE_: "{REPO_ROOT / "configs" / "alrp_R50_500.yaml"}"\n'
        "MODEL:\n"
        '  WEIGHTS: ""\n'
        "  RESNETS:\n"
        f"    STEM_OUT_CHANNELS: {reduction['stem_channels']}\n"
        f"    RES2_OUT_CHANNELS: {reduction['base_channels'] * 4}\n"
        f"    WIDTH_PER_GROUP: {reduction['base_channels']}\n"
        "  FPN:\n"
        f"    OUT_CHANNELS: {reduction['fpn_channels']}\n"
        "  RETINANET:\n"
        f"    NUM_CONVS: {reduction['stacked_convs']}\n"
    )
    return str(path)


def test_command_line_writes_a_checkpoint_detectron2_loads(tmp_path):
    fixture = network("retinanet_iou")
    official_path = tmp_path / "official.pth"
    meta = fixture["variants"]["alrp"]["checkpoint_meta"]
    torch.save({"state_dict": fixture["official_state_dict"], "meta": meta}, official_path)
    output = tmp_path / "converted.pth"
    config = write_reduced_project_config(tmp_path, fixture)
    tool = REPO_ROOT / "tools" / "convert_official_checkpoint.py"

    # From its config text the tool takes the reduced network for the published one, whose widths differ: it
    # stops, naming the shapes, and asks for --config.
    with pytest.raises(SystemExit) as refused:
        converter.main([str(official_path), str(output)])
    message = str(refused.value)
    assert not output.exists() and "alrp_loss_retinanet_r50_fpn_100e_coco500.py" in message
    assert "head.cls_score.weight: (480, 8, 3, 3) converted, (480, 256, 3, 3) in the model" in message
    assert "pass --config" in message

    done = subprocess.run(
        [sys.executable, tool, official_path, output, "--config", config], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "--eval-only MODEL.WEIGHTS" in done.stdout

    cfg = converter.setup_cfg(config)
    cfg.MODEL.DEVICE = "cpu"
    model = build_model(cfg)
    checkpoint = torch.load(output, weights_only=True)
    incompatible = DetectionCheckpointer(model)._load_model(checkpoint)  # what load() reports only in its log
    assert not incompatible.missing_keys and not incompatible.unexpected_keys and not incompatible.incorrect_shapes
    AlrpCheckpointer(model).load(str(output))  # the loader of train_net.py --eval-only and AlrpPredictor
    official_cls = fixture["official_state_dict"]["bbox_head.retina_cls.weight"]
    ours_cls = model.head.cls_score.weight.detach()
    # Our anchor 1 (size 32, ratio 1) is official anchor 2 (ratio 1, scale 1) of 80 classes each.
    assert torch.equal(ours_cls[80:160], official_cls[160:240])


def test_unmapped_official_keys_are_named():
    fixture = network("foveabox")
    official = dict(fixture["official_state_dict"])
    official["bbox_head.feature_adaption.conv_offset.weight"] = torch.zeros(72, 4, 1, 1)
    cfg = project_cfg_for(fixture)
    with pytest.raises(converter.ConversionError, match="feature_adaption.conv_offset.weight"):
        converter.convert_state_dict(official, cfg)


def test_unfilled_project_keys_are_named():
    fixture = network("foveabox")
    official = {k: v for k, v in fixture["official_state_dict"].items() if k != "bbox_head.fovea_cls.bias"}
    with pytest.raises(converter.ConversionError, match="head.cls_score.bias"):
        converter.convert_state_dict(official, project_cfg_for(fixture))


def test_checkpoint_without_config_needs_one(tmp_path):
    path = tmp_path / "bare.pth"
    torch.save({"state_dict": {"backbone.conv1.weight": torch.zeros(1)}, "meta": {}}, path)
    with pytest.raises(converter.ConversionError, match="pass --config"):
        converter.convert_checkpoint(str(path), str(tmp_path / "out.pth"))


def test_config_option_names_the_official_config_or_a_project_config(tmp_path):
    path, model = converter.resolve_project_config({}, "alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py")
    assert path == str(REPO_ROOT / "configs" / "alrp_R50_ATSS_500.yaml") and model.config.startswith("alrp_loss")
    project = str(REPO_ROOT / "configs" / "alrp_R50_500.yaml")
    assert converter.resolve_project_config({"config": "model = dict(type='RetinaNet')"}, project) == (project, None)
    with pytest.raises(converter.ConversionError, match="not a published official config"):
        converter.resolve_project_config({}, "retinanet_r50_fpn_1x_coco.py")
