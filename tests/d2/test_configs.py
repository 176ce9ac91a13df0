"""Every config in configs/ loads with the aLRP keys, builds its model and data mappers, and runs
inference, on a tiny backbone (the config's own backbone, heads and loss settings otherwise)."""

from __future__ import annotations

import glob
import os

import pytest
import torch
from detectron2.modeling import build_model

from alrp_d2.config import setup_cfg
from alrp_d2.data import build_alrp_mapper

from .tiny_configs import CONFIG_DIR

CONFIGS = sorted(
    os.path.relpath(path, CONFIG_DIR) for path in glob.glob(os.path.join(CONFIG_DIR, "**", "*.yaml"), recursive=True)
)


def shrink_backbone(cfg) -> None:
    """ResNet-18 with a 64-channel FPN, random init, CPU; everything else as the config says. A config with
    deformable convolutions (bottleneck blocks only) gets a narrow ResNet-50 instead."""
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.RESNETS.DEPTH = 50 if any(cfg.MODEL.RESNETS.DEFORM_ON_PER_STAGE) else 18
    cfg.MODEL.RESNETS.RES2_OUT_CHANNELS = 64
    cfg.MODEL.RESNETS.NUM_GROUPS = 1
    cfg.MODEL.RESNETS.WIDTH_PER_GROUP = 16 if any(cfg.MODEL.RESNETS.DEFORM_ON_PER_STAGE) else 64
    cfg.MODEL.FPN.OUT_CHANNELS = 64  # GroupNorm(32) heads: 2 channels a group, also on 1 x 1 maps


def test_every_config_is_listed():
    assert len(CONFIGS) >= 14
    assert "quickstart/alrp_retinanet_shapes.yaml" in CONFIGS


@pytest.mark.parametrize("name", CONFIGS)
def test_config_builds_and_runs_inference(name):
    cfg = setup_cfg(os.path.join(CONFIG_DIR, name))
    shrink_backbone(cfg)
    build_alrp_mapper(cfg, is_train=True)
    build_alrp_mapper(cfg, is_train=False)
    model = build_model(cfg).eval()
    assert type(model).__name__ == cfg.MODEL.META_ARCHITECTURE
    with torch.no_grad():
        (output,) = model([{"image": torch.rand(3, 64, 80) * 255, "height": 64, "width": 80}])
    assert output["instances"].image_size == (64, 80)
