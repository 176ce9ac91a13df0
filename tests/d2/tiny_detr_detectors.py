"""Tiny Hugging Face DETRs as :class:`~alrp_d2.modeling.HuggingFaceDETR` arguments (random init, nothing downloaded),
and the yacs config of the LazyConfig quickstart's model (for ``DefaultPredictor``)."""

from __future__ import annotations

from typing import Any, Dict

from detectron2.config import CfgNode, LazyConfig, get_cfg

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
