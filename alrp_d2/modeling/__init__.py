"""Detectron2 components trained with aLRP Loss; importing registers them."""

from .alrp_cascade_roi_heads import AlrpCascadeROIHeads
from .alrp_fcos import AlrpFCOS, ConfigurableFCOS
from .alrp_foveabox import AlrpFoveaBox
from .alrp_generalized_rcnn import AlrpGeneralizedRCNN
from .alrp_retinanet import AlrpRetinaNet
from .alrp_roi_heads import AlrpFastRCNNOutputLayers, AlrpROIHeads
from .alrp_rpn import AlrpRPN, MinIoULowQualityRPN, with_objectness_prior
from .anchor_generator import OctaveAnchorGenerator
from .atss import AtssMatcher
from .backbone import (
    ConfigurableFPN,
    FrozenStatsBatchNorm2d,
    LastLevelP6P7WithoutReLU,
    build_alrp_resnet_fpn_backbone,
    build_alrp_retinanet_resnet_fpn_backbone,
    build_fcos_resnet_fpn_backbone,
)
from .box_head import XavierUniformFCHead
from .correlation_detectors import CorrelationFoveaBox, CorrelationRetinaNet, WithCorrelationLoss
from .deform_conv import DeformConvWithCpu, ModulatedDeformConvWithCpu
from .foveabox import FoveaBox
from .head_ranking_loss import HeadLoss, HeadRankingLoss, RankingStatistics
from .huggingface_detr import HuggingFaceDETR
from .low_quality_matcher import MinIoULowQualityMatcher
from .rank_sort_atss import LevelScaledRetinaNetHead, RankSortATSS
from .rank_sort_mask_head import RankSortMaskHead

__all__ = [
    "CorrelationFoveaBox",
    "CorrelationRetinaNet",
    "HeadLoss",
    "WithCorrelationLoss",
    "AlrpCascadeROIHeads",
    "AlrpFCOS",
    "AlrpGeneralizedRCNN",
    "AlrpFoveaBox",
    "AlrpFastRCNNOutputLayers",
    "AlrpRetinaNet",
    "AlrpROIHeads",
    "AlrpRPN",
    "AtssMatcher",
    "ConfigurableFCOS",
    "ConfigurableFPN",
    "DeformConvWithCpu",
    "FoveaBox",
    "FrozenStatsBatchNorm2d",
    "HeadRankingLoss",
    "HuggingFaceDETR",
    "LastLevelP6P7WithoutReLU",
    "LevelScaledRetinaNetHead",
    "MinIoULowQualityMatcher",
    "MinIoULowQualityRPN",
    "ModulatedDeformConvWithCpu",
    "OctaveAnchorGenerator",
    "RankSortATSS",
    "RankSortMaskHead",
    "RankingStatistics",
    "XavierUniformFCHead",
    "build_alrp_resnet_fpn_backbone",
    "build_alrp_retinanet_resnet_fpn_backbone",
    "build_fcos_resnet_fpn_backbone",
    "with_objectness_prior",
]
