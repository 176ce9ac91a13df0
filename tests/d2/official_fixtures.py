"""The reference tensors of the official aLRP Loss code (tests/fixtures/official, written by
tools/official_reference.py; README there) and the project configs of the same reduced networks."""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import math
import sys
from functools import cache
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

import torch
from detectron2.config import CfgNode
from detectron2.modeling import build_model
from torch import Tensor

from alrp_d2.config import setup_cfg

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE_DIR = REPO_ROOT / "tests" / "fixtures" / "official"
KEYSET_DIR = FIXTURE_DIR / "keysets"
CONVERTER_PATH = REPO_ROOT / "tools" / "convert_official_checkpoint.py"
SHARED_BACKBONE = "backbone_r50.pth.gz"


def load_converter():
    """tools/ is no package (and site-packages may hold an unrelated ``tools``): load the converter by path."""
    if "convert_official_checkpoint" in sys.modules:
        return sys.modules["convert_official_checkpoint"]
    spec = importlib.util.spec_from_file_location("convert_official_checkpoint", CONVERTER_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@cache
def load_fixture(name: str) -> Dict[str, Any]:
    """A gzipped ``torch.save`` file of the fixture folder (the cached object: copy before changing it)."""
    with gzip.open(FIXTURE_DIR / name, "rb") as f:
        return torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)


def load_keyset(path: Path) -> Dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def network(name: str) -> Dict[str, Any]:
    """A network fixture (e.g. "retinanet_iou") with its complete official state dict and its backbone and neck
    features, taken from backbone_r50.pth unless the file has its own."""
    fixture = dict(load_fixture(f"{name}.pth.gz"))
    state_dict: Dict[str, Tensor] = dict(fixture["state_dict"])
    if "backbone_features" not in fixture:
        shared = load_fixture(SHARED_BACKBONE)
        neck = shared["necks"]["p2_p6" if fixture["meta"]["kind"] == "two_stage" else "p3_p7"]
        state_dict.update(shared["state_dict"])
        state_dict.update(neck["state_dict"])
        fixture["backbone_features"] = shared["features"]
        fixture["neck_features"] = neck["features"]
    fixture["official_state_dict"] = state_dict
    return fixture


def inputs() -> Dict[str, Any]:
    return load_fixture("inputs.pth.gz")


def reduced_project_cfg(project_config: str, reduction: Mapping[str, Any]) -> CfgNode:
    """The project config with the widths of a reduced official network (tools/official_reference.py REDUCTION),
    random initialisation, CPU."""
    cfg = setup_cfg(str(REPO_ROOT / project_config))
    cfg.defrost()
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.DEVICE = "cpu"
    resnets = cfg.MODEL.RESNETS
    resnets.DEPTH = reduction.get("depth", resnets.DEPTH)
    resnets.STEM_OUT_CHANNELS = reduction["stem_channels"]
    resnets.RES2_OUT_CHANNELS = reduction["base_channels"] * 4
    groups = reduction.get("groups", 1)
    resnets.NUM_GROUPS = groups
    # mmdetection's ResNeXt: floor(planes * base_width / base_channels) * groups channels in the first stage.
    resnets.WIDTH_PER_GROUP = (
        reduction.get("base_width", reduction["base_channels"]) if groups > 1 else reduction["base_channels"]
    )
    cfg.MODEL.FPN.OUT_CHANNELS = reduction["fpn_channels"]
    cfg.MODEL.RETINANET.NUM_CONVS = reduction["stacked_convs"]
    cfg.MODEL.FOVEABOX.NUM_CONVS = reduction["stacked_convs"]
    cfg.MODEL.ROI_BOX_HEAD.FC_DIM = reduction["fc_out_channels"]
    cfg.MODEL.ALRP.ATSS_TOPK = reduction["atss_topk"]
    for key in ("POST_NMS_TOPK_TRAIN", "POST_NMS_TOPK_TEST"):
        cfg.MODEL.RPN[key] = reduction["num_proposals"]
    return cfg


def variant_project_cfg(fixture: Mapping[str, Any], variant: str) -> CfgNode:
    """The project config that the converter maps the variant's official config to, with the fixture's widths."""
    official_config = fixture["variants"][variant]["official_config"]
    project_config = load_converter().official_model_by_name(official_config).project_config
    return reduced_project_cfg(project_config, fixture["meta"]["reduction"])


def converted_model(name: str, variant: str, overrides: Sequence[str] = ()):
    """(fixture, cfg, model): the project model of a fixture's variant (with the config ``overrides``, KEY VALUE
    pairs) and the official weights converted by tools/convert_official_checkpoint.py, loaded strictly. The model
    takes the fixture's images as they are (pixel mean 0, std 1)."""
    fixture = network(name)
    cfg = variant_project_cfg(fixture, variant)
    cfg.MODEL.PIXEL_MEAN, cfg.MODEL.PIXEL_STD = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    cfg.merge_from_list(list(overrides))
    model = build_model(cfg)
    model.load_state_dict(load_converter().convert_state_dict(fixture["official_state_dict"], cfg), strict=True)
    return fixture, cfg, model


def relative_error(ours: Tensor, official: Tensor) -> float:
    """max |ours - official| / max |official| (0 for two zero tensors)."""
    assert ours.shape == official.shape, (ours.shape, official.shape)
    scale = official.abs().max().item()
    difference = (ours - official).abs().max().item()
    return difference / scale if scale > 0 else difference


def reorder_blocks(official: Tensor, order: Tensor) -> Tensor:
    """(N, A * C, H, W) official head output (or gradient) with its A anchor blocks in detectron2's order: our
    block a is the official block order[a]."""
    n, channels, h, w = official.shape
    return official.view(n, len(order), channels // len(order), h, w)[:, order].reshape(n, channels, h, w)


def official_anchor_index(locations_per_level: List[int], order: Tensor) -> Tensor:
    """For every anchor of detectron2's concatenation over the levels (location-major, anchors in detectron2's
    order), its index in mmdetection's concatenation (location-major, anchors ratio-major)."""
    indices, offset = [], 0
    for locations in locations_per_level:
        index = torch.arange(locations)[:, None] * len(order) + order[None, :]
        indices.append(offset + index.reshape(-1))
        offset += locations * len(order)
    return torch.cat(indices)


def assert_fpn_xavier_uniform(backbone: torch.nn.Module) -> int:
    """Every convolution of the FPN (not of ``bottom_up``) is mmdetection's ``xavier_uniform`` with bias 0: its
    largest weight within the bound sqrt(6 / (fan_in + fan_out)) and above 0.9 of it (detectron2's
    ``c2_xavier_fill`` stays under 0.9 of it on the laterals whose input is wider than 1.25x their output).
    Returns the number of convolutions."""
    convs = {n: m for n, m in backbone.named_modules() if isinstance(m, torch.nn.Conv2d) and "bottom_up" not in n}
    for name, conv in convs.items():
        weight = conv.weight
        fan_in, fan_out = weight[0].numel(), weight.shape[0] * weight[0, 0].numel()
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert 0.9 * bound < weight.abs().max() <= bound, name
        assert conv.bias.abs().max() == 0, name
    return len(convs)
