"""Tiny detectron2 configs for the integration tests (CPU, random init, seconds per step).

Import only after ``pytest.importorskip("detectron2")``.
"""
import os

from detectron2.config import CfgNode, get_cfg

import alrp_d2.modeling  # noqa: F401  (registers the meta-architectures)
from alrp_d2.config import add_alrp_config

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def load_config(name: str) -> CfgNode:
    cfg = get_cfg()
    add_alrp_config(cfg)
    cfg.merge_from_file(os.path.join(CONFIG_DIR, name))
    return cfg


def make_tiny(cfg: CfgNode, num_classes: int = 3) -> CfgNode:
    """A ResNet-18 with a 16-channel FPN and one-conv heads, random init, on the CPU."""
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.RESNETS.DEPTH = 18
    cfg.MODEL.RESNETS.RES2_OUT_CHANNELS = 64
    cfg.MODEL.RESNETS.NORM = "BN"
    cfg.MODEL.FPN.OUT_CHANNELS = 16
    cfg.MODEL.RETINANET.NUM_CONVS = 1
    cfg.MODEL.RETINANET.NUM_CLASSES = num_classes
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = num_classes
    return cfg


def tiny_retinanet_cfg(config: str = "Base-aLRP-RetinaNet.yaml", **alrp) -> CfgNode:
    cfg = make_tiny(load_config(config))
    for key, value in alrp.items():
        setattr(cfg.MODEL.ALRP, key, value)
    return cfg


def tiny_faster_rcnn_cfg(config: str = "Base-aLRP-FasterRCNN.yaml", **alrp) -> CfgNode:
    """aLRP Faster R-CNN on the tiny backbone, with a 64-wide two-FC box head."""
    cfg = make_tiny(load_config(config))
    cfg.MODEL.ROI_BOX_HEAD.FC_DIM = 64
    for key, value in alrp.items():
        setattr(cfg.MODEL.ALRP, key, value)
    return cfg
