#!/usr/bin/env python3
"""Reference tensors from the official aLRP Loss code, for the equivalence tests of the detectors.

Runs the official implementation (kemaloksuz/aLRPLoss, an mmdetection 2.1 fork; the fixtures in
tests/fixtures/official were written at commit 2cfaa8ec3150692cca8b085221f1bd8c8c78db8e) on the CPU with mmcv 0.6.2
and writes, for every detector family of the 14 published models, a reduced-width official model with seeded random
weights, its inputs and every stage of its training and test computation (tests/fixtures/official/README.md lists
the files and their keys). It also writes the key sets of the 14 full official models, the official test-time
image pipeline and the official training-set filter on small synthetic inputs.

Set-up, once, outside this repository (a virtual environment that reuses this machine's torch, torchvision and
numpy; mmcv 0.6.2 is pure Python, yapf < 0.40 is the one its Config.pretty_text calls, terminaltables is an
mmdetection requirement):

    git clone https://github.com/kemaloksuz/aLRPLoss OFFICIAL
    git -C OFFICIAL checkout 2cfaa8ec3150692cca8b085221f1bd8c8c78db8e
    python3 -m venv --system-site-packages VENV
    VENV/bin/pip install mmcv==0.6.2 yapf==0.30.0 terminaltables

Run (about 20 seconds on 2 CPU cores):

    VENV/bin/python tools/official_reference.py --official-repo OFFICIAL --output tests/fixtures/official
    VENV/bin/python tools/official_reference.py --official-repo OFFICIAL --output /tmp/again \\
        --compare tests/fixtures/official      # a second run, compared tensor by tensor with the first

Nothing of mmdetection is installed or copied: OFFICIAL is put on sys.path. Its compiled operators are replaced at
run time, here only (see ``install_runtime_replacements``): non-maximum suppression by ``torchvision.ops.nms``,
RoIAlign (``aligned=True``) by ``torchvision.ops.roi_align``, the sigmoid focal loss by a torch expression, DCNv2 by
``torchvision.ops.deform_conv2d``; numpy 2 gets back the aliases ``np.int``, ``np.float``, ``np.bool``, ...;
``Tensor.cuda`` returns the tensor (the official ranking losses allocate with ``.cuda()``). Everything runs in
float32, as the official code does. This script is never imported by the package or the tests, which do not need
mmcv.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import io
import json
import math
import os
import sys
import tempfile
import types
from collections import defaultdict
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch
import torchvision
from torch import nn

OFFICIAL_COMMIT = "2cfaa8ec3150692cca8b085221f1bd8c8c78db8e"
CONFIG_DIR = os.path.join("configs", "alrp_loss")

# The 14 published models (official README) and their configs.
PUBLISHED_CONFIGS = [
    "ap_loss_retinanet_r50_fpn_100e_coco500.py",
    "alrp_loss_retinanet_r50_fpn_100e_coco500.py",
    "alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py",
    "alrp_loss_retinanet_r101_fpn_ATSS_100e_coco500.py",
    "alrp_loss_retinanet_x101_64x4d_fpn_ATSS_100e_coco500.py",
    "alrp_loss_retinanet_r101_fpn_ATSS_100e_coco800.py",
    "alrp_loss_retinanet_x101_64x4d_fpn_ATSS_100e_coco800.py",
    "alrp_loss_retinanet_x101_64x4d_fpn_dcn_ATSS_100e_coco800.py",
    "fovea_r50_fpn_4x4_100e_coco500.py",
    "ap_loss_fovea_r50_fpn_4x4_100e_coco500.py",
    "alrp_loss_fovea_r50_fpn_4x4_100e_coco500.py",
    "faster_rcnn_r50_fpn_100e_coco500.py",
    "faster_rcnn_r50_fpn_giou_100e_coco500.py",
    "alrp_loss_faster_rcnn_r50_fpn_100e_coco500.py",
]

# One fixture per reduced-width official network, with the official configs (loss variants) that build it:
# (fixture name, kind, backbone changes, {variant: official config}). The variants of a fixture have the same layers,
# hence the same seeded weights and outputs; they differ in their losses. All networks with the plain ResNet-50
# share the backbone weights (drawn first from the same seed), kept once in backbone_r50.pth.gz.
FIXTURES: List[Tuple[str, str, Dict[str, Any], Dict[str, str]]] = [
    (
        "retinanet_iou",
        "anchor",
        {},
        {"alrp": "alrp_loss_retinanet_r50_fpn_100e_coco500.py", "ap": "ap_loss_retinanet_r50_fpn_100e_coco500.py"},
    ),
    ("atss_500", "anchor", {}, {"alrp": "alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py"}),
    ("atss_800", "anchor", {"depth": 50}, {"alrp": "alrp_loss_retinanet_r101_fpn_ATSS_100e_coco800.py"}),
    (
        "atss_dcn_800",
        "anchor",
        {"depth": 50, "groups": 2, "base_width": 2},
        {"alrp": "alrp_loss_retinanet_x101_64x4d_fpn_dcn_ATSS_100e_coco800.py"},
    ),
    (
        "foveabox",
        "fovea",
        {},
        {
            "focal": "fovea_r50_fpn_4x4_100e_coco500.py",
            "ap": "ap_loss_fovea_r50_fpn_4x4_100e_coco500.py",
            "alrp": "alrp_loss_fovea_r50_fpn_4x4_100e_coco500.py",
        },
    ),
    (
        "faster_rcnn_ce",
        "two_stage",
        {},
        {"l1": "faster_rcnn_r50_fpn_100e_coco500.py", "giou": "faster_rcnn_r50_fpn_giou_100e_coco500.py"},
    ),
    ("faster_rcnn_alrp", "two_stage", {}, {"alrp": "alrp_loss_faster_rcnn_r50_fpn_100e_coco500.py"}),
]
SHARED_BACKBONE_FILE = "backbone_r50.pth.gz"

# Widths of the reduced models: ResNet stem and base channels (stage outputs 16, 32, 64, 128 with bottlenecks),
# FPN and head channels, head depth, box-head width, the number of proposals per image, and the ATSS candidates
# per level (the official assigner needs that many anchors on every level: P7 of the fixture images has 1 location).
REDUCTION = {
    "stem_channels": 4,
    "base_channels": 4,
    "fpn_channels": 8,
    "stacked_convs": 2,
    "fc_out_channels": 32,
    "num_proposals": 32,
    "atss_topk": 2,
}

IMAGE_SIZE = (64, 64)  # the padded batch, (H, W): not a multiple of the stride 128
# (H, W) of the two images, zero-padded to IMAGE_SIZE: not multiples of any stride.
IMAGE_SHAPES = ((60, 62), (48, 64))
TRAIN_SEED = 2020


# ---------------------------------------------------------------------------------------------------------------
# Runtime replacements of what mmdetection 2.1 compiles, and of what numpy 2 / torch 2 removed.
# ---------------------------------------------------------------------------------------------------------------


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def _missing_op(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is a compiled mmdetection operator that the reference run does not need")

    return call


def _nms(dets: torch.Tensor, iou_thr: float) -> torch.Tensor:
    """nms_ext.nms: indices kept, by decreasing score (boxes without the legacy +1, as mmdet 2.x)."""
    return torchvision.ops.nms(dets[:, :4], dets[:, 4], float(iou_thr))


def _roi_align_forward(features, rois, spatial_scale, out_h, out_w, sample_num, aligned):
    return torchvision.ops.roi_align(
        features, rois, (out_h, out_w), spatial_scale=spatial_scale, sampling_ratio=sample_num, aligned=aligned
    )


def _roi_align_backward(grad_output, rois, spatial_scale, out_h, out_w, n, c, h, w, sample_num, aligned):
    """RoIAlign is linear in the features: its vector-Jacobian product does not depend on them."""
    with torch.enable_grad():
        features = grad_output.new_zeros((n, c, h, w), requires_grad=True)
        output = _roi_align_forward(features, rois, spatial_scale, out_h, out_w, sample_num, aligned)
        (grad,) = torch.autograd.grad(output, features, grad_output)
    return grad


def _focal_loss_elements(logits, targets, gamma, alpha):
    """Sigmoid focal loss per (example, class); targets are class indices, num_classes = background."""
    classes = torch.arange(logits.shape[1], device=logits.device)
    positive = (targets[:, None] == classes[None, :]).to(logits.dtype)
    negative = ((targets[:, None] >= 0) & (targets[:, None] != classes[None, :])).to(logits.dtype)
    p = logits.sigmoid()
    log_p = nn.functional.logsigmoid(logits)
    log_not_p = nn.functional.logsigmoid(-logits)
    return -alpha * positive * (1 - p).pow(gamma) * log_p - (1 - alpha) * negative * p.pow(gamma) * log_not_p


def _focal_forward(logits, targets, num_classes, gamma, alpha):
    return _focal_loss_elements(logits, targets, gamma, alpha)


def _focal_backward(logits, targets, d_loss, num_classes, gamma, alpha):
    with torch.enable_grad():
        x = logits.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(_focal_loss_elements(x, targets, gamma, alpha), x, d_loss)
    return grad


def _modulated_deform_conv(x, offset, mask, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, dg=1):
    """DCNv2 (offsets interleaved (dy, dx) per kernel tap, mask after the sigmoid) through torchvision, which infers
    the groups from the weight and the deformable groups from the offsets."""
    return torchvision.ops.deform_conv2d(
        x, offset, weight, bias, stride=stride, padding=padding, dilation=dilation, mask=mask
    )


def install_runtime_replacements(official_repo: str) -> None:
    """Makes the official repository importable on a CPU-only torch 2 / numpy 2 machine (see the module docstring)."""
    for alias, value in (("int", int), ("float", float), ("bool", bool), ("object", object), ("str", str)):
        if alias not in np.__dict__:
            setattr(np, alias, value)
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    _module("mmdet.version", __version__="2.1.0", short_version="2.1.0")
    _module("mmdet.ops.nms.nms_ext", nms=_nms, soft_nms=_missing_op("soft_nms"), nms_match=_missing_op("nms_match"))
    _module("mmdet.ops.roi_align.roi_align_ext", forward_v2=_roi_align_forward, backward_v2=_roi_align_backward)
    _module("mmdet.ops.sigmoid_focal_loss.sigmoid_focal_loss_ext", forward=_focal_forward, backward=_focal_backward)
    for name in (
        "mmdet.ops.roi_pool.roi_pool_ext",
        "mmdet.ops.dcn.deform_conv_ext",
        "mmdet.ops.dcn.deform_pool_ext",
        "mmdet.ops.masked_conv.masked_conv2d_ext",
        "mmdet.ops.carafe.carafe_ext",
        "mmdet.ops.carafe.carafe_naive_ext",
        "mmdet.ops.corner_pool.corner_pool_ext",
    ):
        module = _module(name)
        module.__getattr__ = lambda attr, name=name: _missing_op(f"{name}.{attr}")  # type: ignore[attr-defined]
    _module(
        "mmdet.ops.utils.compiling_info",
        get_compiler_version=lambda: "none (CPU reference run)",
        get_compiling_cuda_version=lambda: "none (CPU reference run)",
    )
    sys.path.insert(0, os.path.abspath(official_repo))
    import mmdet.ops  # noqa: F401  (after the replacements above)

    sys.modules["mmdet.ops.dcn.deform_conv"].modulated_deform_conv = _modulated_deform_conv


# ---------------------------------------------------------------------------------------------------------------
# Models: official configs, reduced widths, seeded random weights.
# ---------------------------------------------------------------------------------------------------------------


def load_official_config(official_repo: str, name: str):
    import mmcv

    cfg = mmcv.Config.fromfile(os.path.join(official_repo, CONFIG_DIR, name))
    cfg.model.pretrained = None
    return cfg


def checkpoint_config_text(cfg, name: str) -> str:
    """``cfg.pretty_text`` as mmdetection 2.1's tools/train.py stores it in ``meta["config"]`` (with the default
    ``work_dir`` and ``gpu_ids`` it sets before); sets them on ``cfg``."""
    cfg.work_dir = os.path.join("./work_dirs", os.path.splitext(name)[0])
    cfg.gpu_ids = range(1)
    cfg.seed = None
    return cfg.pretty_text


def reduce_config(cfg, kind: str, backbone: Dict[str, Any]):
    r = REDUCTION
    model = cfg.model
    model.backbone.update(stem_channels=r["stem_channels"], base_channels=r["base_channels"], **backbone)
    widths = [r["base_channels"] * 4 * 2**i for i in range(4)]
    channels = r["fpn_channels"]
    model.neck.update(in_channels=widths, out_channels=channels)
    if kind == "two_stage":
        model.rpn_head.update(in_channels=channels, feat_channels=channels)
        model.roi_head.bbox_roi_extractor.out_channels = channels
        model.roi_head.bbox_head.update(in_channels=channels, fc_out_channels=r["fc_out_channels"])
        for proposal_cfg in (cfg.train_cfg.rpn_proposal, cfg.test_cfg.rpn):
            proposal_cfg.update(nms_post=r["num_proposals"], max_num=r["num_proposals"])
    else:
        model.bbox_head.update(in_channels=channels, feat_channels=channels, stacked_convs=r["stacked_convs"])
    if cfg.train_cfg.get("assigner", {}).get("type") == "ATSSAssigner":
        cfg.train_cfg.assigner.topk = r["atss_topk"]
    return cfg


# Gains of the classification layers' random weights: logits with a standard deviation of about 2 (see randomise).
CLASSIFIER_GAINS = {"retina_cls": 8.0, "fovea_cls": 8.0, "rpn_cls": 3.0, "fc_cls": 8.0}
# Networks whose features are larger (the DCN ResNeXt's): their classification gains are scaled down, so that no
# test score saturates to 1.0 in float32 (tied scores leave the official order of the detections arbitrary).
CLASSIFIER_GAIN_SCALES = {"atss_dcn_800": 0.4}


def randomise(model: nn.Module, seed: int, gain_scale: float = 1.0) -> None:
    """Seeded random weights that keep activations O(1): conv / linear weights N(0, 1/fan_in), biases N(0, 0.1^2),
    BatchNorm weight U(0.5, 1.5), bias N(0, 0.1^2), running mean N(0, 0.1^2), running variance U(0.5, 2). The
    classification layers get larger weights (CLASSIFIER_GAINS), so that the logits spread over several units
    (standard deviation about 2, below the float32 saturation of the sigmoid, where score ties would make the
    official order arbitrary): the ranking losses then see saturated and linear pairs alike, and scores cross
    the test threshold."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module_name, module in model.named_modules():
            layer = module_name.split(".")[-1]
            gain = CLASSIFIER_GAINS[layer] * gain_scale if layer in CLASSIFIER_GAINS else 1.0
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.weight.copy_(torch.rand(module.weight.shape, generator=gen) + 0.5)
                module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)
                module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=gen) * 0.1)
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=gen) * 1.5 + 0.5)
                continue
            for name, param in module.named_parameters(recurse=False):
                if name == "weight" and param.dim() > 1:
                    fan_in = param[0].numel()
                    param.copy_(torch.randn(param.shape, generator=gen) * gain / math.sqrt(fan_in))
                elif name == "bias":
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
                else:
                    raise ValueError(f"no random initialisation rule for {type(module).__name__}.{name}")


def build_official_model(cfg):
    from mmdet.models import build_detector

    return build_detector(cfg.model, train_cfg=cfg.train_cfg, test_cfg=cfg.test_cfg)


# ---------------------------------------------------------------------------------------------------------------
# Inputs: two padded images whose ground truths hit the edge cases of the comparison.
# ---------------------------------------------------------------------------------------------------------------


def official_anchor_iou(anchors: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    from mmdet.core import bbox_overlaps

    return bbox_overlaps(boxes, anchors)


def feature_sizes(image_size: Tuple[int, int], strides: Sequence[int]) -> List[Tuple[int, int]]:
    """Feature map sizes of the official ResNet-FPN (P3-P7) for a padded image (ceil at every stride-2 step)."""
    return [(math.ceil(image_size[0] / s), math.ceil(image_size[1] / s)) for s in strides]


def exact_half_iou_box(official_cfg) -> torch.Tensor:
    """A box inside image 0 at exactly IoU 0.5 (in the official float32 arithmetic) with an anchor of the second
    octave scale (size 32 * 2**0.5 at stride 8, not representable with 4 decimals): the anchor shifted right by
    about a third of its width, the shift searched among the float32 values next to width / 3."""
    from mmdet.core import build_anchor_generator

    generator = build_anchor_generator(official_cfg.model.bbox_head.anchor_generator)
    sizes = feature_sizes(IMAGE_SIZE, [8, 16, 32, 64, 128])
    anchors = generator.grid_anchors(sizes, device="cpu")[0]
    widths = anchors[:, 2] - anchors[:, 0]
    heights = anchors[:, 3] - anchors[:, 1]
    square = (widths == heights) & (widths > 40) & (widths < 50)
    height, width = IMAGE_SHAPES[0]
    for index in torch.nonzero(square).flatten().tolist():
        x1, y1, x2, y2 = anchors[index].tolist()
        base_shift = np.float32((x2 - x1) / 3)
        if not (x1 + base_shift >= 1 and x2 + base_shift <= width - 1 and y1 >= 1 and y2 <= height - 1):
            continue
        shifts = base_shift + np.arange(-3000, 3001) * np.spacing(base_shift)
        shift = torch.from_numpy(shifts.astype(np.float32))
        anchor = anchors[index]
        boxes = torch.stack(
            [anchor[0] + shift, anchor[1].expand_as(shift), anchor[2] + shift, anchor[3].expand_as(shift)], 1
        )
        exact = torch.nonzero(official_anchor_iou(anchors[index : index + 1], boxes)[:, 0] == 0.5).flatten()
        if len(exact):
            return boxes[exact[0]]
    raise RuntimeError("no anchor gives a box at exactly IoU 0.5")


def make_inputs(official_cfg) -> Dict[str, Any]:
    """Normalised images (2, 3, 64, 64) of N(0, 1) noise: image 0 is 60 x 62 and image 1 is 48 x 64, padded with
    zeros at the bottom and right (as mmdetection's Pad and collate after Normalize, and detectron2's ImageList).

    Image 0: a ground truth at exactly IoU 0.5 with a 45.25-pixel anchor; two small ground truths whose best
    RetinaNet anchors are the same, the first with the higher IoU (the low-quality rule gives them to the later
    one); a box at the right border. Image 1: a 2 x 44 pixel object (its FoveaBox left distance is below 1/16 of
    the base edge: the target is clamped); a box that touches the bottom-right corner of the image; a large
    object; two centred boxes of 24 and 20 px whose best RPN anchors (the same nine 32-pixel anchors, IoU 0.56
    and 0.39, both >= the RPN's min_pos_iou 0.3) are tied, so that the low-quality rule gives them to the later.
    """
    gen = torch.Generator().manual_seed(TRAIN_SEED)
    images = torch.randn((2, 3, *IMAGE_SIZE), generator=gen)
    for image, (height, width) in zip(images, IMAGE_SHAPES):
        image[:, height:] = 0.0
        image[:, :, width:] = 0.0
    half_iou = exact_half_iou_box(official_cfg)
    gt_bboxes = [
        torch.stack(
            [
                half_iou,
                torch.tensor([17.0, 17.0, 31.0, 31.0]),
                torch.tensor([19.0, 19.0, 29.0, 29.0]),
                torch.tensor([40.5, 4.0, 62.0, 41.0]),
            ]
        ),
        torch.tensor(
            [
                [27.2, 2.0, 29.2, 46.0],
                [40.0, 30.0, 64.0, 48.0],
                [4.0, 6.0, 52.0, 44.0],
                [12.0, 12.0, 36.0, 36.0],
                [14.0, 14.0, 34.0, 34.0],
            ]
        ),
    ]
    gt_labels = [torch.tensor([3, 17, 45, 79]), torch.tensor([0, 3, 62, 7, 8])]
    train_metas = [
        {"img_shape": (h, w, 3), "pad_shape": (*IMAGE_SIZE, 3), "ori_shape": (h, w, 3), "flip": False}
        for h, w in IMAGE_SHAPES
    ]
    for meta in train_metas:
        meta["scale_factor"] = np.ones(4, dtype=np.float32)
    # Test time: one image per batch (tools/test.py), padded alone (Pad size_divisor 32): the images were resized
    # from larger originals (mmdet's Resize keep_ratio scale factors).
    original_shapes = ((75, 78), (96, 128))
    test_metas = [
        {"img_shape": (h, w, 3), "pad_shape": (32 * math.ceil(h / 32), 32 * math.ceil(w / 32), 3), "flip": False}
        for h, w in IMAGE_SHAPES
    ]
    for meta, (oh, ow) in zip(test_metas, original_shapes):
        h, w = meta["img_shape"][:2]
        meta["ori_shape"] = (oh, ow, 3)
        meta["scale_factor"] = np.array([w / ow, h / oh, w / ow, h / oh], dtype=np.float32)
    return {
        "images": images,
        "gt_bboxes": [b.float() for b in gt_bboxes],
        "gt_labels": gt_labels,
        "train_metas": train_metas,
        "test_metas": test_metas,
    }


def padded_test_image(inputs: Dict[str, Any], index: int) -> torch.Tensor:
    """Image ``index`` alone, in its own padded shape (test batches of one image)."""
    height, width = inputs["test_metas"][index]["pad_shape"][:2]
    return inputs["images"][index : index + 1, :, :height, :width]


def metas_record(metas: Sequence[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    return {
        "img_shape": torch.tensor([list(m["img_shape"][:2]) for m in metas]),
        "pad_shape": torch.tensor([list(m["pad_shape"][:2]) for m in metas]),
        "ori_shape": torch.tensor([list(m["ori_shape"][:2]) for m in metas]),
        "scale_factor": torch.tensor(np.stack([m["scale_factor"] for m in metas])),
    }


# ---------------------------------------------------------------------------------------------------------------
# Recording: wrap official callables, keep detached copies of what goes in and out.
# ---------------------------------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """Detached copies of tensors, recursively, and mmdet's result objects as dicts."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if type(value).__name__ == "AssignResult":
        return {
            "num_gts": value.num_gts,
            **plain({k: getattr(value, k) for k in ("gt_inds", "max_overlaps", "labels")}),
        }
    if type(value).__name__ == "SamplingResult":
        keys = ("pos_inds", "neg_inds", "pos_bboxes", "neg_bboxes", "pos_is_gt", "pos_assigned_gt_inds", "bboxes")
        return plain({k: getattr(value, k) for k in keys})
    if value is None or isinstance(value, (int, float, bool, str)):
        return value
    raise TypeError(f"cannot record a {type(value).__name__}")


class Recorder:
    """Replaces ``owner.attribute`` (an instance attribute) by a wrapper that records its arguments and result."""

    def __init__(self) -> None:
        self.calls: Dict[str, List[Dict[str, Any]]] = defaultdict(list)

    def wrap(self, owner: Any, attribute: str, name: str, arg_names: Sequence[str]) -> None:
        """Arguments named ``None`` in ``arg_names`` are not kept (e.g. logits that are the head outputs)."""
        original = getattr(owner, attribute)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            record = {n: plain(a) for n, a in zip(arg_names, args) if n is not None}
            record.update({n: plain(a) for n, a in kwargs.items() if n in arg_names})
            record["output"] = plain(result)
            self.calls[name].append(record)
            return result

        setattr(owner, attribute, wrapper)

    def hook_module(self, module: nn.Module, name: str, live: Dict[str, Any], first_input: int = 0) -> Any:
        """Records the inputs from ``first_input`` on and the outputs of ``module``; ``live[name]`` keeps the last
        outputs with their graph. Returns the hook handle."""

        def hook(mod: nn.Module, inputs: Any, output: Any) -> None:
            self.calls[name].append({"input": plain(list(inputs)[first_input:]), "output": plain(output)})
            live[name] = output

        return module.register_forward_hook(hook)


def compact_ranking_targets(calls: Dict[str, List[Dict[str, Any]]]) -> None:
    """The ranking losses' targets (1 positive, 0 negative, -1 ignored) as int8 (the two-stage heads'; the dense
    heads' follow from their ``get_targets`` labels and are not kept)."""
    for name, records in calls.items():
        if name.endswith("ranking_loss"):
            for record in records:
                if "targets" in record:
                    record["targets"] = record["targets"].to(torch.int8)


def compact_anchor_targets(calls: Dict[str, List[Dict[str, Any]]], name: str) -> None:
    """An anchor head's ``get_targets`` result without the per-anchor box targets and weights (the positives'
    encoded boxes are in ``encode`` / the loss calls): (labels int16, label weights bool, num_pos, num_neg)."""
    for record in calls.get(name, []):
        labels, label_weights, _, _, num_pos, num_neg = record["output"]
        record["output"] = [
            [level.to(torch.int16) for level in labels],
            [level > 0 for level in label_weights],
            num_pos,
            num_neg,
        ]


def clear_unused_fovea_targets(calls: Dict[str, List[Dict[str, Any]]], num_classes: int) -> None:
    """The FoveaBox heads allocate their box targets uninitialised (``Tensor.new(h, w, 4) + 1``) and fill only the
    positive cells; the others are never read. They are set to 0 here (also in the aLRP head's decoding of the
    targets, its first ``get_bbox_targets`` call) so that two runs give the same file."""
    for record in calls["get_targets"]:
        labels, targets = record["output"]
        unused = labels == num_classes
        targets[unused] = 0.0
    if "decode_for_giou" in calls:
        decoded_targets = calls["decode_for_giou"][0]
        decoded_targets["raw_bboxes"][unused] = 0.0
        decoded_targets["output"][unused] = 0.0


def gradients(losses: Dict[str, Any], named_outputs: Dict[str, List[torch.Tensor]]) -> Dict[str, Dict[str, Any]]:
    """d loss / d output for every loss term and every recorded network output (None where it does not depend)."""
    result: Dict[str, Dict[str, Any]] = {}
    flat = [(name, i, t) for name, tensors in named_outputs.items() for i, t in enumerate(tensors)]
    for loss_name, loss in losses.items():
        if isinstance(loss, list):  # per-level terms, summed by mmdet's parse_losses
            loss = sum(term.sum() for term in loss)
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            continue
        grads = torch.autograd.grad(loss.sum(), [t for _, _, t in flat], retain_graph=True, allow_unused=True)
        per_output: Dict[str, Any] = {name: [None] * len(tensors) for name, tensors in named_outputs.items()}
        for (name, i, _), grad in zip(flat, grads):
            per_output[name][i] = None if grad is None else grad.detach().clone()
        result[loss_name] = {name: g for name, g in per_output.items() if any(x is not None for x in g)}
    return result


# ---------------------------------------------------------------------------------------------------------------
# The reference runs, one per kind of detector.
# ---------------------------------------------------------------------------------------------------------------


def features(model, images: torch.Tensor) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    backbone = list(model.backbone(images))
    neck = list(model.neck(backbone))
    return backbone, neck


def wrap_dense_head(recorder: Recorder, head, kind: str) -> None:
    """Records assignment, targets, box coding, the localisation errors and the ranking-loss internals."""
    if kind == "anchor":
        if type(head.assigner).__name__ == "ATSSAssigner":
            recorder.wrap(head.assigner, "assign", "assign", (None, "num_level_bboxes", "gt_bboxes"))
        else:
            recorder.wrap(head.assigner, "assign", "assign", (None, "gt_bboxes"))
        recorder.wrap(head.bbox_coder, "encode", "encode", ("bboxes", "gt_bboxes"))
    elif hasattr(head, "get_bbox_targets"):
        recorder.wrap(head, "get_bbox_targets", "decode_for_giou", ("raw_bboxes",))
    recorder.wrap(head, "get_targets", "get_targets", ())
    for attribute in ("aLRP_Loss", "AP_Loss"):
        if hasattr(head, attribute):
            args = (None, None, "regression_losses") if attribute == "aLRP_Loss" else (None,)
            recorder.wrap(getattr(head, attribute), "apply", "ranking_loss", args)
    if hasattr(head, "loss_cls"):
        recorder.wrap(head.loss_cls, "forward", "loss_cls", (None, "target", "weight"))
    recorder.wrap(head.loss_bbox, "forward", "loss_bbox", ("pred", "target", "weight"))


def run_dense(model, inputs, kind: str) -> Dict[str, Any]:
    """One training forward of a dense detector (features, head outputs, assignment, targets, loss internals,
    losses, gradients of the losses w.r.t. the head outputs), then the official test of each image alone (batch 1,
    as tools/test.py)."""
    head = model.bbox_head
    recorder = Recorder()
    wrap_dense_head(recorder, head, kind)
    model.train()  # norm_eval: the backbone's BatchNorm layers stay in eval mode
    backbone, neck = features(model, inputs["images"])
    cls_scores, bbox_preds = head(neck)
    losses = head.loss(cls_scores, bbox_preds, inputs["gt_bboxes"], inputs["gt_labels"], inputs["train_metas"])
    compact_ranking_targets(recorder.calls)
    if kind == "fovea":
        clear_unused_fovea_targets(recorder.calls, head.num_classes)
    else:
        compact_anchor_targets(recorder.calls, "get_targets")
    featmap_sizes = [tuple(c.shape[-2:]) for c in cls_scores]
    network: Dict[str, Any] = {
        "backbone": plain(backbone),
        "neck": plain(neck),
        "head": {"cls_scores": plain(cls_scores), "bbox_preds": plain(bbox_preds)},
    }
    if kind == "anchor":
        network["anchors"] = plain(head.anchor_generator.grid_anchors(featmap_sizes, device="cpu"))
    else:
        points = head.get_points(featmap_sizes, torch.float32, "cpu")
        network["points"] = [{"y": plain(y), "x": plain(x)} for y, x in points]
    train = {
        "losses": plain(losses),
        "grads": gradients(losses, {"cls_scores": list(cls_scores), "bbox_preds": list(bbox_preds)}),
        "calls": dict(recorder.calls),
    }
    model.eval()
    test: Dict[str, Any] = {"rescale_false": [], "rescale_true": []}
    with torch.no_grad():
        for i, meta in enumerate(inputs["test_metas"]):
            _, neck = features(model, padded_test_image(inputs, i))
            outs = head(neck)
            for rescale in (False, True):
                ((boxes, labels),) = head.get_bboxes(*outs, [meta], rescale=rescale)
                test[f"rescale_{str(rescale).lower()}"].append(
                    {"boxes": plain(boxes[:, :4]), "scores": plain(boxes[:, 4]), "labels": plain(labels)}
                )
    return {"network": network, "train": train, "test": test}


def wrap_two_stage(recorder: Recorder, model) -> None:
    rpn, roi = model.rpn_head, model.roi_head
    recorder.wrap(rpn.assigner, "assign", "rpn_assign", (None, "gt_bboxes"))
    recorder.wrap(rpn, "get_targets", "rpn_get_targets", ())
    if hasattr(rpn, "aLRP_Loss"):
        recorder.wrap(rpn.loss_bbox, "forward", "rpn_loss_bbox", ("pred", "target", "weight"))
        recorder.wrap(rpn.aLRP_Loss, "apply", "rpn_ranking_loss", (None, "targets", "regression_losses"))
    else:  # per level, over all anchors: inputs are the head outputs and rpn_get_targets
        recorder.wrap(rpn.loss_bbox, "forward", "rpn_loss_bbox", ())
        recorder.wrap(rpn.loss_cls, "forward", "rpn_loss_cls", ())
    recorder.wrap(roi.bbox_assigner, "assign", "roi_assign", (None, "gt_bboxes"))
    recorder.wrap(roi.bbox_sampler, "sample", "roi_sample", ())
    recorder.wrap(roi.bbox_head, "get_targets", "roi_get_targets", ())
    recorder.wrap(roi.bbox_head.loss_bbox, "forward", "roi_loss_bbox", ("pred", "target", "weight"))
    if hasattr(roi.bbox_head, "aLRP_Loss"):
        recorder.wrap(roi.bbox_head.aLRP_Loss, "apply", "roi_ranking_loss", (None, "targets", "regression_losses"))
    else:
        recorder.wrap(roi.bbox_head.loss_cls, "forward", "roi_loss_cls", (None, "label", "weight"))


def run_two_stage(model, inputs) -> Dict[str, Any]:
    """One training forward of Faster R-CNN (RPN outputs, anchors, RPN assignment and targets, proposals, RoI
    assignment and sampling, RoIs, RoI features, box-head outputs, targets, losses and gradients), then the
    official test of each image alone (proposals, RoIs, RoI features, box-head outputs, detections)."""
    rpn, roi = model.rpn_head, model.roi_head
    recorder = Recorder()
    live: Dict[str, Any] = {}
    wrap_two_stage(recorder, model)
    handles = [
        recorder.hook_module(roi.bbox_roi_extractor, "roi_features", live, first_input=1),
        recorder.hook_module(roi.bbox_head, "box_head", live, first_input=1),
    ]
    torch.manual_seed(TRAIN_SEED)  # the RandomSampler of the cross-entropy baselines
    model.train()
    backbone, neck = features(model, inputs["images"])
    rpn_cls, rpn_reg = rpn(neck)
    proposal_cfg = model.train_cfg.get("rpn_proposal", model.test_cfg.rpn)
    rpn_losses = rpn.loss(rpn_cls, rpn_reg, inputs["gt_bboxes"], inputs["train_metas"])
    proposals = rpn.get_bboxes(rpn_cls, rpn_reg, inputs["train_metas"], cfg=proposal_cfg)
    roi_losses = roi.forward_train(neck, inputs["train_metas"], proposals, inputs["gt_bboxes"], inputs["gt_labels"])
    compact_ranking_targets(recorder.calls)
    compact_anchor_targets(recorder.calls, "rpn_get_targets")
    cls_score, bbox_pred = live["box_head"]
    for handle in handles:
        handle.remove()
    featmap_sizes = [tuple(c.shape[-2:]) for c in rpn_cls]
    calls = dict(recorder.calls)
    # The proposals, and the RoIs every one of which the samplers keep (fewer than their 512), are the same in
    # every variant: they go with the network.
    network = {
        "backbone": plain(backbone),
        "neck": plain(neck),
        "head": {"rpn_cls_scores": plain(rpn_cls), "rpn_bbox_preds": plain(rpn_reg)},
        "anchors": plain(rpn.anchor_generator.grid_anchors(featmap_sizes, device="cpu")),
        "proposals": plain(proposals),
        "rois": calls.pop("roi_features")[0]["input"][0],
        "box_head": {"cls_score": plain(cls_score), "bbox_pred": plain(bbox_pred)},
    }
    train = {
        "rpn_losses": plain(rpn_losses),
        "rpn_grads": gradients(rpn_losses, {"rpn_cls_scores": list(rpn_cls), "rpn_bbox_preds": list(rpn_reg)}),
        "roi_losses": plain(roi_losses),
        "roi_grads": gradients(roi_losses, {"cls_score": [cls_score], "bbox_pred": [bbox_pred]}),
        "calls": {k: v for k, v in calls.items() if k != "box_head"},
    }
    model.eval()
    test: Dict[str, Any] = {k: [] for k in ("proposals", "rois", "rescale_false", "rescale_true")}
    with torch.no_grad():
        for i, meta in enumerate(inputs["test_metas"]):
            recorder = Recorder()
            handles = [recorder.hook_module(roi.bbox_roi_extractor, "roi_features", live, first_input=1)]
            _, neck = features(model, padded_test_image(inputs, i))
            proposals = rpn.simple_test_rpn(neck, [meta])
            test["proposals"].append(plain(proposals[0]))
            for rescale in (False, True):
                boxes, labels = roi.simple_test_bboxes(neck, [meta], proposals, model.test_cfg.rcnn, rescale=rescale)
                test[f"rescale_{str(rescale).lower()}"].append(
                    {"boxes": plain(boxes[:, :4]), "scores": plain(boxes[:, 4]), "labels": plain(labels)}
                )
            for handle in handles:
                handle.remove()
            test["rois"].append(recorder.calls["roi_features"][0]["input"][0])
    return {"network": network, "train": train, "test": test}


def assert_same(first: Any, other: Any, what: str) -> None:
    a, b = flatten(first), flatten(other)
    if a.keys() != b.keys() or any(
        not torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] != b[k] for k in a
    ):
        raise RuntimeError(f"{what} differ between the variants of one network")


def network_fixture(official_repo: str, name: str, kind: str, backbone: Dict[str, Any], variants: Dict[str, str]):
    """Runs every variant (official config) of one reduced network; returns the fixture and the backbone and neck
    parts (state dict entries and features) for the shared file."""
    inputs = make_inputs(load_official_config(official_repo, "alrp_loss_retinanet_r50_fpn_100e_coco500.py"))
    fixture: Dict[str, Any] = {
        "meta": {
            "fixture": name,
            "official_commit": OFFICIAL_COMMIT,
            "kind": kind,
            "reduction": {**REDUCTION, **backbone},
            "dtype": "float32",
            "seed": TRAIN_SEED,
        },
        "variants": {},
    }
    first: Dict[str, Any] = {}
    for variant, config in variants.items():
        cfg = reduce_config(load_official_config(official_repo, config), kind, backbone)
        model = build_official_model(cfg)
        randomise(model, seed=TRAIN_SEED, gain_scale=CLASSIFIER_GAIN_SCALES.get(name, 1.0))
        state_dict = {k: v.clone() for k, v in model.state_dict().items()}
        run = run_two_stage(model, inputs) if kind == "two_stage" else run_dense(model, inputs, kind)
        if first:
            assert_same(first["state_dict"], state_dict, "weights")
            assert_same(first["network"], run["network"], "network outputs")
            assert_same(first["test"], run["test"], "test outputs")
        else:
            first = {"state_dict": state_dict, "network": run["network"], "test": run["test"]}
        fixture["variants"][variant] = {
            "official_config": config,
            "checkpoint_meta": {"mmdet_version": "2.1.0", "config": checkpoint_config_text(cfg, config)},
            "train": run["train"],
        }
    network = first["network"]
    shared = {
        "backbone": {k: v for k, v in first["state_dict"].items() if k.startswith("backbone.")},
        "neck": {k: v for k, v in first["state_dict"].items() if k.startswith("neck.")},
        "backbone_features": network.pop("backbone"),
        "neck_features": network.pop("neck"),
    }
    fixture["state_dict"] = {k: v for k, v in first["state_dict"].items() if not k.startswith(("backbone.", "neck."))}
    fixture["network"] = network
    fixture["test"] = first["test"]
    return fixture, shared


def inputs_fixture(official_repo: str) -> Dict[str, Any]:
    inputs = make_inputs(load_official_config(official_repo, "alrp_loss_retinanet_r50_fpn_100e_coco500.py"))
    return {
        "official_commit": OFFICIAL_COMMIT,
        "images": inputs["images"],
        "gt_bboxes": inputs["gt_bboxes"],
        "gt_labels": inputs["gt_labels"],
        "train_metas": metas_record(inputs["train_metas"]),
        "test_metas": metas_record(inputs["test_metas"]),
    }


def write_network_fixtures(official_repo: str, output: str, names: Sequence[str]) -> None:
    """Writes one file per network and backbone_r50.pth.gz: the ResNet-50 weights and C2-C5 once, and the two FPNs
    (P3-P7 from C3-C5 and C5, P2-P6 from C2-C5) with their outputs. The DCN network keeps its own backbone and
    neck in its file."""
    shared_backbone: Dict[str, Any] = {}
    for name, kind, backbone, variants in FIXTURES:
        if name not in names:
            continue
        fixture, shared = network_fixture(official_repo, name, kind, backbone, variants)
        if backbone.get("groups"):
            fixture["state_dict"].update({**shared["backbone"], **shared["neck"]})
            fixture["backbone_features"] = shared["backbone_features"]
            fixture["neck_features"] = shared["neck_features"]
            fixture["meta"]["backbone"] = fixture["meta"]["neck"] = "in this file"
        else:
            neck_name = "p2_p6" if kind == "two_stage" else "p3_p7"
            if shared_backbone:
                assert_same(shared_backbone["state_dict"], shared["backbone"], "ResNet-50 weights")
                assert_same(shared_backbone["features"], shared["backbone_features"], "C2-C5")
            else:
                shared_backbone.update(state_dict=shared["backbone"], features=shared["backbone_features"], necks={})
            neck = {"state_dict": shared["neck"], "features": shared["neck_features"]}
            if neck_name in shared_backbone["necks"]:
                assert_same(shared_backbone["necks"][neck_name], neck, f"FPN {neck_name}")
            shared_backbone["necks"][neck_name] = neck
            fixture["meta"]["backbone"] = f"{SHARED_BACKBONE_FILE}: state_dict, features"
            fixture["meta"]["neck"] = f"{SHARED_BACKBONE_FILE}: necks/{neck_name}"
        save_gzipped(fixture, os.path.join(output, f"{name}.pth.gz"))
        print(f"wrote {name}.pth.gz")
    if shared_backbone:
        shared_backbone["meta"] = {"official_commit": OFFICIAL_COMMIT, "reduction": dict(REDUCTION), "seed": TRAIN_SEED}
        save_gzipped(shared_backbone, os.path.join(output, SHARED_BACKBONE_FILE))


# ---------------------------------------------------------------------------------------------------------------
# Key sets of the 14 full models, the test-time pipeline and the training-set filter.
# ---------------------------------------------------------------------------------------------------------------


def key_set_fixture(official_repo: str, config: str) -> Dict[str, Any]:
    cfg = load_official_config(official_repo, config)
    model = build_official_model(cfg)
    return {
        "official_config": config,
        "official_commit": OFFICIAL_COMMIT,
        "meta_config": checkpoint_config_text(cfg, config),
        "state_dict_shapes": {k: list(v.shape) for k, v in model.state_dict().items()},
    }


def synthetic_photo(height: int, width: int) -> np.ndarray:
    """A smooth BGR uint8 image with edges (gradients, discs and stripes), so that resizing is exercised."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    b = 128 + 100 * np.sin(x / 7.0) * np.cos(y / 11.0)
    g = 255 * (((x - width * 0.3) ** 2 + (y - height * 0.5) ** 2) < (0.25 * height) ** 2)
    r = 255 * ((x // 9 + y // 13) % 2)
    return np.clip(np.stack([b, g, r], axis=-1), 0, 255).astype(np.uint8)


def png_bytes(image: np.ndarray) -> torch.Tensor:
    """An HxWx3 uint8 image as the bytes of a PNG file (lossless, small for the synthetic images)."""
    import cv2

    ok, encoded = cv2.imencode(".png", image)
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return torch.from_numpy(encoded.reshape(-1).copy())


def pipeline_fixture(official_repo: str) -> Dict[str, Any]:
    """The official test pipeline of the 500 and 800 configs (LoadImageFromFile, Resize keep_ratio, RandomFlip
    off, Pad size_divisor 32) on synthetic images written to PNG files: one that the resize shrinks, one that it
    enlarges. Images are kept as PNG bytes: the raw BGR image as loaded, and the resized, padded image (BGR,
    before Normalize, which the fixture gives as mean, std and to_rgb)."""
    import mmcv
    from mmdet.datasets.pipelines import Compose

    result: Dict[str, Any] = {}
    raw_sizes = {"shrunk": (16, 1600), "enlarged": (8, 200)}
    for scale, config in (("500", PUBLISHED_CONFIGS[1]), ("800", PUBLISHED_CONFIGS[5])):
        cfg = mmcv.Config.fromfile(os.path.join(official_repo, CONFIG_DIR, config))
        pipeline = copy.deepcopy(cfg.data.test.pipeline)
        transforms = pipeline[1]["transforms"]
        normalize = next(t for t in transforms if t["type"] == "Normalize")
        pipeline[1]["transforms"] = [t for t in transforms if t["type"] != "Normalize"]
        for name, (h, w) in raw_sizes.items():
            image = synthetic_photo(h, w)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, f"{name}.png")
                mmcv.imwrite(image, path)
                out = Compose(pipeline)({"img_info": {"filename": path}, "img_prefix": None})
            meta = out["img_metas"][0].data
            resized = out["img"][0].permute(1, 2, 0).numpy()
            if not np.array_equal(resized, np.round(resized)):
                raise RuntimeError("the resized image is not integer-valued before Normalize")
            result[f"{scale}_{name}"] = {
                "raw_bgr_png": png_bytes(image),
                "resized_padded_bgr_png": png_bytes(resized.astype(np.uint8)),
                "img_scale": torch.tensor(cfg.data.test.pipeline[1]["img_scale"]),
                "img_shape": torch.tensor(meta["img_shape"][:2]),
                "pad_shape": torch.tensor(meta["pad_shape"][:2]),
                "ori_shape": torch.tensor(meta["ori_shape"][:2]),
                "scale_factor": torch.from_numpy(np.asarray(meta["scale_factor"], dtype=np.float32)),
                "normalize_mean": torch.tensor(normalize["mean"]),
                "normalize_std": torch.tensor(normalize["std"]),
                "normalize_to_rgb": bool(normalize["to_rgb"]),
            }
    return result


def training_filter_fixture() -> Dict[str, Any]:
    """The official CocoDataset (train mode) on a synthetic COCO json: which images it keeps and the boxes, labels
    and ignored (crowd) boxes it gives each."""
    from mmdet.datasets import CocoDataset
    from pycocotools.coco import COCO

    # mmdetection 2.1 calls open-mmlab's pycocotools fork (mmpycocotools), whose snake_case methods these are.
    COCO.get_cat_ids = lambda self, cat_names=(), sup_names=(), cat_ids=(): self.getCatIds(
        cat_names, sup_names, cat_ids
    )
    COCO.get_img_ids = lambda self, img_ids=(), cat_ids=(): self.getImgIds(img_ids, cat_ids)
    COCO.get_ann_ids = lambda self, img_ids=(), cat_ids=(), area_rng=(), iscrowd=None: self.getAnnIds(
        img_ids, cat_ids, area_rng, iscrowd
    )
    COCO.load_imgs = COCO.loadImgs
    COCO.load_anns = COCO.loadAnns

    images = [
        {"id": 1, "file_name": "normal.jpg", "width": 100, "height": 80},
        {"id": 2, "file_name": "crowd_only.jpg", "width": 100, "height": 80},
        {"id": 3, "file_name": "no_annotation.jpg", "width": 100, "height": 80},
        {"id": 4, "file_name": "too_small.jpg", "width": 31, "height": 100},
        {"id": 5, "file_name": "tiny_boxes_only.jpg", "width": 100, "height": 80},
        {"id": 6, "file_name": "outside_only.jpg", "width": 100, "height": 80},
    ]

    def ann(ann_id, image_id, bbox, category=1, iscrowd=0, area=None):
        return {
            "id": ann_id,
            "image_id": image_id,
            "category_id": category,
            "bbox": bbox,
            "area": bbox[2] * bbox[3] if area is None else area,
            "iscrowd": iscrowd,
            "segmentation": [],
        }

    annotations = [
        ann(1, 1, [10.0, 10.0, 30.0, 20.0]),
        ann(2, 1, [50.0, 5.0, 0.5, 30.0]),  # width < 1: dropped
        ann(3, 1, [60.0, 40.0, 20.0, 0.9]),  # height < 1: dropped
        ann(4, 1, [5.0, 50.0, 10.0, 10.0], area=0.0),  # area 0: dropped
        ann(5, 1, [90.0, 70.0, 30.0, 30.0], category=3),  # partly outside: kept, not clipped
        ann(6, 1, [20.0, 30.0, 40.0, 40.0], iscrowd=1),  # crowd: ignored box
        ann(7, 1, [1.0, 1.0, 1.0, 1.0]),  # exactly 1 x 1: kept
        ann(8, 2, [10.0, 10.0, 50.0, 50.0], iscrowd=1),
        ann(9, 4, [1.0, 1.0, 20.0, 20.0]),
        ann(10, 5, [10.0, 10.0, 0.5, 0.5]),
        ann(11, 6, [120.0, 10.0, 10.0, 10.0]),  # entirely outside the image: dropped
    ]
    categories = [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "instances.json")
        with open(path, "w") as f:
            json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
        CocoDataset.CLASSES = ("a", "b")
        dataset = CocoDataset(ann_file=path, pipeline=[], img_prefix=tmp)
        kept = [info["id"] for info in dataset.data_infos]
        parsed = {}
        for index, info in enumerate(dataset.data_infos):
            annotation = dataset.get_ann_info(index)
            parsed[str(info["id"])] = {
                "bboxes": annotation["bboxes"].tolist(),
                "labels": annotation["labels"].tolist(),
                "bboxes_ignore": annotation["bboxes_ignore"].tolist(),
            }
    return {
        "official_commit": OFFICIAL_COMMIT,
        "coco_json": {"images": images, "annotations": annotations, "categories": categories},
        "kept_image_ids": kept,
        "annotations_of_kept_images": parsed,
    }


# ---------------------------------------------------------------------------------------------------------------
# Writing and comparing.
# ---------------------------------------------------------------------------------------------------------------


def write_gzipped(data: bytes, path: str) -> None:
    """gzip with mtime 0 and no file name in the header: the same bytes in every run."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(data)


def save_gzipped(value: Any, path: str) -> None:
    """``torch.save`` into a gzip file (the fixtures are about a third smaller)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    write_gzipped(buffer.getvalue(), path)


def load_gzipped(path: str) -> Any:
    with gzip.open(path, "rb") as f:
        return torch.load(io.BytesIO(f.read()), weights_only=True)


def flatten(value: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(value, dict):
        out: Dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}/{k}" if prefix else str(k)))
        return out
    if isinstance(value, (list, tuple)):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}/{i}"))
        return out
    return {prefix: value}


def compare(first_dir: str, second_dir: str) -> float:
    """Prints the largest difference between two runs' files; returns the largest absolute difference."""
    worst = 0.0
    for name in sorted(os.listdir(first_dir)):
        a_path, b_path = os.path.join(first_dir, name), os.path.join(second_dir, name)
        if name.endswith(".pth.gz"):
            a, b = flatten(load_gzipped(a_path)), flatten(load_gzipped(b_path))
        elif name.endswith((".json", ".json.gz")):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(a_path, "rt") as fa, opener(b_path, "rt") as fb:
                a, b = flatten(json.load(fa)), flatten(json.load(fb))
        else:
            continue
        if a.keys() != b.keys():
            raise SystemExit(f"{name}: the two runs recorded different entries: {sorted(a.keys() ^ b.keys())[:10]}")
        largest = 0.0
        for key in a:
            x, y = a[key], b[key]
            if isinstance(x, torch.Tensor):
                if x.shape != y.shape or x.dtype != y.dtype:
                    raise SystemExit(f"{name} {key}: shapes {tuple(x.shape)} / {tuple(y.shape)}")
                if x.numel():
                    diff = (x.double() - y.double()).abs().nan_to_num(0.0).max().item()
                    if not torch.equal(x.isnan(), y.isnan()):
                        raise SystemExit(f"{name} {key}: NaN at different places")
                    largest = max(largest, diff)
            elif x != y:
                raise SystemExit(f"{name} {key}: {x!r} != {y!r}")
        print(f"{name}: largest absolute difference between the two runs {largest:.3g}")
        worst = max(worst, largest)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-repo", required=True, help="checkout of kemaloksuz/aLRPLoss")
    parser.add_argument("--output", required=True, help="folder of the fixtures (tests/fixtures/official)")
    parser.add_argument("--compare", help="a folder written by an earlier run: compare every tensor with it")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.official_repo, CONFIG_DIR)):
        raise SystemExit(f"{args.official_repo} has no {CONFIG_DIR}: pass a checkout of kemaloksuz/aLRPLoss")
    torch.set_num_threads(1)  # one summation order, the same in every run
    install_runtime_replacements(args.official_repo)
    os.makedirs(os.path.join(args.output, "keysets"), exist_ok=True)
    save_gzipped(inputs_fixture(args.official_repo), os.path.join(args.output, "inputs.pth.gz"))
    write_network_fixtures(args.official_repo, args.output, [f[0] for f in FIXTURES])
    for config in PUBLISHED_CONFIGS:
        path = os.path.join(args.output, "keysets", config.replace(".py", ".json.gz"))
        write_gzipped(json.dumps(key_set_fixture(args.official_repo, config), indent=0).encode(), path)
    save_gzipped(pipeline_fixture(args.official_repo), os.path.join(args.output, "test_pipeline.pth.gz"))
    with open(os.path.join(args.output, "training_filter.json"), "w") as f:
        json.dump(training_filter_fixture(), f, indent=1)
    print("wrote inputs.pth.gz, keysets/, test_pipeline.pth.gz, training_filter.json")
    if args.compare:
        compare(args.compare, args.output)
        compare(os.path.join(args.compare, "keysets"), os.path.join(args.output, "keysets"))


if __name__ == "__main__":
    main()
