"""aLRP FoveaBox: FoveaBox trained with aLRP Loss (paper Sec. 5.4, App. G), or with AP Loss +
Smooth L1 (the paper's AP Loss row)."""

from __future__ import annotations

from typing import Dict, List

from detectron2.config import configurable
from detectron2.layers import cat, nonzero_tuple
from detectron2.modeling import META_ARCH_REGISTRY
from detectron2.structures import Boxes
from detectron2.utils.events import get_event_storage
from fvcore.nn import smooth_l1_loss
from torch import Tensor

from ..config import require_config
from ..losses import loc_error
from .foveabox import FoveaBox
from .head_loss import RankingLossDetector, Tensors, class_ranking_labels

__all__ = ["AlrpFoveaBox"]

AP_LOC_LOSSES = ("smooth_l1", "giou")


@META_ARCH_REGISTRY.register()
class AlrpFoveaBox(RankingLossDetector, FoveaBox):
    """FoveaBox (head, assignment, inference) whose loss is one ranking over all (location,
    class) pairs of all images of the per-device batch; the positives are the (fovea cell, its
    object's class) pairs.

    With MODEL.ALRP.CLS_LOSS "alrp", E_loc is the GIoU error of the decoded boxes (App. E line
    12) and the localisation weight is self-balanced under the name "fovea_alrp". With an AP
    loss, the localisation loss is MODEL.FOVEABOX.AP_LOC_LOSS: "smooth_l1" (beta
    MODEL.FOVEABOX.SMOOTH_L1_BETA, mean over the encoded distances, as the official AP Loss
    FoveaBox) or "giou".
    """

    ranking_loss_name = "fovea"

    @configurable
    def __init__(self, *, ap_loc_loss: str, **kwargs):
        """
        Args:
            ap_loc_loss: localisation loss with an AP loss, "smooth_l1" or "giou".
            kwargs: :class:`RankingLossDetector` and :class:`FoveaBox` arguments (E_loc from
                MODEL.ALRP.LOC_ERROR and TAU; the paper configs' "giou" and 0.5 give 1 - GIoU, as the
                official head).
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

    def losses(
        self, anchors: List[Boxes], pred_logits: Tensors, gt_labels: Tensor, pred_deltas: Tensors, gt_boxes: Tensor
    ) -> Dict[str, Tensor]:
        """``loss_fovea_<cls loss>_cls`` and ``_loc`` of the batch (see :class:`DetectionRankingLoss`)."""
        positive = gt_labels != self.num_classes
        image_index, location_index = nonzero_tuple(positive)
        anchor_boxes = Boxes.cat(anchors).tensor[location_index]
        deltas = cat(pred_deltas, dim=1)[image_index, location_index]
        targets = gt_boxes[image_index, location_index]
        if self.ranking_loss.cls_loss != "alrp" and self.ap_loc_loss == "smooth_l1":
            target_deltas = self.box2box_transform.get_deltas(anchor_boxes, targets)
            loc_errors = smooth_l1_loss(deltas, target_deltas, self.smooth_l1_beta).mean(dim=1)
        else:
            pred_boxes = self.box2box_transform.apply_deltas(deltas, anchor_boxes)
            loc_errors = loc_error(pred_boxes, targets, self.loc_error_kind, self.tau)
        get_event_storage().put_scalar("num_pos_anchors", len(loc_errors) / len(gt_labels))
        labels = class_ranking_labels(gt_labels, self.num_classes)
        return self.ranking_loss(cat(pred_logits, dim=1).flatten(), labels.flatten(), loc_errors)
