"""Detectron2 components trained with aLRP Loss; importing registers them."""

from .alrp_fcos import AlrpFCOS, ConfigurableFCOS
from .alrp_foveabox import AlrpFoveaBox
from .alrp_retinanet import AlrpRetinaNet
from .alrp_roi_heads import AlrpFastRCNNOutputLayers, AlrpROIHeads
from .alrp_rpn import AlrpRPN
from .atss import AtssMatcher
from .backbone import (
    FrozenStatsBatchNorm2d,
    build_alrp_resnet_fpn_backbone,
    build_alrp_retinanet_resnet_fpn_backbone,
    build_fcos_resnet_fpn_backbone,
)
from .foveabox import FoveaBox
from .rank_sort_atss import LevelScaledRetinaNetHead, RankSortATSS
from .rank_sort_mask_head import RankSortMaskHead
from .ranking_loss import HeadRankingLoss, PositiveTargets, RankingStatistics, RankSortTargets

__all__ = [
    "AlrpFCOS",
    "AlrpFoveaBox",
    "AlrpFastRCNNOutputLayers",
    "AlrpRetinaNet",
    "AlrpROIHeads",
    "AlrpRPN",
    "AtssMatcher",
    "ConfigurableFCOS",
    "FoveaBox",
    "FrozenStatsBatchNorm2d",
    "HeadRankingLoss",
    "LevelScaledRetinaNetHead",
    "PositiveTargets",
    "RankSortATSS",
    "RankSortMaskHead",
    "RankSortTargets",
    "RankingStatistics",
    "build_alrp_resnet_fpn_backbone",
    "build_alrp_retinanet_resnet_fpn_backbone",
    "build_fcos_resnet_fpn_backbone",
]
