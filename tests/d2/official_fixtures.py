"""The reference tensors of the official aLRP Loss code (tests/fixtures/official, written by
tools/official_reference.py; README there) and the project configs of the same reduced networks."""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any, Dict, Mapping

import torch
from detectron2.config import CfgNode
from torch import Tensor

from alrp_d2.config import setup_cfg

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE_DIR = REPO_ROOT / "tests" / "fixtures" / "official"
KEYSET_DIR = FIXTURE_DIR / "keysets"
CONVERTER_PATH = REPO_ROOT / "tools" / "convert_official_checkpoint.py"
SHARED_BACKBONE = "backbone_r50.pth"


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
    return torch.load(FIXTURE_DIR / name, map_location="cpu", weights_only=True)


def load_keyset(path: Path) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def network(name: str) -> Dict[str, Any]:
    """A network fixture (e.g. "retinanet_iou") with its complete official state dict and its backbone and neck
    features, taken from backbone_r50.pth unless the file has its own."""
    fixture = dict(load_fixture(f"{name}.pth"))
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
    return load_fixture("inputs.pth")


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
    return cfg
