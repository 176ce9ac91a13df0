#!/usr/bin/env python3
# ruff: noqa: E402  (the warning filters below come before detectron2 is imported)
"""Converts a checkpoint of the official aLRP Loss models (kemaloksuz/aLRPLoss, an mmdetection 2.1 fork) into a
detectron2 checkpoint of this project's model for the same network.

    python tools/convert_official_checkpoint.py OFFICIAL.pth OUTPUT.pth [--config CONFIG]
    python train_net.py --config-file PROJECT_CONFIG --eval-only MODEL.WEIGHTS OUTPUT.pth

The official checkpoint is mmcv's ``{"state_dict": ..., "meta": ...}``. Its network is identified from
``meta["config"]`` (the config text that mmdetection's tools/train.py saves) among the 14 published models
(OFFICIAL_MODELS); ``--config`` names it instead when the checkpoint carries no config (a published config file
name, e.g. ``alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py``) or gives this project's config to convert for
(a ``.yaml`` file, e.g. for a model trained with other widths). The tool prints the project config to evaluate
with.

Renaming: mmdetection's ResNet / ResNeXt (``layerN``, ``bnK``, ``downsample``, DCNv2 ``conv2.conv_offset``) to
detectron2's (``resN+1``, ``convK.norm``, ``shortcut``, ``conv2_offset``: the same (dy, dx) x taps, mask layout);
the FPN (``lateral_convs`` / ``fpn_convs``, extra convs to ``top_block.p6`` / ``p7``); the RetinaNet / ATSS and
FoveaBox heads (``cls_convs`` / ``reg_convs`` to ``cls_subnet`` / ``bbox_subnet``); the RPN and the two-FC box
head. mmdetection orders the anchors of a location ratio-major (all scales of the first ratio, then the next
ratio), detectron2 size-major: the output channels of the dense heads' classification and regression convs are
permuted block-wise. The box heads need no change: the softmax head's background is the last of its
num_classes + 1 outputs in both, the sigmoid head of aLRP Faster R-CNN has num_classes outputs in both.

Every official tensor must be mapped and every tensor of the project model filled, with the same shape, or the
tool stops naming the keys. Needs torch, detectron2 and alrp_d2 (to build the project model's key set on the
meta device), not mmcv or mmdetection.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from alrp_d2.known_warnings import ignore_third_party_deprecations

ignore_third_party_deprecations()  # before detectron2 is imported

import torch
from torch import Tensor

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:  # run as a script from anywhere: import this checkout's alrp_d2
    sys.path.insert(0, REPO_ROOT)

from detectron2.config import CfgNode  # noqa: E402
from detectron2.data.datasets.builtin_meta import COCO_CATEGORIES  # noqa: E402
from detectron2.modeling import META_ARCH_REGISTRY  # noqa: E402

from alrp_d2.checkpoint.archive import ArchiveSizeError, check_archive_sizes  # noqa: E402
from alrp_d2.config import setup_cfg  # noqa: E402

AUTHOR = "kemaloksuz/aLRPLoss (mmdetection 2.1), converted by tools/convert_official_checkpoint.py"
#: The classes of the published models (COCO 2017's 80 categories), recorded as training records them.
COCO_CLASSES = {
    "dataset": "coco_2017_train",
    "names": [c["name"] for c in COCO_CATEGORIES if c["isthing"]],
    "category_ids": [c["id"] for c in COCO_CATEGORIES if c["isthing"]],
}


class ConversionError(ValueError):
    """The checkpoint cannot be converted: unknown network, unmapped or missing keys, or shapes that differ."""


@dataclass(frozen=True)
class OfficialModel:
    """A published official model: its config file, this project's config for it, and the values of its config
    that tell it apart from the other 13 (dotted paths into the config; None = absent)."""

    config: str
    project_config: str
    signature: Mapping[str, Any]


def _retinanet(head: str, assigner: str, backbone: str, depth: int, scales_per_octave: int, dcn: bool = False):
    return {
        "model.type": "RetinaNet",
        "model.backbone.type": backbone,
        "model.backbone.depth": depth,
        "model.backbone.dcn.type": "DCNv2" if dcn else None,
        "model.bbox_head.type": head,
        "model.bbox_head.anchor_generator.scales_per_octave": scales_per_octave,
        "train_cfg.assigner.type": assigner,
    }


def _faster_rcnn(rpn_head: str, bbox_head: str, loss_bbox: str):
    return {
        "model.type": "FasterRCNN",
        "model.backbone.type": "ResNet",
        "model.backbone.depth": 50,
        "model.rpn_head.type": rpn_head,
        "model.roi_head.bbox_head.type": bbox_head,
        "model.roi_head.bbox_head.loss_bbox.type": loss_bbox,
    }


def _fovea(head: str):
    return {
        "model.type": "FOVEA",
        "model.backbone.type": "ResNet",
        "model.backbone.depth": 50,
        "model.bbox_head.type": head,
    }


# The 14 models of the official README, in its order.
OFFICIAL_MODELS: Tuple[OfficialModel, ...] = (
    OfficialModel(
        "ap_loss_retinanet_r50_fpn_100e_coco500.py",
        "configs/ap_R50_500.yaml",
        _retinanet("APLossRetinaHead", "MaxIoUAssigner", "ResNet", 50, 2),
    ),
    OfficialModel(
        "alrp_loss_retinanet_r50_fpn_100e_coco500.py",
        "configs/alrp_R50_500.yaml",
        _retinanet("aLRPLossRetinaHead", "MaxIoUAssigner", "ResNet", 50, 2),
    ),
    OfficialModel(
        "alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py",
        "configs/alrp_R50_ATSS_500.yaml",
        _retinanet("aLRPLossRetinaHead", "ATSSAssigner", "ResNet", 50, 2),
    ),
    OfficialModel(
        "alrp_loss_retinanet_r101_fpn_ATSS_100e_coco500.py",
        "configs/alrp_R101_ATSS_500.yaml",
        _retinanet("aLRPLossRetinaHead", "ATSSAssigner", "ResNet", 101, 2),
    ),
    OfficialModel(
        "alrp_loss_retinanet_x101_64x4d_fpn_ATSS_100e_coco500.py",
        "configs/alrp_X101_ATSS_500.yaml",
        _retinanet("aLRPLossRetinaHead", "ATSSAssigner", "ResNeXt", 101, 2),
    ),
    OfficialModel(
        "alrp_loss_retinanet_r101_fpn_ATSS_100e_coco800.py",
        "configs/alrp_R101_ATSS_800.yaml",
        _retinanet("aLRPLossRetinaHead", "ATSSAssigner", "ResNet", 101, 3),
    ),
    OfficialModel(
        "alrp_loss_retinanet_x101_64x4d_fpn_ATSS_100e_coco800.py",
        "configs/alrp_X101_ATSS_800.yaml",
        _retinanet("aLRPLossRetinaHead", "ATSSAssigner", "ResNeXt", 101, 3),
    ),
    OfficialModel(
        "alrp_loss_retinanet_x101_64x4d_fpn_dcn_ATSS_100e_coco800.py",
        "configs/alrp_X101_DCN_ATSS_800.yaml",
        _retinanet("aLRPLossRetinaHead", "ATSSAssigner", "ResNeXt", 101, 3, dcn=True),
    ),
    OfficialModel("fovea_r50_fpn_4x4_100e_coco500.py", "configs/foveabox_focal_R50_500.yaml", _fovea("FoveaHead")),
    OfficialModel(
        "ap_loss_fovea_r50_fpn_4x4_100e_coco500.py", "configs/foveabox_ap_R50_500.yaml", _fovea("APLossFoveaHead")
    ),
    OfficialModel(
        "alrp_loss_fovea_r50_fpn_4x4_100e_coco500.py", "configs/foveabox_alrp_R50_500.yaml", _fovea("aLRPLossFoveaHead")
    ),
    OfficialModel(
        "faster_rcnn_r50_fpn_100e_coco500.py",
        "configs/faster_rcnn_R50_FPN_500.yaml",
        _faster_rcnn("RPNHead", "Shared2FCBBoxHead", "L1Loss"),
    ),
    OfficialModel(
        "faster_rcnn_r50_fpn_giou_100e_coco500.py",
        "configs/faster_rcnn_giou_R50_FPN_500.yaml",
        _faster_rcnn("RPNHead", "Shared2FCBBoxHead", "GIoULoss"),
    ),
    OfficialModel(
        "alrp_loss_faster_rcnn_r50_fpn_100e_coco500.py",
        "configs/alrp_faster_rcnn_R50_FPN_500.yaml",
        _faster_rcnn("aLRPLossRPNHead", "aLRPLossShared2FCBBoxHead", "GIoULoss"),
    ),
)


# ---------------------------------------------------------------------------------------------------------------
# Which network: the official config text of the checkpoint, or --config.
# ---------------------------------------------------------------------------------------------------------------


#: Bounds on what a checkpoint's config text may make the converter build (the published ones: ~10 KB, ranges of
#: a few elements): every value is a literal of the text, or ``range(...)``; the numbers of all the ranges of one
#: text together are at most MAX_RANGE_NUMBERS.
MAX_CONFIG_TEXT = 1_000_000
MAX_RANGE_NUMBERS = 10_000


class _LiteralReader:
    """Reads config expressions (:meth:`value`) with one budget of range numbers for the whole text."""

    def __init__(self) -> None:
        self.range_numbers = 0

    def _range(self, node: ast.Call) -> List[int]:
        arguments = [self.value(arg) for arg in node.args]
        if node.keywords or not 1 <= len(arguments) <= 3 or not all(type(a) is int for a in arguments):
            raise ValueError(f"range() takes 1 to 3 integers, got {ast.unparse(node)}")
        numbers = range(*arguments)
        self.range_numbers += len(numbers)
        if self.range_numbers > MAX_RANGE_NUMBERS:
            raise ValueError(
                f"{ast.unparse(node)[:80]} brings the numbers of the text's ranges to {self.range_numbers} (at most "
                f"{MAX_RANGE_NUMBERS} are read in all)"
            )
        return list(numbers)

    def value(self, node: ast.AST) -> Any:
        """The value of a config expression: literals, and ``dict(...)`` calls as mmcv's pretty_text writes them,
        and ``range(...)`` within the text's budget."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
            return {keyword.arg: self.value(keyword.value) for keyword in node.keywords}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            return self._range(node)
        if isinstance(node, ast.Dict):
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(element) for element in node.elts]
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise ValueError(
                f"{ast.unparse(node)[:80]} is not a literal (literals, dict() and range() are read)"
            ) from None


def parse_config_text(text: str) -> Dict[str, Any]:
    """The top-level assignments of an mmdetection config text (``meta["config"]``) as nested dicts; a text of
    more than MAX_CONFIG_TEXT characters is refused, and so are ranges of more than MAX_RANGE_NUMBERS numbers in
    all (nothing much larger than the text is built from it)."""
    if len(text) > MAX_CONFIG_TEXT:
        raise ConversionError(
            f'meta["config"] of the checkpoint has {len(text)} characters: not an mmdetection config text '
            f"(at most {MAX_CONFIG_TEXT} are read)"
        )
    try:
        module = ast.parse(text)
    except (SyntaxError, RecursionError, MemoryError, ValueError) as error:
        raise ConversionError(
            f'meta["config"] of the checkpoint is not an mmdetection config text: {type(error).__name__}: {error}'
        ) from error
    config: Dict[str, Any] = {}
    reader = _LiteralReader()
    for statement in module.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name):
                try:
                    config[target.id] = reader.value(statement.value)
                except (ValueError, TypeError, SyntaxError, RecursionError) as error:
                    raise ConversionError(f'meta["config"]: cannot read the value of {target.id}: {error}') from error
    return config


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def identify_official_model(config: Mapping[str, Any]) -> OfficialModel:
    """The published model whose signature the parsed config matches."""
    matches = [
        model
        for model in OFFICIAL_MODELS
        if all(_lookup(config, path) == value for path, value in model.signature.items())
    ]
    if len(matches) != 1:
        described = {path: _lookup(config, path) for model in OFFICIAL_MODELS for path in model.signature}
        found = ", ".join(m.config for m in matches) if matches else "none"
        raise ConversionError(
            f"the checkpoint's config is not one of the 14 published models (matches: {found}); its values: "
            f"{described}. Pass --config with this project's config for the network."
        )
    return matches[0]


def official_model_by_name(name: str) -> OfficialModel:
    base = os.path.basename(name)
    for model in OFFICIAL_MODELS:
        if model.config == base:
            return model
    known = "\n  ".join(m.config for m in OFFICIAL_MODELS)
    raise ConversionError(f"{name} is not a published official config; the published ones are:\n  {known}")


def resolve_project_config(meta: Mapping[str, Any], config: Optional[str]) -> Tuple[str, Optional[OfficialModel]]:
    """The project config to build (a path) and the published model it stands for (None for a project .yaml given
    with --config). --config wins over the checkpoint's own config text."""
    if config is not None and config.endswith((".yaml", ".yml")):
        if not os.path.isfile(config):
            raise ConversionError(f"--config {config}: no such file")
        return config, None
    if config is not None:
        model = official_model_by_name(config)
    elif isinstance(meta.get("config"), str):
        model = identify_official_model(parse_config_text(meta["config"]))
    else:
        raise ConversionError(
            'the checkpoint has no meta["config"] naming its network: pass --config with the official config file '
            "name (e.g. alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py) or this project's .yaml config"
        )
    path = os.path.join(REPO_ROOT, model.project_config)
    if not os.path.isfile(path):
        raise ConversionError(
            f"{model.config} maps to {model.project_config}, which this checkout does not have; pass --config "
            "with a project config that builds the same network"
        )
    return path, model


# ---------------------------------------------------------------------------------------------------------------
# Renaming and permuting.
# ---------------------------------------------------------------------------------------------------------------

Rule = Tuple["re.Pattern[str]", Callable[["re.Match[str]"], str]]


def _stage(match: re.Match[str]) -> str:
    return f"res{int(match.group(1)) + 1}.{match.group(2)}"


BACKBONE_RULES: List[Rule] = [
    (re.compile(r"backbone\.conv1\.weight"), lambda m: "backbone.bottom_up.stem.conv1.weight"),
    (re.compile(r"backbone\.bn1\.(\w+)"), lambda m: f"backbone.bottom_up.stem.conv1.norm.{m.group(1)}"),
    (
        re.compile(r"backbone\.layer(\d)\.(\d+)\.conv(\d)\.weight"),
        lambda m: f"backbone.bottom_up.{_stage(m)}.conv{m.group(3)}.weight",
    ),
    (
        re.compile(r"backbone\.layer(\d)\.(\d+)\.bn(\d)\.(\w+)"),
        lambda m: f"backbone.bottom_up.{_stage(m)}.conv{m.group(3)}.norm.{m.group(4)}",
    ),
    (
        re.compile(r"backbone\.layer(\d)\.(\d+)\.downsample\.0\.weight"),
        lambda m: f"backbone.bottom_up.{_stage(m)}.shortcut.weight",
    ),
    (
        re.compile(r"backbone\.layer(\d)\.(\d+)\.downsample\.1\.(\w+)"),
        lambda m: f"backbone.bottom_up.{_stage(m)}.shortcut.norm.{m.group(3)}",
    ),
    (
        re.compile(r"backbone\.layer(\d)\.(\d+)\.conv2\.conv_offset\.(weight|bias)"),
        lambda m: f"backbone.bottom_up.{_stage(m)}.conv2_offset.{m.group(3)}",
    ),
]


def fpn_rules(levels: Sequence[str]) -> List[Rule]:
    """mmdetection's FPN convs i = 0.. are detectron2's levels (e.g. ["3", "4", "5"]) in order; the extra convs
    after them are P6 and P7 of detectron2's top block."""
    num = len(levels)

    def lateral(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index >= num:
            raise ConversionError(f"{match.group(0)}: the project FPN has {num} lateral convs")
        return f"backbone.fpn_lateral{levels[index]}.{match.group(2)}"

    def output(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index < num:
            return f"backbone.fpn_output{levels[index]}.{match.group(2)}"
        return f"backbone.top_block.p{6 + index - num}.{match.group(2)}"

    return [
        (re.compile(r"neck\.lateral_convs\.(\d+)\.conv\.(weight|bias)"), lateral),
        (re.compile(r"neck\.fpn_convs\.(\d+)\.conv\.(weight|bias)"), output),
    ]


DENSE_HEAD_RULES: List[Rule] = [
    (
        re.compile(r"bbox_head\.cls_convs\.(\d+)\.conv\.(weight|bias)"),
        lambda m: f"head.cls_subnet.{2 * int(m.group(1))}.{m.group(2)}",
    ),
    (
        re.compile(r"bbox_head\.reg_convs\.(\d+)\.conv\.(weight|bias)"),
        lambda m: f"head.bbox_subnet.{2 * int(m.group(1))}.{m.group(2)}",
    ),
    (re.compile(r"bbox_head\.(retina|fovea)_cls\.(weight|bias)"), lambda m: f"head.cls_score.{m.group(2)}"),
    (re.compile(r"bbox_head\.(retina|fovea)_reg\.(weight|bias)"), lambda m: f"head.bbox_pred.{m.group(2)}"),
]

TWO_STAGE_RULES: List[Rule] = [
    (re.compile(r"rpn_head\.rpn_conv\.(weight|bias)"), lambda m: f"proposal_generator.rpn_head.conv.{m.group(1)}"),
    (
        re.compile(r"rpn_head\.rpn_cls\.(weight|bias)"),
        lambda m: f"proposal_generator.rpn_head.objectness_logits.{m.group(1)}",
    ),
    (
        re.compile(r"rpn_head\.rpn_reg\.(weight|bias)"),
        lambda m: f"proposal_generator.rpn_head.anchor_deltas.{m.group(1)}",
    ),
    (
        re.compile(r"roi_head\.bbox_head\.shared_fcs\.(\d)\.(weight|bias)"),
        lambda m: f"roi_heads.box_head.fc{int(m.group(1)) + 1}.{m.group(2)}",
    ),
    (
        re.compile(r"roi_head\.bbox_head\.fc_cls\.(weight|bias)"),
        lambda m: f"roi_heads.box_predictor.cls_score.{m.group(1)}",
    ),
    (
        re.compile(r"roi_head\.bbox_head\.fc_reg\.(weight|bias)"),
        lambda m: f"roi_heads.box_predictor.bbox_pred.{m.group(1)}",
    ),
]

# Outputs whose channels are blocks of one anchor each, and the anchor generator they follow.
ANCHOR_BLOCK_OUTPUTS = ("head.cls_score.", "head.bbox_pred.", "proposal_generator.rpn_head.objectness_logits.")
ANCHOR_BLOCK_OUTPUTS += ("proposal_generator.rpn_head.anchor_deltas.",)
# Anchor-free: one location, no anchor blocks.
FOVEA_ARCHITECTURES = ("FoveaBox", "AlrpFoveaBox")


def anchor_permutation(num_sizes: int, num_ratios: int) -> Tensor:
    """For detectron2's anchor a = size * num_ratios + ratio, the index of the same anchor in mmdetection's order
    ratio * num_sizes + size."""
    sizes = torch.arange(num_sizes).repeat_interleave(num_ratios)
    ratios = torch.arange(num_ratios).repeat(num_sizes)
    return ratios * num_sizes + sizes


def permute_anchor_blocks(tensor: Tensor, permutation: Tensor, key: str) -> Tensor:
    """Reorders the output channels (dim 0) of a conv whose channels are num_anchors blocks."""
    num_anchors = len(permutation)
    if tensor.shape[0] % num_anchors:
        raise ConversionError(f"{key}: {tensor.shape[0]} output channels are not {num_anchors} anchor blocks")
    blocks = tensor.reshape(num_anchors, tensor.shape[0] // num_anchors, *tensor.shape[1:])
    return blocks[permutation].reshape(tensor.shape)


def _fpn_levels(cfg: CfgNode) -> List[str]:
    return [re.sub(r"\D", "", name) for name in cfg.MODEL.FPN.IN_FEATURES]


def _anchor_counts(cfg: CfgNode) -> Tuple[int, int]:
    sizes = cfg.MODEL.ANCHOR_GENERATOR.SIZES
    ratios = cfg.MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS
    if len({len(s) for s in sizes}) != 1 or len({len(r) for r in ratios}) != 1:
        raise ConversionError("MODEL.ANCHOR_GENERATOR: every level must have the same number of sizes and ratios")
    return len(sizes[0]), len(ratios[0])


def rename_official_state_dict(official: Mapping[str, Tensor], cfg: CfgNode) -> Dict[str, Tensor]:
    """The official tensors under the project model's names, the dense outputs in detectron2's anchor order.
    Raises ConversionError naming the official keys that no rule maps."""
    rules = BACKBONE_RULES + fpn_rules(_fpn_levels(cfg)) + DENSE_HEAD_RULES + TWO_STAGE_RULES
    anchor_based = cfg.MODEL.META_ARCHITECTURE not in FOVEA_ARCHITECTURES
    permutation = anchor_permutation(*_anchor_counts(cfg)) if anchor_based else None
    converted: Dict[str, Tensor] = {}
    unmapped: List[str] = []
    for key, tensor in official.items():
        for pattern, rename in rules:
            match = pattern.fullmatch(key)
            if match:
                new_key = rename(match)
                break
        else:
            unmapped.append(key)
            continue
        if permutation is not None and new_key.startswith(ANCHOR_BLOCK_OUTPUTS):
            tensor = permute_anchor_blocks(tensor, permutation, key)
        if new_key in converted:
            raise ConversionError(f"two official tensors map to {new_key}")
        converted[new_key] = tensor
    if unmapped:
        raise ConversionError(
            f"{len(unmapped)} official tensor(s) have no counterpart in the project model: {unmapped}"
        )
    return converted


def project_model_shapes(cfg: CfgNode) -> Dict[str, torch.Size]:
    """Names and shapes of the project model's state dict, from a model built on the meta device (no memory)."""
    with torch.device("meta"):
        model = META_ARCH_REGISTRY.get(cfg.MODEL.META_ARCHITECTURE)(cfg)
    return {key: value.shape for key, value in model.state_dict().items()}


def check_against_model(converted: Mapping[str, Tensor], shapes: Mapping[str, torch.Size]) -> None:
    """Raises ConversionError unless the converted tensors fill the project model exactly (strict loading)."""
    missing = sorted(set(shapes) - set(converted))
    unexpected = sorted(set(converted) - set(shapes))
    wrong = [
        f"{key}: {tuple(converted[key].shape)} converted, {tuple(shapes[key])} in the model"
        for key in sorted(set(shapes) & set(converted))
        if converted[key].shape != shapes[key]
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensor(s) of the project model that the checkpoint does not fill: {missing}")
    if unexpected:
        problems.append(f"{len(unexpected)} converted tensor(s) the project model does not have: {unexpected}")
    if wrong:
        problems.append(f"{len(wrong)} shape(s) differ:\n  " + "\n  ".join(wrong))
    if problems:
        raise ConversionError("the checkpoint does not fit the project config:\n" + "\n".join(problems))


def initial_loc_weights(cfg: CfgNode, shapes: Mapping[str, torch.Size]) -> Dict[str, Tensor]:
    """The localisation weights of the project model's ranking losses (buffers), which the official
    checkpoints do not store (the official heads keep the self-balance weight in a Python attribute and
    start again from 50): the config's initial weight, MODEL.ALRP.SB_INIT_WEIGHT (or LOC_WEIGHT)."""
    alrp = cfg.MODEL.ALRP
    value = float(alrp.SB_INIT_WEIGHT if alrp.SB_ENABLED else alrp.LOC_WEIGHT)
    return {key: torch.tensor(value) for key in shapes if key.endswith("ranking_loss.loc_weight")}


def convert_state_dict(official: Mapping[str, Tensor], cfg: CfgNode) -> Dict[str, Tensor]:
    """The official state dict converted for the model of ``cfg`` and checked to load strictly into it."""
    converted = rename_official_state_dict(official, cfg)
    shapes = project_model_shapes(cfg)
    converted.update(initial_loc_weights(cfg, shapes))
    check_against_model(converted, shapes)
    return converted


def load_official_checkpoint(path: str) -> Tuple[Dict[str, Tensor], Dict[str, Any]]:
    """(state_dict, meta) of an mmcv checkpoint; a bare state dict has empty meta."""
    try:
        check_archive_sizes(path)
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as error:
        raise ConversionError(f"{path}: no such file") from error
    except ArchiveSizeError as error:
        raise ConversionError(str(error)) from error
    except Exception as error:  # torch raises several types for files that are no checkpoint
        raise ConversionError(f"{path} is not a torch checkpoint of tensors: {error}") from error
    if isinstance(checkpoint, Mapping) and "state_dict" in checkpoint:
        state_dict, meta = checkpoint["state_dict"], checkpoint.get("meta") or {}
    elif isinstance(checkpoint, Mapping) and checkpoint and all(isinstance(v, Tensor) for v in checkpoint.values()):
        state_dict, meta = checkpoint, {}
    else:
        raise ConversionError(f"{path} has no state_dict: not an mmdetection checkpoint")
    if not isinstance(state_dict, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in state_dict.items()
    ):
        raise ConversionError(f"{path}: its state_dict is not a mapping of parameter names to tensors")
    if not isinstance(meta, Mapping):
        raise ConversionError(f"{path}: its meta is a {type(meta).__name__}, not a dict")
    return dict(state_dict), dict(meta)


def convert_checkpoint(official_path: str, output_path: str, config: Optional[str] = None) -> str:
    """Writes the detectron2 checkpoint; returns the project config to evaluate it with."""
    state_dict, meta = load_official_checkpoint(official_path)
    try:
        project_config, official = resolve_project_config(meta, config)
    except ConversionError as error:
        raise ConversionError(f"{official_path}: {error}") from error
    try:
        converted = convert_state_dict(state_dict, setup_cfg(project_config))
    except ConversionError as error:
        source = f"{official.config} (project config {official.project_config})" if official else project_config
        raise ConversionError(
            f"{official_path} as {source}: {error}\nIf the network has other widths or depths than the published "
            "model, pass --config with a project .yaml config that builds it."
        ) from error
    output = {
        "model": converted,
        "__author__": AUTHOR,
        "matching_heuristics": False,
        "official_config": official.config if official else None,
    }
    if official is not None:  # the published models are trained on COCO's 80 classes
        output["classes"] = COCO_CLASSES
    directory = os.path.dirname(os.path.abspath(output_path))
    os.makedirs(directory, exist_ok=True)
    torch.save(output, output_path)
    return project_config


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("official", help="official checkpoint (mmcv: state_dict and meta)")
    parser.add_argument("output", help="detectron2 checkpoint to write (.pth)")
    parser.add_argument(
        "--config",
        help="the official config file name when the checkpoint has no meta['config'], or this project's .yaml "
        "config to convert for",
    )
    args = parser.parse_args(argv)
    try:
        project_config = convert_checkpoint(args.official, args.output, args.config)
    except ConversionError as error:
        raise SystemExit(f"convert_official_checkpoint: {error}") from error
    relative = os.path.relpath(project_config)
    command = f"python train_net.py --config-file {relative} --eval-only MODEL.WEIGHTS {args.output}"
    print(f"wrote {args.output}; evaluate with\n  {command}")


if __name__ == "__main__":
    main()
