"""aLRP FoveaBox: FoveaBox trained with aLRP Loss (paper Sec. 5.4, App. G), or with AP Loss +
Smooth L1 (the paper's AP Loss row)."""

from __future__ import annotations

from typing import Dict, List

import torch
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY
from detectron2.structures import Boxes
from fvcore.nn import smooth_l1_loss
from torch import Tensor

from ..config import require_config
from .dense_head import DensePositives, dense_ranking_losses
from .foveabox import FoveaBox
from .ranking_loss import HeadRankingLoss, PositiveTargets

__all__ = ["AlrpFoveaBox"]

AP_LOC_LOSSES = ("smooth_l1", "giou")


@META_ARCH_REGISTRY.register()
class AlrpFoveaBox(FoveaBox):
    """FoveaBox (head, assignment, inference) whose loss is one ranking over all (location,
    class) pairs of all images of the per-device batch (:class:`HeadRankingLoss` named
    "fovea"); the positives are the (fovea cell, its object's class) pairs.

    With MODEL.ALRP.CLS_LOSS "alrp", E_loc is the GIoU error of the decoded boxes (App. E line
    12). With an AP loss, the localisation loss is MODEL.FOVEABOX.AP_LOC_LOSS: "smooth_l1" (beta
    MODEL.FOVEABOX.SMOOTH_L1_BETA, mean over the encoded distances, as the official AP Loss
    FoveaBox) or "giou".
    """

    @configurable
    def __init__(self, *, ranking_loss: HeadRankingLoss, ap_loc_loss: str, **kwargs):
        """
        Args:
            ranking_loss: the head's aLRP (or AP) loss (E_loc from MODEL.ALRP.LOC_ERROR and TAU;
                the paper configs' "giou" and 0.5 give 1 - GIoU, as the official head).
            ap_loc_loss: localisation loss with an AP loss, "smooth_l1" or "giou".
            kwargs: :class:`FoveaBox` arguments (its focal-loss ones unused).
        """
        super().__init__(**kwargs)
        self.ranking_loss = ranking_loss
        self.ap_loc_loss = ap_loc_loss

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        ap_loc_loss = cfg.MODEL.FOVEABOX.AP_LOC_LOSS
        require_config(
            ap_loc_loss in AP_LOC_LOSSES, "MODEL.FOVEABOX.AP_LOC_LOSS", ap_loc_loss, f"one of {AP_LOC_LOSSES}"
        )
        alrp = cfg.MODEL.ALRP
        ret["ranking_loss"] = HeadRankingLoss.from_config(cfg, "fovea", delta=alrp.DELTA, tau=alrp.TAU)
        ret["ap_loc_loss"] = ap_loc_loss
        return ret

    def losses(
        self,
        anchors: List[Boxes],
        pred_logits: List[Tensor],
        gt_labels: List[Tensor],
        pred_anchor_deltas: List[Tensor],
        gt_boxes: List[Tensor],
    ) -> Dict[str, Tensor]:
        """``loss_fovea_cls`` and ``loss_fovea_loc`` of the batch (see :class:`HeadRankingLoss`)."""
        smooth_l1 = self.ranking_loss.cls_loss != "alrp" and self.ap_loc_loss == "smooth_l1"
        return dense_ranking_losses(
            self.ranking_loss,
            self.box2box_transform,
            PositiveTargets.of_labels(torch.stack(gt_labels), self.num_classes),
            anchors,
            pred_logits,
            pred_anchor_deltas,
            gt_boxes,
            loc_errors_of=self._smooth_l1_errors if smooth_l1 else None,
        )

    def _smooth_l1_errors(self, positives: DensePositives) -> Tensor:
        """Smooth L1 of each positive's encoded distances, averaged over the four."""
        target_deltas = self.box2box_transform.get_deltas(positives.anchors, positives.gt_boxes)
        return smooth_l1_loss(positives.pred_deltas, target_deltas, self.smooth_l1_beta).mean(dim=1)
