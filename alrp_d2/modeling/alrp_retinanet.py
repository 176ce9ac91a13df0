"""aLRP RetinaNet: detectron2's RetinaNet trained with aLRP Loss (paper Sec. 5)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY, RetinaNet
from detectron2.structures import Boxes, Instances
from torch import Tensor

from .atss import AtssMatcher
from .dense_head import DensePositives, DenseRankingDetector, label_anchors_batched
from .low_quality_matcher import MinIoULowQualityMatcher
from .official_inference import OfficialOrderInference
from .postprocessing import KeepEmptyDetections

__all__ = ["AlrpRetinaNet"]


@META_ARCH_REGISTRY.register()
class AlrpRetinaNet(DenseRankingDetector, KeepEmptyDetections, OfficialOrderInference, RetinaNet):
    """RetinaNet (head, anchors, inference of detectron2) whose training loss is one aLRP Loss
    ranking over all anchors x classes of all images of the per-device batch
    (:class:`~alrp_d2.modeling.HeadRankingLoss` named "retinanet": ``loss_retinanet_cls`` and
    ``loss_retinanet_loc``); the positives are the (anchor, its GT class) pairs. E_loc is computed
    on decoded boxes; with an AP loss and MODEL.ALRP.AP_LOC_LOSS "smooth_l1" the localisation loss is the
    Smooth L1 (beta MODEL.RETINANET.SMOOTH_L1_LOSS_BETA) of the encoded deltas (the official AP Loss RetinaNet).

    Anchors are labelled by detectron2's IoU ``Matcher`` (MODEL.RETINANET.IOU_THRESHOLDS; the ground truth of a
    low-quality match as MODEL.ALRP.LOW_QUALITY_MATCH_GT, :class:`MinIoULowQualityMatcher`) or, with
    MODEL.ALRP.MATCHER = "atss", by :class:`AtssMatcher`. With MODEL.ALRP.OFFICIAL_INFERENCE the detections
    are selected in the order of the official test (see :class:`OfficialOrderInference`); with
    TEST.KEEP_EMPTY_DETECTIONS the boxes that clipping made empty are kept.
    """

    ranking_loss_name = "retinanet"
    rank_sort_supported = True

    @configurable
    def __init__(
        self, *, official_inference: bool, keep_empty_detections: bool = False, ap_loc_loss: str = "giou", **kwargs
    ):
        """
        Args:
            official_inference: select detections as the official (mmdetection 2.x) test does.
            keep_empty_detections: keep the detections that clipping made empty.
            ap_loc_loss: localisation loss with an AP loss, "giou" (E_loc) or "smooth_l1".
            kwargs: :class:`DenseRankingDetector` and :class:`detectron2.modeling.RetinaNet` arguments.
        """
        super().__init__(**kwargs)
        self.official_inference = official_inference
        self.keep_empty_detections = keep_empty_detections
        self.ap_loc_loss = ap_loc_loss

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        alrp = cfg.MODEL.ALRP
        if alrp.MATCHER == "atss":
            ret["anchor_matcher"] = AtssMatcher(alrp.ATSS_TOPK)
        else:
            retinanet = cfg.MODEL.RETINANET
            ret["anchor_matcher"] = MinIoULowQualityMatcher(
                retinanet.IOU_THRESHOLDS, retinanet.IOU_LABELS, min_iou=0.0, low_quality_gt=alrp.LOW_QUALITY_MATCH_GT
            )
        ret["official_inference"] = alrp.OFFICIAL_INFERENCE
        ret["keep_empty_detections"] = cfg.TEST.KEEP_EMPTY_DETECTIONS
        ret["ap_loc_loss"] = alrp.AP_LOC_LOSS
        return ret

    def positive_loc_errors(self, positives: DensePositives) -> Tensor:
        """E_loc of the decoded boxes; with an AP loss and "smooth_l1", the Smooth L1 of each positive's encoded
        deltas, averaged over the four."""
        if self.ranking_loss.cls_loss != "alrp" and self.ap_loc_loss == "smooth_l1":
            return positives.smooth_l1(self.box2box_transform, self.smooth_l1_beta)
        return super().positive_loc_errors(positives)

    @torch.no_grad()
    def label_anchors(self, anchors: List[Boxes], gt_instances: List[Instances]) -> Tuple[List[Tensor], List[Tensor]]:
        """As :meth:`RetinaNet.label_anchors`; with ATSS, one batched call of the matcher (which
        sees the anchors per level) labels every image. An image without ground truth gets
        background labels and zero boxes."""
        if isinstance(self.anchor_matcher, AtssMatcher):
            return label_anchors_batched(self.anchor_matcher, anchors, gt_instances, self.num_classes)
        return super().label_anchors(anchors, gt_instances)
