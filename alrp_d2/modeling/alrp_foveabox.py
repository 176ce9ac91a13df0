"""aLRP FoveaBox: FoveaBox trained with aLRP Loss (paper Sec. 5.4, App. G), or with AP Loss +
Smooth L1 (the paper's AP Loss row)."""

from __future__ import annotations

from typing import Dict

from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY
from fvcore.nn import smooth_l1_loss
from torch import Tensor

from ..config import require_config
from .dense_head import DensePositives, DenseRankingDetector
from .foveabox import FoveaBox

__all__ = ["AlrpFoveaBox"]

AP_LOC_LOSSES = ("smooth_l1", "giou")


@META_ARCH_REGISTRY.register()
class AlrpFoveaBox(DenseRankingDetector, FoveaBox):
    """FoveaBox (head, assignment, inference) whose loss is one ranking over all (location,
    class) pairs of all images of the per-device batch (:class:`~alrp_d2.modeling.HeadRankingLoss`
    named "fovea": ``loss_fovea_cls`` and ``loss_fovea_loc``); the positives are the (fovea cell,
    its object's class) pairs.

    With MODEL.ALRP.CLS_LOSS "alrp", E_loc is the GIoU error of the decoded boxes (App. E line
    12; MODEL.ALRP.LOC_ERROR and TAU, whose paper values "giou" and 0.5 give 1 - GIoU, as the
    official head). With an AP loss, the localisation loss is MODEL.FOVEABOX.AP_LOC_LOSS:
    "smooth_l1" (beta MODEL.FOVEABOX.SMOOTH_L1_BETA, mean over the encoded distances, as the
    official AP Loss FoveaBox) or "giou".
    """

    ranking_loss_name = "fovea"

    @configurable
    def __init__(self, *, ap_loc_loss: str, **kwargs):
        """
        Args:
            ap_loc_loss: localisation loss with an AP loss, "smooth_l1" or "giou".
            kwargs: :class:`DenseRankingDetector` and :class:`FoveaBox` arguments.
        """
        super().__init__(**kwargs)
        self.ap_loc_loss = ap_loc_loss

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        ap_loc_loss = cfg.MODEL.FOVEABOX.AP_LOC_LOSS
        require_config(
            ap_loc_loss in AP_LOC_LOSSES, "MODEL.FOVEABOX.AP_LOC_LOSS", ap_loc_loss, f"one of {AP_LOC_LOSSES}"
        )
        ret["ap_loc_loss"] = ap_loc_loss
        return ret

    def positive_loc_errors(self, positives: DensePositives) -> Tensor:
        """E_loc of the decoded boxes; with an AP loss and "smooth_l1", the Smooth L1 of each
        positive's encoded distances, averaged over the four."""
        if self.ranking_loss.cls_loss == "alrp" or self.ap_loc_loss != "smooth_l1":
            return super().positive_loc_errors(positives)
        target_deltas = self.box2box_transform.get_deltas(positives.anchors, positives.gt_boxes)
        return smooth_l1_loss(positives.pred_deltas, target_deltas, self.smooth_l1_beta).mean(dim=1)
