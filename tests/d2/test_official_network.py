"""The pieces that build the official network, one by one (their effect on whole detectors, against the official
code, is tests/d2/test_official_equivalence.py): FPN P7 and initialisation, the octave anchor generator, the
low-quality rule of mmdetection's MaxIoUAssigner, the RPN's objectness prior, the box head's initialisation, the
CPU path of deformable convolutions, empty detections, mmcv's test resize and mmdetection's training-set filter,
and the errors of their config keys."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest
import torch
import torchvision
from detectron2.data import transforms as T
from detectron2.data.datasets import load_coco_json, register_coco_instances
from detectron2.data.detection_utils import read_image
from detectron2.layers import ModulatedDeformConv, ShapeSpec
from detectron2.modeling import build_anchor_generator, build_backbone, build_model
from detectron2.modeling.anchor_generator import DefaultAnchorGenerator
from detectron2.modeling.matcher import Matcher
from detectron2.modeling.postprocessing import detector_postprocess
from detectron2.modeling.roi_heads import build_box_head
from detectron2.structures import Boxes, BoxMode, Instances

from alrp_d2.config import setup_cfg
from alrp_d2.data import build_alrp_mapper
from alrp_d2.data.inference_resize import MmcvRescale, mmcv_rescale_size
from alrp_d2.data.training_filter import mmdet_training_filter, training_dataset_dicts
from alrp_d2.evaluation import AlrpPredictor
from alrp_d2.modeling import LastLevelP6P7WithoutReLU, MinIoULowQualityMatcher, ModulatedDeformConvWithCpu
from alrp_d2.modeling.deform_conv import with_cpu_deform_conv
from alrp_d2.modeling.postprocessing import postprocess_detections

from .official_fixtures import FIXTURE_DIR, assert_fpn_xavier_uniform, load_fixture
from .tiny_configs import CONFIG_DIR, load_config, make_tiny

# ---------------------------------------------------------------------------------------------------------------
# FPN
# ---------------------------------------------------------------------------------------------------------------


def tiny_official_retinanet():
    return make_tiny(load_config("alrp_R50_500.yaml"))


def test_p7_without_relu():
    backbone = build_backbone(tiny_official_retinanet())
    top_block = backbone.top_block
    assert type(top_block) is LastLevelP6P7WithoutReLU
    c5 = torch.randn(1, top_block.p6.in_channels, 8, 8)
    p6, p7 = top_block(c5)
    assert torch.equal(p7, top_block.p7(top_block.p6(c5)))
    assert not torch.allclose(p7, top_block.p7(torch.relu(p6)))


def test_fpn_xavier_uniform_initialisation():
    """Every FPN convolution (laterals, outputs, P6, P7) is xavier_uniform with bias 0, the backbone untouched."""
    cfg = tiny_official_retinanet()
    torch.manual_seed(0)
    official = build_backbone(cfg)
    cfg.MODEL.FPN.WEIGHT_INIT = "c2_xavier_fill"
    torch.manual_seed(0)
    detectron2 = build_backbone(cfg)
    assert assert_fpn_xavier_uniform(official) == 8  # 3 laterals, 3 outputs, P6, P7
    assert torch.equal(official.bottom_up.stem.conv1.weight, detectron2.bottom_up.stem.conv1.weight)


# ---------------------------------------------------------------------------------------------------------------
# Anchors and assignment
# ---------------------------------------------------------------------------------------------------------------


def test_octave_anchors_are_detectrons_anchors_in_mmdetections_float32_order():
    cfg = load_config("alrp_R50_500.yaml")
    shapes = [ShapeSpec(stride=s) for s in (8, 16, 32, 64, 128)]
    octave = build_anchor_generator(cfg, shapes)
    exact = DefaultAnchorGenerator(
        sizes=[[4 * s, 4 * s * 2**0.5] for s in (8, 16, 32, 64, 128)],
        aspect_ratios=[0.5, 1.0, 2.0],
        strides=[8, 16, 32, 64, 128],
        offset=0.0,
    )
    grid = [[3, 4], [2, 2], [1, 1], [1, 1], [1, 1]]
    for ours, detectron2 in zip(octave._grid_anchors(grid), exact._grid_anchors(grid)):
        assert (ours - detectron2).abs().max() < 1e-4
    assert octave.num_cell_anchors == [6] * 5


def test_octave_anchor_sizes_must_be_the_listed_ones():
    cfg = load_config("alrp_R50_ATSS_500.yaml")
    cfg.MODEL.ANCHOR_GENERATOR.SCALES_PER_OCTAVE = 3
    with pytest.raises(ValueError, match="MODEL.ANCHOR_GENERATOR.SIZES"):
        build_anchor_generator(cfg, [ShapeSpec(stride=s) for s in (8, 16, 32, 64, 128)])


def low_quality_case():
    """Ground truths 0 and 1 have the same best anchors (1, 2), ground truth 0 with the higher IoU; anchor 0 is
    positive for ground truth 0 (IoU 0.8) and ground truth 2's best (0.35); ground truth 3's best IoU is 0.2."""
    return torch.tensor(
        [
            [0.8, 0.45, 0.45, 0.0, 0.0],
            [0.0, 0.40, 0.40, 0.1, 0.0],
            [0.35, 0.0, 0.0, 0.3, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.2],
        ]
    )


def test_best_anchor_low_quality_matches():
    iou = low_quality_case()
    matched, labels = MinIoULowQualityMatcher([0.3, 0.7], [0, -1, 1], min_iou=0.3, low_quality_gt="best_anchor")(iou)
    # mmdetection: the last ground truth whose best it is wins, also over a positive of another ground truth.
    assert matched.tolist() == [2, 1, 1, 2, 3] and labels.tolist() == [1, 1, 1, -1, 0]
    matched, labels = MinIoULowQualityMatcher([0.3, 0.7], [0, -1, 1], min_iou=0.3)(iou)
    assert matched.tolist() == [0, 0, 0, 2, 3] and labels.tolist() == [1, 1, 1, -1, 0]
    matched, labels = MinIoULowQualityMatcher([0.4, 0.5], [0, -1, 1], min_iou=0.0, low_quality_gt="best_anchor")(iou)
    assert matched.tolist() == [2, 1, 1, 2, 3] and labels.tolist() == [1, 1, 1, 0, 1]
    empty = torch.zeros(0, 5)
    assert [
        t.tolist() for t in MinIoULowQualityMatcher([0.5], [0, 1], min_iou=0.0, low_quality_gt="best_anchor")(empty)
    ] == [t.tolist() for t in Matcher([0.5], [0, 1], allow_low_quality_matches=True)(empty)]


def test_retinanet_and_rpn_use_the_configured_low_quality_rule():
    retinanet = build_model(tiny_official_retinanet())
    assert retinanet.anchor_matcher.low_quality_gt == "best_anchor" and retinanet.anchor_matcher.min_iou == 0.0
    faster_rcnn = make_tiny(load_config("alrp_faster_rcnn_R50_FPN_500.yaml"))
    faster_rcnn.MODEL.ROI_BOX_HEAD.FC_DIM = 64
    rpn = build_model(faster_rcnn).proposal_generator
    assert rpn.anchor_matcher.low_quality_gt == "best_anchor" and rpn.anchor_matcher.min_iou == 0.3
    # The official aLRP RPN starts its objectness logits at the prior 0.01, the cross-entropy RPN at 0.
    assert torch.allclose(rpn.rpn_head.objectness_logits.bias, torch.tensor(math.log(0.01 / 0.99)))
    cross_entropy = make_tiny(load_config("faster_rcnn_R50_FPN_500.yaml"))
    cross_entropy.MODEL.ROI_BOX_HEAD.FC_DIM = 64
    assert build_model(cross_entropy).proposal_generator.rpn_head.objectness_logits.bias.abs().max() == 0


def test_box_head_fully_connected_layers_start_as_mmdetections():
    """fc1 of the official Faster R-CNN (256 x 7 x 7 -> 1024): std sqrt(2 / (12544 + 1024)) = 0.0121 (detectron2's
    c2_xavier_fill: 0.0089)."""
    cfg = load_config("faster_rcnn_R50_FPN_500.yaml")
    torch.manual_seed(0)
    head = build_box_head(cfg, ShapeSpec(channels=256, height=7, width=7))
    assert [fc.weight.std().item() for fc in head.fcs] == pytest.approx([0.01214, 0.03125], rel=0.02)
    assert all(fc.bias.abs().max() == 0 for fc in head.fcs)


def test_foveabox_decodes_unclamped_and_targets_the_clamped_box():
    """The official FoveaBox: exp() of the predicted log-distances unclamped; E_loc's target is the box of the
    clamped target, here the 2-px-wide object whose left side (0.8 px) becomes 1/16 of the 16-px base edge."""
    cfg = make_tiny(load_config("foveabox_alrp_R50_500.yaml"))
    transform = build_model(cfg).box2box_transform
    anchors = torch.tensor([[20.0, 16.0, 36.0, 32.0]])  # the location (28, 24) of P3, base edge 16
    deltas = torch.tensor([[5.0, 0.0, 0.0, 0.0]])
    assert transform.apply_deltas(deltas, anchors)[0, 0] == 28 - 16 * math.exp(5.0)
    cfg.MODEL.FOVEABOX.CLAMP_PREDICTED_DISTANCES = True
    assert build_model(cfg).box2box_transform.apply_deltas(deltas, anchors)[0, 0] == pytest.approx(28 - 1000.0)
    thin = torch.tensor([[27.2, 2.0, 29.2, 46.0]])
    assert torch.allclose(transform.target_boxes(anchors, thin), torch.tensor([[27.0, 2.0, 29.2, 46.0]]))


# ---------------------------------------------------------------------------------------------------------------
# Deformable convolutions on the CPU
# ---------------------------------------------------------------------------------------------------------------


def test_deformable_convolutions_get_a_cpu_path_with_the_same_parameters():
    layer = torch.nn.Sequential(ModulatedDeformConv(4, 6, 3, padding=1, groups=2, bias=True))
    weight = layer[0].weight
    with_cpu_deform_conv(layer)
    assert type(layer[0]) is ModulatedDeformConvWithCpu and layer[0].weight is weight
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 5, 5, generator=gen)
    offset = torch.randn(1, 18, 5, 5, generator=gen)
    mask = torch.rand(1, 9, 5, 5, generator=gen)
    expected = torchvision.ops.deform_conv2d(x, offset, weight, layer[0].bias, padding=1, mask=mask)
    assert torch.equal(layer[0](x, offset, mask), expected)


def test_dcn_config_builds_and_runs_on_the_cpu():
    cfg = setup_cfg(f"{CONFIG_DIR}/alrp_X101_DCN_ATSS_800.yaml")
    cfg.MODEL.WEIGHTS, cfg.MODEL.DEVICE = "", "cpu"
    cfg.MODEL.RESNETS.DEPTH, cfg.MODEL.RESNETS.NUM_GROUPS, cfg.MODEL.RESNETS.WIDTH_PER_GROUP = 50, 2, 4
    cfg.MODEL.RESNETS.RES2_OUT_CHANNELS, cfg.MODEL.RESNETS.STEM_OUT_CHANNELS = 32, 8
    cfg.MODEL.FPN.OUT_CHANNELS, cfg.MODEL.RETINANET.NUM_CONVS = 16, 1
    model = build_model(cfg).eval()
    deform = [m for m in model.modules() if isinstance(m, ModulatedDeformConv)]
    assert len(deform) == 13 and all(type(m) is ModulatedDeformConvWithCpu for m in deform)
    with torch.no_grad():
        (output,) = model([{"image": torch.rand(3, 64, 80) * 255, "height": 64, "width": 80}])
    assert output["instances"].image_size == (64, 80)


# ---------------------------------------------------------------------------------------------------------------
# Detections, test resize, training filter
# ---------------------------------------------------------------------------------------------------------------


def test_empty_detections_are_kept_on_request():
    results = Instances((40, 50))
    results.pred_boxes = Boxes(torch.tensor([[10.0, 10.0, 20.0, 20.0], [49.0, 5.0, 49.0, 15.0]]))
    results.scores = torch.tensor([0.9, 0.8])
    kept = postprocess_detections(results, 80, 100, keep_empty=True)
    assert kept.pred_boxes.tensor.tolist() == [[20.0, 20.0, 40.0, 40.0], [98.0, 10.0, 98.0, 30.0]]
    assert len(postprocess_detections(results, 80, 100, keep_empty=False)) == 1


def test_kept_empty_detections_get_pasted_masks_as_detectron2s():
    def detections() -> Instances:  # a new one for each call: both functions scale the boxes in place
        results = Instances((40, 50))
        results.pred_boxes = Boxes(torch.tensor([[10.0, 10.0, 20.0, 20.0], [49.0, 5.0, 49.0, 15.0]]))
        results.scores = torch.tensor([0.9, 0.8])
        results.pred_masks = torch.ones(2, 1, 28, 28)
        return results

    kept = postprocess_detections(detections(), 80, 100, keep_empty=True)
    reference = detector_postprocess(detections(), 80, 100)
    assert kept.pred_masks.shape == (2, 80, 100) and kept.pred_masks.dtype == torch.bool
    assert len(reference) == 1 and torch.equal(kept.pred_masks[:1], reference.pred_masks)
    assert kept.pred_masks[0].sum() == 400 and not kept.pred_masks[1].any()


@pytest.mark.parametrize("case", ["500_shrunk", "500_enlarged", "800_shrunk", "800_enlarged"])
def test_mmcv_rescale_is_the_official_test_resize_bit_for_bit(case):
    record = load_fixture("test_pipeline.pth.gz")[case]
    raw = cv2.imdecode(record["raw_bgr_png"].numpy(), cv2.IMREAD_COLOR)
    official = cv2.imdecode(record["resized_padded_bgr_png"].numpy(), cv2.IMREAD_COLOR)
    long_edge, short_edge = record["img_scale"].tolist()
    height, width = record["img_shape"].tolist()
    assert mmcv_rescale_size(*raw.shape[:2], short_edge, long_edge) == (height, width)
    ours = MmcvRescale(short_edge, long_edge).get_transform(raw).apply_image(raw)
    assert np.array_equal(ours, official[:height, :width])
    if case.endswith("shrunk"):  # detectron2's PIL resize antialiases
        pil = T.ResizeShortestEdge(short_edge, long_edge).get_transform(raw).apply_image(raw)
        assert pil.shape == ours.shape and not np.array_equal(pil, ours)


@pytest.mark.parametrize("sampling", ["444", "422", "420"])
def test_detectron2_and_mmcv_decode_a_jpeg_alike(tmp_path, sampling):
    """detectron2 reads images with PIL, mmcv with OpenCV: the same pixels (both libjpeg) for every chroma sampling."""
    rng = np.random.default_rng(0)
    image = cv2.GaussianBlur((rng.random((48, 64, 3)) * 255).astype(np.uint8), (7, 7), 2)
    factor = getattr(cv2, f"IMWRITE_JPEG_SAMPLING_FACTOR_{sampling}")
    path = str(tmp_path / "image.jpg")
    cv2.imwrite(path, image, [cv2.IMWRITE_JPEG_QUALITY, 85, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, factor])
    assert np.array_equal(read_image(path, format="BGR"), cv2.imread(path))


def test_test_resize_key_reaches_the_mapper_and_the_predictor():
    cfg = make_tiny(load_config("alrp_R50_500.yaml"))
    assert isinstance(build_alrp_mapper(cfg, is_train=False).augmentations.augs[0], MmcvRescale)
    assert isinstance(AlrpPredictor(cfg).aug, MmcvRescale)
    cfg.INPUT.TEST_RESIZE = "detectron2"
    assert isinstance(build_alrp_mapper(cfg, is_train=False).augmentations.augs[0], T.ResizeShortestEdge)


def test_mmdet_training_filter_keeps_what_the_official_dataset_keeps(tmp_path):
    record = json.loads((FIXTURE_DIR / "training_filter.json").read_text())
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(record["coco_json"]))
    dataset = load_coco_json(str(path), str(tmp_path), extra_annotation_keys=["area"])
    kept = mmdet_training_filter(dataset)
    assert [d["image_id"] for d in kept] == record["kept_image_ids"]
    category_ids = sorted(c["id"] for c in record["coco_json"]["categories"])
    for image in kept:
        official = record["annotations_of_kept_images"][str(image["image_id"])]
        boxes = {"bboxes": [], "bboxes_ignore": [], "labels": []}
        for annotation in image["annotations"]:
            box = BoxMode.convert(annotation["bbox"], annotation["bbox_mode"], BoxMode.XYXY_ABS)
            if annotation.get("iscrowd", 0):
                boxes["bboxes_ignore"].append(box)
            else:
                boxes["bboxes"].append(box)
                boxes["labels"].append(category_ids.index(annotation["category_id"]))
        assert boxes == official, image["image_id"]


def test_train_filter_key_chooses_the_training_images(tmp_path):
    """The trainer's dataset dicts: mmdetection keeps the crowd-only image 2 and drops the 31-px-wide image 4;
    detectron2 the other way round."""
    record = json.loads((FIXTURE_DIR / "training_filter.json").read_text())
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(record["coco_json"]))
    register_coco_instances("official_training_filter", {}, str(path), str(tmp_path))
    cfg = tiny_official_retinanet()
    cfg.DATASETS.TRAIN = ("official_training_filter",)
    assert [d["image_id"] for d in training_dataset_dicts(cfg)] == [1, 2, 5, 6]
    cfg.DATALOADER.TRAIN_FILTER = "detectron2"
    assert [d["image_id"] for d in training_dataset_dicts(cfg)] == [1, 4, 5, 6]


# ---------------------------------------------------------------------------------------------------------------
# Config keys
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, key, value, message",
    [
        ("alrp_R50_500.yaml", "MODEL.ALRP.RPN_PRIOR_PROB", "0.0", "RPN_PRIOR_PROB=0.0: must be in (0, 1)"),
        ("alrp_R50_500.yaml", "MODEL.ANCHOR_GENERATOR.OCTAVE_BASE_SCALE", "1e999", "must be finite"),
        ("alrp_R50_500.yaml", "MODEL.ANCHOR_GENERATOR.SCALES_PER_OCTAVE", "0", "SCALES_PER_OCTAVE=0"),
        ("alrp_R50_500.yaml", "INPUT.TEST_RESIZE", "pil", "TEST_RESIZE='pil'"),
        ("alrp_R50_500.yaml", "DATALOADER.TRAIN_FILTER", "coco", "TRAIN_FILTER='coco'"),
        ("alrp_R50_500.yaml", "MODEL.BACKBONE.NAME", "build_retinanet_resnet_fpn_backbone", "RELU_BEFORE_P7 False"),
    ],
)
def test_official_network_keys_name_bad_values(config, key, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        setup_cfg(f"{CONFIG_DIR}/{config}", [key, value])


@pytest.mark.parametrize("config", ["alrp_R50_500.yaml", "alrp_faster_rcnn_R50_FPN_500.yaml"])
def test_the_low_quality_match_rule_is_checked_when_the_model_is_built(config):
    """By the matcher's constructor (RetinaNet's, the RPN's), naming the key."""
    cfg = setup_cfg(f"{CONFIG_DIR}/{config}", ["MODEL.ALRP.LOW_QUALITY_MATCH_GT", "later"])
    cfg.MODEL.DEVICE, cfg.MODEL.WEIGHTS = "cpu", ""
    with pytest.raises(ValueError, match="MODEL.ALRP.LOW_QUALITY_MATCH_GT='later': must be one of"):
        build_model(cfg)


def test_foveabox_loc_target_is_checked_when_the_model_is_built():
    cfg = setup_cfg(f"{CONFIG_DIR}/foveabox_alrp_R50_500.yaml", ["MODEL.FOVEABOX.ALRP_LOC_TARGET", "target"])
    cfg.MODEL.DEVICE, cfg.MODEL.WEIGHTS = "cpu", ""
    with pytest.raises(ValueError, match="MODEL.FOVEABOX.ALRP_LOC_TARGET='target'"):
        build_model(cfg)


def test_fpn_keys_need_the_registered_backbones():
    with pytest.raises(ValueError, match="MODEL.FPN.WEIGHT_INIT 'xavier_uniform'"):
        setup_cfg(
            f"{CONFIG_DIR}/Base-aLRP-RetinaNet.yaml",
            ["MODEL.FPN.WEIGHT_INIT", "xavier_uniform"],
        )
