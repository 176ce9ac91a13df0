"""aLRP RetinaNet: detectron2's RetinaNet trained with aLRP Loss (paper Sec. 5)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY, RetinaNet
from detectron2.structures import Boxes, Instances
from torch import Tensor

from .atss import AtssMatcher, pad_per_image
from .head_loss import RankingLossDetector, dense_ranking_losses
from .official_inference import OfficialOrderInference

__all__ = ["AlrpRetinaNet"]


@META_ARCH_REGISTRY.register()
class AlrpRetinaNet(OfficialOrderInference, RankingLossDetector, RetinaNet):
    """RetinaNet (head, anchors, inference of detectron2) whose training loss is one aLRP Loss
    ranking over all anchors x classes of all images of the per-device batch; the positives
    are the (anchor, its GT class) pairs. E_loc is computed on decoded boxes.

    Anchors are labelled by detectron2's IoU ``Matcher`` (MODEL.RETINANET.IOU_THRESHOLDS) or,
    with MODEL.ALRP.MATCHER = "atss", by :class:`AtssMatcher`. With MODEL.ALRP.OFFICIAL_INFERENCE
    the detections are selected in the order of the official test (see
    :class:`OfficialOrderInference`).
    """

    ranking_loss_name = ""

    @configurable
    def __init__(self, *, official_inference: bool = False, **kwargs):
        """
        Args:
            official_inference: select detections as the official (mmdetection 2.x) test does.
            kwargs: :class:`RankingLossDetector` and :class:`detectron2.modeling.RetinaNet` arguments.
        """
        super().__init__(**kwargs)
        self.official_inference = official_inference

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        if cfg.MODEL.ALRP.MATCHER == "atss":
            ret["anchor_matcher"] = AtssMatcher(cfg.MODEL.ALRP.ATSS_TOPK)
        ret["official_inference"] = cfg.MODEL.ALRP.OFFICIAL_INFERENCE
        return ret

    @torch.no_grad()
    def label_anchors(self, anchors: List[Boxes], gt_instances: List[Instances]) -> Tuple[List[Tensor], List[Tensor]]:
        """As :meth:`RetinaNet.label_anchors`; with ATSS, one batched call of the matcher (which
        sees the anchors per level) labels every image. An image without ground truth gets
        background labels and zero boxes."""
        if not isinstance(self.anchor_matcher, AtssMatcher):
            return super().label_anchors(anchors, gt_instances)
        gt_boxes = pad_per_image([x.gt_boxes.tensor for x in gt_instances], 0.0)  # (N, G, 4)
        gt_classes = pad_per_image([x.gt_classes for x in gt_instances], self.num_classes)  # (N, G)
        matched_idxs, anchor_labels = self.anchor_matcher.match_batch(gt_boxes, [len(x) for x in gt_instances], anchors)
        gt_labels = torch.where(anchor_labels == 1, gt_classes.gather(1, matched_idxs), self.num_classes)
        matched_gt_boxes = gt_boxes.gather(1, matched_idxs.unsqueeze(-1).expand(-1, -1, 4))
        return list(gt_labels.unbind(0)), list(matched_gt_boxes.unbind(0))

    # aLRP Loss of the batch: ``loss_<name>_cls`` and ``loss_<name>_loc`` (see DetectionRankingLoss;
    # the name is MODEL.ALRP.CLS_LOSS), over all anchors x classes of the batch.
    losses = dense_ranking_losses
