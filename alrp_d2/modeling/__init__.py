"""Detectron2 components trained with aLRP Loss; importing registers them."""
from .alrp_retinanet import AlrpRetinaNet
from .alrp_roi_heads import AlrpFastRCNNOutputLayers, AlrpROIHeads
from .alrp_rpn import AlrpRPN
from .atss import AtssMatcher
from .ranking_loss import (
    DetectionRankingLoss,
    LocalisationWeight,
    build_ranking_loss,
    class_ranking_labels,
    find_localisation_weights,
)

__all__ = [
    "AlrpFastRCNNOutputLayers",
    "AlrpRetinaNet",
    "AlrpROIHeads",
    "AlrpRPN",
    "AtssMatcher",
    "DetectionRankingLoss",
    "LocalisationWeight",
    "build_ranking_loss",
    "class_ranking_labels",
    "find_localisation_weights",
]
