"""The LazyConfigs of configs/ and their yacs twins, shrunk the same way for the tests: ResNet-18 (the configs' norms
kept), a 32-channel FPN and heads, 64-wide box-head layers, 3 classes, random init, on the CPU."""

from __future__ import annotations

import os
from typing import Any

from detectron2.config import LazyConfig
from detectron2.modeling.backbone import ResNet
from omegaconf import DictConfig, ListConfig, OmegaConf

from alrp_d2.config.lazy_fields import lazy_calls

from .tiny_configs import CONFIG_DIR, load_config
from .tiny_detr_detectors import DEFORMABLE_DETR_TWO_STAGE, RT_DETR_V2

# (LazyConfig, its yacs twin), relative to configs/.
TWINS = [
    ("COCO-Detection/alrp_retinanet_R_50_FPN_500_100ep.py", "alrp_R50_500.yaml"),
    ("COCO-Detection/alrp_retinanet_atss_R_50_FPN_500_100ep.py", "alrp_R50_ATSS_500.yaml"),
    ("COCO-Detection/ap_retinanet_R_50_FPN_500_100ep.py", "ap_R50_500.yaml"),
    ("COCO-Detection/alrp_faster_rcnn_R_50_FPN_500_100ep.py", "alrp_faster_rcnn_R50_FPN_500.yaml"),
    ("COCO-Detection/foveabox_alrp_R_50_FPN_500_100ep.py", "foveabox_alrp_R50_500.yaml"),
    ("COCO-Detection/alrp_fcos_R_50_FPN_500_100ep.py", "alrp_fcos_R50_500.yaml"),
    ("COCO-Detection/rs_faster_rcnn_R_50_FPN_1x.py", "rs_faster_rcnn_R50_FPN_1x.yaml"),
    ("COCO-InstanceSegmentation/rs_mask_rcnn_R_50_FPN_1x.py", "rs_mask_rcnn_R50_FPN_1x.yaml"),
    ("COCO-Detection/rs_atss_R_50_FPN_1x.py", "rs_atss_R50_FPN_1x.yaml"),
    ("COCO-Detection/rs_corr_atss_R_50_FPN_1x.py", "rs_corr_atss_R50_FPN_1x.yaml"),
    ("COCO-Detection/corr_retinanet_R_50_FPN_1x.py", "corr_retinanet_R50_FPN_1x.yaml"),
    ("quickstart/alrp_retinanet_shapes.py", "quickstart/alrp_retinanet_shapes.yaml"),
]
NUM_CLASSES = 3


def _tiny_vit(cfg: DictConfig) -> DictConfig:
    """ViTDet's ViT-B as a two-block ViT of width 64 on 128-px images."""
    vit = cfg.model.backbone.net
    vit.update(img_size=128, embed_dim=64, depth=2, num_heads=2, window_size=4, window_block_indexes=[0])
    cfg.model.backbone.square_pad = 128
    return cfg


def _tiny_detr(cfg: DictConfig) -> DictConfig:
    """A DETR recipe's Hugging Face model as the tests' tiny one of its kind (tiny_detr_detectors.py)."""
    tiny = {
        "rt_detr_v2": RT_DETR_V2,
        "d_fine": {**RT_DETR_V2, "model_type": "d_fine"},
        "deformable_detr": DEFORMABLE_DETR_TWO_STAGE,
    }
    cfg.model.hf_config = dict(tiny[cfg.model.hf_config.model_type])
    cfg.model.num_detections = 20
    return cfg


# The LazyConfigs without a yacs twin, with what they need beyond tiny_lazy.
FLAGSHIPS = {
    "new_baselines/rs_mask_rcnn_R_50_FPN_100ep_LSJ.py": lambda cfg: cfg,
    "new_baselines/alrp_mask_rcnn_R_50_FPN_100ep_LSJ.py": lambda cfg: cfg,
    "ViTDet/rs_mask_rcnn_vitdet_b_100ep.py": _tiny_vit,
    "LVISv1-InstanceSegmentation/rs_mask_rcnn_R_50_FPN_1x.py": lambda cfg: cfg,
    "COCO-Detection/rs_cascade_rcnn_R_50_FPN_1x.py": lambda cfg: cfg,
    "quickstart/rs_mask_rcnn_switch_shapes.py": lambda cfg: cfg,
    "quickstart/rtdetr_shapes.py": _tiny_detr,
    "quickstart/deformable_detr_shapes.py": lambda cfg: cfg,  # tiny already
    "quickstart/dfine_shapes.py": _tiny_detr,
    "COCO-Detection/rtdetr_v2_R_50_vd_6x_varifocal.py": _tiny_detr,
    "COCO-Detection/rtdetr_v2_R_50_vd_6x_rank_sort.py": _tiny_detr,
    "COCO-Detection/rtdetr_v2_R_50_vd_6x_alrp.py": _tiny_detr,
    "COCO-Detection/deformable_detr_two_stage_R_50_12ep_focal.py": _tiny_detr,
    "COCO-Detection/deformable_detr_two_stage_R_50_12ep_rank_sort.py": _tiny_detr,
}
# The flagship recipes trained by the model's own loss (the published baselines of the ranking recipes).
OWN_LOSS = {
    "COCO-Detection/rtdetr_v2_R_50_vd_6x_varifocal.py",
    "COCO-Detection/deformable_detr_two_stage_R_50_12ep_focal.py",
}
# The widths of the full configs and the tests': the FPN and its heads, the box head's fully connected layers.
WIDTHS = {256: 32, 1024: 64}


def load_lazy(name: str) -> DictConfig:
    return LazyConfig.load(os.path.join(CONFIG_DIR, name))


def tiny_lazy(cfg: DictConfig) -> DictConfig:
    """``cfg`` with a ResNet-18 and 3 classes (in place; returned)."""
    backbone = cfg.model.get("backbone")  # none in a Hugging Face DETR's
    if backbone is not None and backbone.get("out_channels") == 256:
        _shrink_widths(cfg.model)
    for resnet in lazy_calls(cfg.model, ResNet):
        resnet.stages.depth = 18
        resnet.stages.pop("stride_in_1x1", None)
    top_block = backbone.get("top_block") if backbone is not None else None  # P6 from C5: ResNet-18's 512 channels
    if top_block is not None and top_block.get("in_feature", "res5") == "res5" and "in_channels" in top_block:
        top_block.in_channels = 512
    heads = cfg.model.get("roi_heads")
    (heads if heads is not None else cfg.model).num_classes = NUM_CLASSES
    cfg.train.init_checkpoint = ""
    return cfg


def _narrow(value: Any) -> Any:
    """A width, or a ShapeSpec (a node of the config), narrowed."""
    if isinstance(value, DictConfig) and "channels" in value:
        value.channels = WIDTHS.get(value.channels, value.channels)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return WIDTHS.get(value, value)
    return value


def _shrink_widths(node: Any) -> None:
    """Every width of :data:`WIDTHS` outside the bottom-up network: channels, head convolutions, fully connected
    layers and the input shapes of the heads."""
    if isinstance(node, ListConfig):
        for item in node:
            _shrink_widths(item)
    if not isinstance(node, DictConfig):
        return
    for key in list(node.keys()):
        if key == "bottom_up" or OmegaConf.is_interpolation(node, key):
            continue
        value = node[key]
        if key in ("in_channels", "out_channels", "input_shape"):
            node[key] = [_narrow(v) for v in value] if isinstance(value, ListConfig) else _narrow(value)
        elif key in ("conv_dims", "fc_dims"):
            node[key] = [_narrow(v) for v in value]
        else:
            _shrink_widths(value)


def tiny_yacs(name: str):
    """The yacs config ``name`` with a ResNet-18 and 3 classes."""
    cfg = load_config(name)
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.RESNETS.DEPTH = 18
    cfg.MODEL.RESNETS.RES2_OUT_CHANNELS = 64
    if cfg.MODEL.FPN.OUT_CHANNELS == 256:
        cfg.MODEL.FPN.OUT_CHANNELS = WIDTHS[256]
        cfg.MODEL.ROI_MASK_HEAD.CONV_DIM = WIDTHS[256]
        cfg.MODEL.ROI_BOX_HEAD.FC_DIM = WIDTHS[1024]
    for node in (cfg.MODEL.RETINANET, cfg.MODEL.ROI_HEADS, cfg.MODEL.FOVEABOX, cfg.MODEL.FCOS):
        node.NUM_CLASSES = NUM_CLASSES
    return cfg
