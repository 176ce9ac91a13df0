"""Tiny Hugging Face DETRs as :class:`~alrp_d2.modeling.HuggingFaceDETR` arguments (random init, nothing downloaded),
the yacs config of the LazyConfig quickstart's model (for ``DefaultPredictor``), and a batch of two images."""

from __future__ import annotations

from typing import Any, Dict

import torch
from detectron2.config import CfgNode, LazyConfig, get_cfg
from detectron2.structures import Boxes, Instances

from alrp_d2.config import add_alrp_config
from alrp_d2.modeling.huggingface_detr import plain

from ..tiny_detr_sizes import BACKBONE, DEFORMABLE_DETR_SIZES, RT_DETR_SIZES
from .lazy_runs import REPO_ROOT

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "rtdetr_shapes.py")
RT_DETR_V2: Dict[str, Any] = {
    "model_type": "rt_detr_v2",
    "backbone_config": {"model_type": "rt_detr_resnet", **BACKBONE},
    "freeze_backbone_batch_norms": False,
    **RT_DETR_SIZES,
}
DEFORMABLE_DETR_TWO_STAGE: Dict[str, Any] = {
    "model_type": "deformable_detr",
    "backbone_config": {"model_type": "resnet", **BACKBONE},
    "use_timm_backbone": False,
    "use_pretrained_backbone": False,
    **DEFORMABLE_DETR_SIZES,
    "two_stage": True,
    "with_box_refine": True,
}


def quickstart_yacs_config(weights: str) -> CfgNode:
    """The yacs config of the quickstart's model (``MODEL.DETR`` from its LazyConfig arguments) with ``weights``, on
    the CPU, testing at the quickstart's 128 px."""
    model = LazyConfig.load(QUICKSTART).model
    cfg = get_cfg()
    add_alrp_config(cfg)
    cfg.MODEL.META_ARCHITECTURE = "HuggingFaceDETR"
    cfg.MODEL.DETR.HF_CONFIG = CfgNode(plain(model.hf_config))
    cfg.MODEL.DETR.NUM_CLASSES = model.num_classes
    cfg.MODEL.DETR.NUM_DETECTIONS = model.num_detections
    cfg.MODEL.PIXEL_MEAN = list(model.pixel_mean)
    cfg.MODEL.PIXEL_STD = list(model.pixel_std)
    cfg.INPUT.FORMAT = model.input_format
    cfg.INPUT.MIN_SIZE_TEST = 128
    cfg.INPUT.MAX_SIZE_TEST = 128
    cfg.MODEL.WEIGHTS = weights
    cfg.MODEL.DEVICE = "cpu"
    return cfg


def objects(size, boxes, classes) -> Instances:
    result = Instances(size)
    result.gt_boxes = Boxes(torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4))
    result.gt_classes = torch.tensor(classes, dtype=torch.int64)
    return result


def two_sizes():
    """A 64 x 96 image with two objects and a 96 x 64 one without."""
    generator = torch.Generator().manual_seed(0)
    first = objects((64, 96), [[8, 16, 40, 48], [48, 8, 96, 32]], [0, 2])
    return [
        {"image": torch.rand(3, 64, 96, generator=generator) * 255, "instances": first},
        {"image": torch.rand(3, 96, 64, generator=generator) * 255, "instances": objects((96, 64), [], [])},
    ]
