"""Tiny detectron2 configs and batches for the integration tests (CPU, random init, seconds per step)."""

import os
from typing import Dict, List

import torch
from detectron2.config import CfgNode
from detectron2.structures import BitMasks, Boxes, Instances

from alrp_d2.config import setup_cfg
from alrp_d2.engine import find_ranking_losses

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")


def load_config(name: str) -> CfgNode:
    return setup_cfg(os.path.join(CONFIG_DIR, name))


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


def tiny_rank_sort_cfg(config: str = "rs_faster_rcnn_R50_FPN_1x.yaml", **alrp) -> CfgNode:
    """A Rank & Sort detector's config on the tiny backbone: 64-wide box head, 16-channel mask head,
    no GroupNorm in the FPN and RS-ATSS's head (GroupNorm(32) needs more than 16 channels)."""
    cfg = make_tiny(load_config(config))
    cfg.MODEL.ROI_BOX_HEAD.FC_DIM = 64
    cfg.MODEL.ROI_MASK_HEAD.CONV_DIM = 16
    cfg.MODEL.RETINANET.NORM = cfg.MODEL.FPN.NORM = ""
    for key, value in alrp.items():
        setattr(cfg.MODEL.ALRP, key, value)
    return cfg


def with_masks(batch: List[Dict]) -> List[Dict]:
    """``batch`` with instance masks (BitMasks): each box without its top-right triangle."""
    for image in batch:
        objects = image["instances"]
        height, width = objects.image_size
        ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        masks = []
        for x1, y1, x2, y2 in objects.gt_boxes.tensor.tolist():
            inside = (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
            masks.append(inside & ((xs - x1) / (x2 - x1) <= 1.2 * (ys - y1) / (y2 - y1) + 0.3))
        objects.gt_masks = BitMasks(torch.stack(masks) if masks else torch.zeros(0, height, width, dtype=torch.bool))
    return batch


def instances(boxes, classes, size=(96, 128)) -> Instances:
    result = Instances(size)
    result.gt_boxes = Boxes(torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4))
    result.gt_classes = torch.tensor(classes, dtype=torch.int64)
    return result


def tiny_batch(with_objects: bool = True) -> List[Dict]:
    """Two 96 x 128 noise images: two objects in the first (or none), none in the second."""
    gen = torch.Generator().manual_seed(0)
    objects = instances([[10, 10, 50, 60], [60, 20, 120, 90]], [0, 2]) if with_objects else instances([], [])
    return [
        {"image": torch.rand(3, 96, 128, generator=gen) * 255, "instances": objects},
        {"image": torch.rand(3, 96, 128, generator=gen) * 255, "instances": instances([], [])},
    ]


def ranking_statistics(model) -> Dict[str, Dict[str, float]]:
    """The unweighted ``cls`` and ``loc`` components, the gradient ``ratio`` and the further components
    (Rank & Sort Loss: ``rank``, ``sort``, ``weight``, ...) of every head's ranking loss in the last
    forward (what SelfBalanceHook logs as sb/<name>/cls, sb/<name>/loc, <name>/grad_ratio and
    sb/<name>/<component> on one worker)."""
    result = {}
    for name, loss in find_ranking_losses(model).items():
        statistics = loss.take_statistics()
        if statistics is not None:
            positive, negative = (
                float(statistics.positive_gradient_magnitude),
                float(statistics.negative_gradient_magnitude),
            )
            result[name] = {key: float(value) for key, value in statistics.values.items()}
            result[name]["ratio"] = negative / positive if positive else None
    return result
