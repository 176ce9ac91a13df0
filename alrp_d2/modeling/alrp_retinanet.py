"""aLRP RetinaNet: detectron2's RetinaNet trained with aLRP Loss (paper Sec. 5)."""

from __future__ import annotations

from typing import Dict, List

import torch
from detectron2.config import configurable
from detectron2.layers import cat
from detectron2.modeling import META_ARCH_REGISTRY, RetinaNet
from detectron2.structures import Boxes, Instances
from detectron2.utils.events import get_event_storage
from torch import Tensor

from ..config import validate_alrp_config
from .atss import AtssMatcher
from .head_loss import DetectionRankingLoss, build_ranking_loss, class_ranking_labels, dense_loc_errors

__all__ = ["AlrpRetinaNet"]


@META_ARCH_REGISTRY.register()
class AlrpRetinaNet(RetinaNet):
    """RetinaNet (head, anchors, inference of detectron2) whose training loss is one aLRP Loss
    ranking over all anchors x classes of all images of the per-device batch; the positives
    are the (anchor, its GT class) pairs. E_loc is computed on decoded boxes.

    Anchors are labelled by detectron2's IoU ``Matcher`` (MODEL.RETINANET.IOU_THRESHOLDS) or,
    with MODEL.ALRP.MATCHER = "atss", by :class:`AtssMatcher`.
    """

    @configurable
    def __init__(self, *, ranking_loss: DetectionRankingLoss, loc_error_kind: str, tau: float, **kwargs):
        """
        Args:
            ranking_loss: the aLRP (or AP) loss of the head and its localisation weight.
            loc_error_kind: "giou" or "iou" (see :func:`alrp_d2.losses.loc_error`).
            tau: positive-labelling IoU threshold that normalises E_loc.
            kwargs: :class:`detectron2.modeling.RetinaNet` arguments (its focal-loss ones unused).
        """
        super().__init__(**kwargs)
        self.ranking_loss = ranking_loss
        self.loc_error_kind = loc_error_kind
        self.tau = tau

    @classmethod
    def from_config(cls, cfg) -> Dict:
        validate_alrp_config(cfg)
        alrp = cfg.MODEL.ALRP
        ret = super().from_config(cfg)
        if alrp.MATCHER == "atss":
            ret["anchor_matcher"] = AtssMatcher(alrp.ATSS_TOPK)
        ret["ranking_loss"] = build_ranking_loss(cfg, "", alrp.DELTA)
        ret["loc_error_kind"] = alrp.LOC_ERROR
        ret["tau"] = alrp.TAU
        return ret

    @torch.no_grad()
    def label_anchors(self, anchors: List[Boxes], gt_instances: List[Instances]):
        """As :meth:`RetinaNet.label_anchors`; with ATSS the matcher sees the anchors per level."""
        if not isinstance(self.anchor_matcher, AtssMatcher):
            return super().label_anchors(anchors, gt_instances)
        gt_labels, matched_gt_boxes = [], []
        for gt_per_image in gt_instances:
            matched_idxs, anchor_labels = self.anchor_matcher(gt_per_image.gt_boxes, anchors)
            if len(gt_per_image) > 0:
                classes = gt_per_image.gt_classes[matched_idxs]
                gt_labels.append(torch.where(anchor_labels == 1, classes, self.num_classes))
                matched_gt_boxes.append(gt_per_image.gt_boxes.tensor[matched_idxs])
            else:
                gt_labels.append(torch.full_like(matched_idxs, self.num_classes))
                matched_gt_boxes.append(torch.zeros(len(matched_idxs), 4, device=matched_idxs.device))
        return gt_labels, matched_gt_boxes

    def losses(
        self,
        anchors: List[Boxes],
        pred_logits: List[Tensor],
        gt_labels: List[Tensor],
        pred_anchor_deltas: List[Tensor],
        gt_boxes: List[Tensor],
    ) -> Dict[str, Tensor]:
        """aLRP Loss of the batch: ``loss_<name>_cls`` and ``loss_<name>_loc`` (see
        :class:`DetectionRankingLoss`; the name is MODEL.ALRP.CLS_LOSS)."""
        anchor_labels = torch.stack(gt_labels)  # (N, R)
        positive = (anchor_labels >= 0) & (anchor_labels != self.num_classes)
        loc_errors = dense_loc_errors(
            self.box2box_transform, anchors, pred_anchor_deltas, gt_boxes, positive, self.loc_error_kind, self.tau
        )
        get_event_storage().put_scalar("num_pos_anchors", len(loc_errors) / len(anchor_labels))
        labels = class_ranking_labels(anchor_labels, self.num_classes)
        return self.ranking_loss(cat(pred_logits, dim=1).flatten(), labels.flatten(), loc_errors)
