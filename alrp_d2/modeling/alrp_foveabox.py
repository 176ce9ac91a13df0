"""aLRP FoveaBox: FoveaBox trained with aLRP Loss (paper Sec. 5.4, App. G), or with AP Loss +
Smooth L1 (the paper's AP Loss row)."""

from __future__ import annotations

from typing import Dict

from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY
from torch import Tensor

from ..config import AP_LOC_LOSSES, require_config
from .dense_head import DensePositives, DenseRankingDetector
from .foveabox import FoveaBox

__all__ = ["AlrpFoveaBox"]


@META_ARCH_REGISTRY.register()
class AlrpFoveaBox(DenseRankingDetector, FoveaBox):
    """FoveaBox (head, assignment, inference) whose loss is one ranking over all (location,
    class) pairs of all images of the per-device batch (:class:`~alrp_d2.modeling.HeadRankingLoss`
    named "fovea": ``loss_fovea_cls`` and ``loss_fovea_loc``); the positives are the (fovea cell,
    its object's class) pairs.

    With MODEL.ALRP.CLS_LOSS "alrp", E_loc is the GIoU error of the decoded boxes (App. E line
    12; MODEL.ALRP.LOC_ERROR and TAU, whose paper values "giou" and 0.5 give 1 - GIoU, as the
    official head), against the ground-truth box or, with MODEL.FOVEABOX.ALRP_LOC_TARGET
    "decoded_target" (the official head), against the box decoded from the target distances clamped to
    [1/16, 16] base edges. With an AP loss, the localisation loss is MODEL.FOVEABOX.AP_LOC_LOSS:
    "smooth_l1" (beta MODEL.FOVEABOX.SMOOTH_L1_BETA, mean over the encoded distances, as the
    official AP Loss FoveaBox) or "giou".
    """

    ranking_loss_name = "fovea"

    @configurable
    def __init__(self, *, ap_loc_loss: str, loc_target: str = "gt_box", **kwargs):
        """
        Args:
            ap_loc_loss: localisation loss with an AP loss, "smooth_l1" or "giou".
            loc_target: E_loc's target, "gt_box" or "decoded_target".
            kwargs: :class:`DenseRankingDetector` and :class:`FoveaBox` arguments.
        """
        super().__init__(**kwargs)
        self.ap_loc_loss = ap_loc_loss
        self.loc_target = loc_target

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        ap_loc_loss = cfg.MODEL.FOVEABOX.AP_LOC_LOSS
        require_config(
            ap_loc_loss in AP_LOC_LOSSES, "MODEL.FOVEABOX.AP_LOC_LOSS", ap_loc_loss, f"one of {AP_LOC_LOSSES}"
        )
        ret["ap_loc_loss"] = ap_loc_loss
        ret["loc_target"] = cfg.MODEL.FOVEABOX.ALRP_LOC_TARGET
        return ret

    def positive_loc_errors(self, positives: DensePositives) -> Tensor:
        """E_loc of the decoded boxes against the ground truths or their clamped targets' boxes; with an AP
        loss and "smooth_l1", the Smooth L1 of each positive's encoded distances, averaged over the four."""
        if self.ranking_loss.cls_loss != "alrp" and self.ap_loc_loss == "smooth_l1":
            return positives.smooth_l1(self.box2box_transform, self.smooth_l1_beta)
        if self.loc_target == "gt_box":
            return super().positive_loc_errors(positives)
        pred_boxes = self.box2box_transform.apply_deltas(positives.pred_deltas, positives.anchors)
        target_boxes = self.box2box_transform.target_boxes(positives.anchors, positives.gt_boxes)
        return self.ranking_loss.loc_errors(pred_boxes, target_boxes)
