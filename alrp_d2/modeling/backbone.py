"""The backbones registered by the project.

The official aLRP models (paper Sec. 5, official configs) start from torchvision ImageNet ResNets whose
BatchNorm statistics stay frozen while the BatchNorm affine parameters train (mmdetection's
``norm_cfg=dict(type="BN", requires_grad=True), norm_eval=True``).

detectron2 has no such norm: ``"BN"`` updates its statistics in training mode and ``"FrozenBN"`` freezes the
affine parameters too. ``MODEL.RESNETS.NORM "FrozenStatsBN"`` selects :class:`FrozenStatsBatchNorm2d` in the
ResNet built by the backbones registered here; any other norm builds detectron2's backbone unchanged.
FCOS's backbone computes P6 and P7 from P5.
"""

from __future__ import annotations

from typing import Callable

from detectron2.config import CfgNode
from detectron2.layers import ShapeSpec
from detectron2.modeling import BACKBONE_REGISTRY, Backbone
from detectron2.modeling.backbone import FPN, build_resnet_backbone
from detectron2.modeling.backbone.fpn import (
    LastLevelP6P7,
    build_resnet_fpn_backbone,
    build_retinanet_resnet_fpn_backbone,
)
from torch import Tensor, nn
from torch.nn import functional as F

from ..config import FROZEN_STATS_BN

__all__ = [
    "FrozenStatsBatchNorm2d",
    "build_alrp_resnet_fpn_backbone",
    "build_alrp_retinanet_resnet_fpn_backbone",
    "build_fcos_resnet_fpn_backbone",
    "build_with_frozen_stats_bn",
]


class FrozenStatsBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d that always normalises with its running statistics and never updates them, in training mode
    too, while its weight and bias train: the output is that of an ``nn.BatchNorm2d`` in eval mode."""

    def forward(self, x: Tensor) -> Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)

    @classmethod
    def convert(cls, module: nn.Module) -> nn.Module:
        """Replaces every ``nn.BatchNorm2d`` in ``module`` (not FrozenBatchNorm2d or SyncBatchNorm) by a
        FrozenStatsBatchNorm2d with the same parameters and statistics; returns ``module``, or the new layer
        when ``module`` is itself a BatchNorm2d."""
        if type(module) is nn.BatchNorm2d:
            if not module.track_running_stats:
                raise ValueError("FrozenStatsBatchNorm2d needs a BatchNorm2d with running statistics")
            frozen = cls(module.num_features, module.eps, module.momentum, module.affine)
            frozen.load_state_dict(module.state_dict())
            return frozen
        for name, child in module.named_children():
            new_child = cls.convert(child)
            if new_child is not child:
                module.add_module(name, new_child)
        return module


BackboneBuilder = Callable[[CfgNode, ShapeSpec], Backbone]


def build_with_frozen_stats_bn(cfg: CfgNode, input_shape: ShapeSpec, builder: BackboneBuilder) -> Backbone:
    """``builder(cfg, input_shape)`` for a detectron2 ResNet-FPN builder; with MODEL.RESNETS.NORM
    "FrozenStatsBN" the ResNet is built with "BN" (the stages frozen by MODEL.BACKBONE.FREEZE_AT become
    FrozenBatchNorm2d, as detectron2 does) and its other BatchNorm2d layers become FrozenStatsBatchNorm2d.
    The FPN keeps MODEL.FPN.NORM."""
    if cfg.MODEL.RESNETS.NORM != FROZEN_STATS_BN:
        return builder(cfg, input_shape)
    bn_cfg = cfg.clone()
    bn_cfg.defrost()
    bn_cfg.MODEL.RESNETS.NORM = "BN"
    backbone = builder(bn_cfg, input_shape)
    FrozenStatsBatchNorm2d.convert(backbone.bottom_up)
    return backbone


@BACKBONE_REGISTRY.register()
def build_alrp_resnet_fpn_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> Backbone:
    """detectron2's ``build_resnet_fpn_backbone`` (P2-P6, Faster R-CNN) with MODEL.RESNETS.NORM "FrozenStatsBN"
    available."""
    return build_with_frozen_stats_bn(cfg, input_shape, build_resnet_fpn_backbone)


@BACKBONE_REGISTRY.register()
def build_alrp_retinanet_resnet_fpn_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> Backbone:
    """detectron2's ``build_retinanet_resnet_fpn_backbone`` (P3-P7, P6 from C5) with MODEL.RESNETS.NORM
    "FrozenStatsBN" available."""
    return build_with_frozen_stats_bn(cfg, input_shape, build_retinanet_resnet_fpn_backbone)


@BACKBONE_REGISTRY.register()
def build_fcos_resnet_fpn_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> Backbone:
    """ResNet-FPN P3-P7 with P6 and P7 computed from P5, as detectron2's FCOS config (Sec. 2.2 of
    Tian et al., TPAMI 2022) and mmdetection's ``add_extra_convs="on_output"`` (RS-ATSS);
    RetinaNet's ``build_retinanet_resnet_fpn_backbone`` uses C5. MODEL.RESNETS.NORM "FrozenStatsBN" available."""
    return build_with_frozen_stats_bn(cfg, input_shape, _p6p7_from_p5_resnet_fpn)


def _p6p7_from_p5_resnet_fpn(cfg: CfgNode, input_shape: ShapeSpec) -> FPN:
    out_channels = cfg.MODEL.FPN.OUT_CHANNELS
    return FPN(
        bottom_up=build_resnet_backbone(cfg, input_shape),
        in_features=cfg.MODEL.FPN.IN_FEATURES,
        out_channels=out_channels,
        norm=cfg.MODEL.FPN.NORM,
        top_block=LastLevelP6P7(out_channels, out_channels, in_feature="p5"),
        fuse_type=cfg.MODEL.FPN.FUSE_TYPE,
    )
