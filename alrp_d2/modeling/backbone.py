"""The backbones registered by the project.

The official aLRP models (paper Sec. 5, official configs) start from torchvision ImageNet ResNets whose
BatchNorm statistics stay frozen while the BatchNorm affine parameters train (mmdetection's
``norm_cfg=dict(type="BN", requires_grad=True), norm_eval=True``).

detectron2 has no such norm: ``"BN"`` updates its statistics in training mode and ``"FrozenBN"`` freezes the
affine parameters too. ``MODEL.RESNETS.NORM "FrozenStatsBN"`` selects :class:`FrozenStatsBatchNorm2d` in the
ResNet built by the backbones registered here; any other norm builds detectron2's ResNet.

The FPN of these backbones follows MODEL.FPN.RELU_BEFORE_P7 and WEIGHT_INIT, whose defaults keep detectron2's FPN
(:func:`configure_fpn`, :class:`ConfigurableFPN` in a LazyConfig; the official network: P7 from P6 without a ReLU,
xavier_uniform convolutions), and their deformable convolutions run on CPUs too (:mod:`alrp_d2.modeling.deform_conv`).
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

from .deform_conv import with_cpu_deform_conv

__all__ = [
    "FPN_KEY_BACKBONES",
    "FPN_WEIGHT_INITS",
    "FROZEN_STATS_BN",
    "FROZEN_STATS_BN_BACKBONES",
    "P7_BACKBONES",
    "FrozenStatsBatchNorm2d",
    "LastLevelP6P7WithoutReLU",
    "ConfigurableFPN",
    "configure_fpn",
    "configure_fpn_from_config",
    "build_alrp_resnet_fpn_backbone",
    "build_alrp_retinanet_resnet_fpn_backbone",
    "build_fcos_resnet_fpn_backbone",
    "build_with_frozen_stats_bn",
]

# Paper recipe: the norm of the official ResNets (BN statistics frozen, affine trained) and the registered backbones
# that build it and read the MODEL.FPN keys below.
FROZEN_STATS_BN = "FrozenStatsBN"
FROZEN_STATS_BN_BACKBONES = (
    "build_alrp_resnet_fpn_backbone",
    "build_alrp_retinanet_resnet_fpn_backbone",
    "build_fcos_resnet_fpn_backbone",
)
# Backbones that read MODEL.FPN.RELU_BEFORE_P7 (those with a P6-P7 top block), and the other MODEL.FPN keys.
P7_BACKBONES = ("build_alrp_retinanet_resnet_fpn_backbone", "build_fcos_resnet_fpn_backbone")
FPN_KEY_BACKBONES = FROZEN_STATS_BN_BACKBONES
# Initialisation of the FPN's convolutions (MODEL.FPN.WEIGHT_INIT): detectron2's c2_xavier_fill or mmdetection's
# xavier_uniform.
FPN_WEIGHT_INITS = ("c2_xavier_fill", "xavier_uniform")


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


class LastLevelP6P7WithoutReLU(LastLevelP6P7):
    """detectron2's ``LastLevelP6P7`` with P7 = conv(P6) instead of conv(ReLU(P6)): mmdetection's FPN with
    ``add_extra_convs`` and ``relu_before_extra_convs=False``, the official RetinaNet, ATSS and FoveaBox."""

    def forward(self, x: Tensor):
        p6 = self.p6(x)
        return [p6, self.p7(p6)]

    @classmethod
    def of(cls, top_block: LastLevelP6P7) -> LastLevelP6P7WithoutReLU:
        """The top block with the convolutions (the same modules) of ``top_block``."""
        new = cls(top_block.p6.in_channels, top_block.p6.out_channels, top_block.in_feature)
        new.p6, new.p7 = top_block.p6, top_block.p7
        return new


def configure_fpn(backbone: FPN, *, relu_before_p7: bool = True, weight_init: str = FPN_WEIGHT_INITS[0]) -> FPN:
    """Applies MODEL.FPN.RELU_BEFORE_P7 (False: :class:`LastLevelP6P7WithoutReLU`) and WEIGHT_INIT ("xavier_uniform":
    every convolution of the FPN, top block included, ``xavier_uniform_`` with bias 0 as mmdetection's
    ``xavier_init(distribution="uniform")``) to a detectron2 FPN, and gives its deformable convolutions a CPU path;
    returns ``backbone``."""
    if weight_init not in FPN_WEIGHT_INITS:
        raise ValueError(f"weight_init must be one of {FPN_WEIGHT_INITS}, got {weight_init!r}")
    if not relu_before_p7 and isinstance(backbone.top_block, LastLevelP6P7):
        backbone.top_block = LastLevelP6P7WithoutReLU.of(backbone.top_block)
    if weight_init == "xavier_uniform":
        for name, module in backbone.named_modules():
            if isinstance(module, nn.Conv2d) and not name.startswith("bottom_up."):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
    with_cpu_deform_conv(backbone.bottom_up)
    return backbone


def configure_fpn_from_config(backbone: FPN, cfg: CfgNode) -> FPN:
    """:func:`configure_fpn` with MODEL.FPN.RELU_BEFORE_P7 and WEIGHT_INIT."""
    return configure_fpn(backbone, relu_before_p7=cfg.MODEL.FPN.RELU_BEFORE_P7, weight_init=cfg.MODEL.FPN.WEIGHT_INIT)


class ConfigurableFPN(FPN):
    """detectron2's FPN with the arguments of :func:`configure_fpn` (the official network in a LazyConfig:
    ``model.backbone._target_ = ConfigurableFPN``); its modules and their names are the FPN's."""

    def __init__(self, *, relu_before_p7: bool = True, weight_init: str = FPN_WEIGHT_INITS[0], **kwargs):
        super().__init__(**kwargs)
        configure_fpn(self, relu_before_p7=relu_before_p7, weight_init=weight_init)


BackboneBuilder = Callable[[CfgNode, ShapeSpec], Backbone]


def build_with_frozen_stats_bn(cfg: CfgNode, input_shape: ShapeSpec, builder: BackboneBuilder) -> Backbone:
    """``builder(cfg, input_shape)`` for a detectron2 ResNet-FPN builder, with the FPN keys of
    :func:`configure_fpn`; with MODEL.RESNETS.NORM "FrozenStatsBN" the ResNet is built with "BN" (the stages
    frozen by MODEL.BACKBONE.FREEZE_AT become FrozenBatchNorm2d, as detectron2 does) and its other BatchNorm2d
    layers become FrozenStatsBatchNorm2d. The FPN keeps MODEL.FPN.NORM."""
    if cfg.MODEL.RESNETS.NORM != FROZEN_STATS_BN:
        return configure_fpn_from_config(builder(cfg, input_shape), cfg)
    bn_cfg = cfg.clone()
    bn_cfg.defrost()
    bn_cfg.MODEL.RESNETS.NORM = "BN"
    backbone = builder(bn_cfg, input_shape)
    FrozenStatsBatchNorm2d.convert(backbone.bottom_up)
    return configure_fpn_from_config(backbone, cfg)


@BACKBONE_REGISTRY.register()
def build_alrp_resnet_fpn_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> Backbone:
    """detectron2's ``build_resnet_fpn_backbone`` (P2-P6, Faster R-CNN) with MODEL.RESNETS.NORM "FrozenStatsBN"
    and the FPN keys of :func:`configure_fpn` available."""
    return build_with_frozen_stats_bn(cfg, input_shape, build_resnet_fpn_backbone)


@BACKBONE_REGISTRY.register()
def build_alrp_retinanet_resnet_fpn_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> Backbone:
    """detectron2's ``build_retinanet_resnet_fpn_backbone`` (P3-P7, P6 from C5) with MODEL.RESNETS.NORM
    "FrozenStatsBN" and the FPN keys of :func:`configure_fpn` available."""
    return build_with_frozen_stats_bn(cfg, input_shape, build_retinanet_resnet_fpn_backbone)


@BACKBONE_REGISTRY.register()
def build_fcos_resnet_fpn_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> Backbone:
    """ResNet-FPN P3-P7 with P6 and P7 computed from P5, as detectron2's FCOS config (Sec. 2.2 of
    Tian et al., TPAMI 2022) and mmdetection's ``add_extra_convs="on_output"`` (RS-ATSS);
    RetinaNet's ``build_retinanet_resnet_fpn_backbone`` uses C5. MODEL.RESNETS.NORM "FrozenStatsBN" and the FPN
    keys of :func:`configure_fpn` available."""
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
