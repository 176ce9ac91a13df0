"""aLRP RetinaNet: detectron2's RetinaNet trained with aLRP Loss (paper Sec. 5)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY, RetinaNet
from detectron2.structures import Boxes, Instances
from torch import Tensor

from .atss import AtssMatcher
from .dense_head import DenseRankingDetector, label_anchors_batched
from .official_inference import OfficialOrderInference

__all__ = ["AlrpRetinaNet"]


@META_ARCH_REGISTRY.register()
class AlrpRetinaNet(DenseRankingDetector, OfficialOrderInference, RetinaNet):
    """RetinaNet (head, anchors, inference of detectron2) whose training loss is one aLRP Loss
    ranking over all anchors x classes of all images of the per-device batch
    (:class:`~alrp_d2.modeling.HeadRankingLoss` named "retinanet": ``loss_retinanet_cls`` and
    ``loss_retinanet_loc``); the positives are the (anchor, its GT class) pairs. E_loc is computed
    on decoded boxes.

    Anchors are labelled by detectron2's IoU ``Matcher`` (MODEL.RETINANET.IOU_THRESHOLDS) or,
    with MODEL.ALRP.MATCHER = "atss", by :class:`AtssMatcher`. With MODEL.ALRP.OFFICIAL_INFERENCE
    the detections are selected in the order of the official test (see
    :class:`OfficialOrderInference`).
    """

    ranking_loss_name = "retinanet"
    rank_sort_supported = True

    @configurable
    def __init__(self, *, official_inference: bool, **kwargs):
        """
        Args:
            official_inference: select detections as the official (mmdetection 2.x) test does.
            kwargs: :class:`DenseRankingDetector` and :class:`detectron2.modeling.RetinaNet` arguments.
        """
        super().__init__(**kwargs)
        self.official_inference = official_inference

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        alrp = cfg.MODEL.ALRP
        if alrp.MATCHER == "atss":
            ret["anchor_matcher"] = AtssMatcher(alrp.ATSS_TOPK)
        ret["official_inference"] = alrp.OFFICIAL_INFERENCE
        return ret

    @torch.no_grad()
    def label_anchors(self, anchors: List[Boxes], gt_instances: List[Instances]) -> Tuple[List[Tensor], List[Tensor]]:
        """As :meth:`RetinaNet.label_anchors`; with ATSS, one batched call of the matcher (which
        sees the anchors per level) labels every image. An image without ground truth gets
        background labels and zero boxes."""
        if isinstance(self.anchor_matcher, AtssMatcher):
            return label_anchors_batched(self.anchor_matcher, anchors, gt_instances, self.num_classes)
        return super().label_anchors(anchors, gt_instances)
