"""Detectron2 components trained with aLRP Loss; importing registers them."""

from .alrp_retinanet import AlrpRetinaNet
from .alrp_roi_heads import AlrpFastRCNNOutputLayers, AlrpROIHeads
from .alrp_rpn import AlrpRPN
from .atss import AtssMatcher
from .head_loss import DetectionRankingLoss

__all__ = [
    "AlrpFastRCNNOutputLayers",
    "AlrpRetinaNet",
    "AlrpROIHeads",
    "AlrpRPN",
    "AtssMatcher",
    "DetectionRankingLoss",
]
