"""A detectron2 dense detector trained by one ranking over all (anchor, class) pairs of the batch."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import cat
from detectron2.structures import Boxes
from detectron2.utils.events import get_event_storage
from torch import Tensor

from ..criteria.targets import RowLabels
from .dense_boxes import DenseBoxes
from .head_ranking_loss import HeadLoss, HeadRankingLoss

__all__ = ["DenseRankingDetector", "dense_ranking_loss"]


def dense_ranking_loss(
    ranking_loss: HeadRankingLoss,
    gt_labels: List[Tensor],
    num_classes: Optional[int],
    pred_logits: List[Tensor],
    boxes: DenseBoxes,
    num_positives_key: str = "num_pos_anchors",
) -> HeadLoss:
    """The ranking loss of a dense head over all (anchor, class) pairs of the batch, from its per-image (R,) anchor
    labels (classes, or the RPN's 1 / 0 / -1 with ``num_classes`` None), its per-level (N, R_level, K) logits, or
    (N, R_level) for the RPN's objectness, and its boxes; the number of positives per image is logged under
    ``num_positives_key``."""
    labels = torch.stack(gt_labels)
    logits = cat(pred_logits, dim=1).reshape(labels.numel(), -1)
    loss = ranking_loss(logits, RowLabels(labels, num_classes), boxes)
    get_event_storage().put_scalar(num_positives_key, len(loss.positives.row) / len(gt_labels))
    return loss


class DenseRankingDetector:
    """Mixin of a detectron2 dense detector (RetinaNet, FCOS, FoveaBox) trained by one :class:`HeadRankingLoss`
    over all (anchor, class) pairs of the batch, named ``ranking_loss_name``: its constructor argument
    ``ranking_loss`` (from MODEL.ALRP) and its ``losses``. Mixed in before detectron2's class: ``class
    AlrpRetinaNet(DenseRankingDetector, RetinaNet)``. A subclass changes the boxes its criterion reads
    (the localisation targets of FoveaBox) by overriding :meth:`dense_boxes`."""

    ranking_loss_name = ""
    ranking_loss: HeadRankingLoss
    box2box_transform: Any
    num_classes: int
    #: beta of the Smooth L1 of an AP criterion with MODEL.ALRP.AP_LOC_LOSS "smooth_l1" (RetinaNet and FoveaBox set
    #: their own).
    smooth_l1_beta = 0.0

    @configurable
    def __init__(self, *, ranking_loss: HeadRankingLoss, **kwargs):
        """
        Args:
            ranking_loss: the head's ranking loss.
            kwargs: the detector's arguments (its focal-loss ones unused).
        """
        super().__init__(**kwargs)
        self.ranking_loss = ranking_loss

    @classmethod
    def from_config(cls, cfg: CfgNode) -> Dict[str, Any]:
        ret = super().from_config(cfg)  # type: ignore[misc]
        ret["ranking_loss"] = HeadRankingLoss.from_config(cfg, cls.ranking_loss_name)
        return ret

    def losses(self, *inputs: Any) -> Dict[str, Tensor]:
        """``loss_<name>_cls``, ``loss_<name>_loc`` and the additive terms (see :class:`HeadRankingLoss`) from the
        inputs of :meth:`ranking_losses`."""
        return self.ranking_losses(*inputs).losses

    def ranking_losses(
        self,
        anchors: List[Boxes],
        pred_logits: List[Tensor],
        gt_labels: List[Tensor],
        pred_anchor_deltas: List[Tensor],
        gt_boxes: List[Tensor],
    ) -> HeadLoss:
        """:meth:`losses` with the positives of the localisation loss; arguments as
        :meth:`detectron2.modeling.RetinaNet.losses`."""
        boxes = self.dense_boxes(anchors, pred_anchor_deltas, gt_boxes)
        return dense_ranking_loss(self.ranking_loss, gt_labels, self.num_classes, pred_logits, boxes)

    def dense_boxes(self, anchors: List[Boxes], pred_anchor_deltas: List[Tensor], gt_boxes: List[Tensor]) -> DenseBoxes:
        """The boxes of the batch's rows, decoded by the detector's box coding."""
        return DenseBoxes(self.box2box_transform, anchors, pred_anchor_deltas, gt_boxes, self.smooth_l1_beta)
