"""aLRP RetinaNet: detectron2's RetinaNet trained with aLRP Loss (paper Sec. 5)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY, RetinaNet
from detectron2.structures import Boxes, Instances
from torch import Tensor

from ..checks.errors import naming_config_keys, require_config
from .atss import AtssMatcher
from .batch_matcher import label_anchors_batched
from .dense_ranking_detector import DenseRankingDetector
from .low_quality_matcher import MinIoULowQualityMatcher
from .official_inference import OfficialOrderInference
from .postprocessing import KeepEmptyDetections

__all__ = ["MATCHERS", "AlrpRetinaNet"]

#: Anchor assignment of :class:`AlrpRetinaNet` (MODEL.ALRP.MATCHER): detectron2's IoU Matcher or ATSS.
MATCHERS = ("iou", "atss")


@META_ARCH_REGISTRY.register()
class AlrpRetinaNet(DenseRankingDetector, KeepEmptyDetections, OfficialOrderInference, RetinaNet):
    """RetinaNet (head, anchors, inference of detectron2) whose training loss is one ranking (aLRP Loss, or the
    criterion of MODEL.ALRP.CRITERION) over all anchors x classes of all images of the per-device batch
    (:class:`~alrp_d2.modeling.HeadRankingLoss` named "retinanet": ``loss_retinanet_cls`` and
    ``loss_retinanet_loc``); the positives are the (anchor, its GT class) pairs. The criterion reads the boxes
    decoded from the positives' deltas, or with an AP criterion and MODEL.ALRP.AP_LOC_LOSS "smooth_l1" the Smooth L1
    (beta MODEL.RETINANET.SMOOTH_L1_LOSS_BETA) of the encoded deltas (the official AP Loss RetinaNet).

    Anchors are labelled by detectron2's IoU ``Matcher`` (MODEL.RETINANET.IOU_THRESHOLDS; the ground truth of a
    low-quality match as MODEL.ALRP.LOW_QUALITY_MATCH_GT, :class:`MinIoULowQualityMatcher`) or, with
    MODEL.ALRP.MATCHER = "atss", by :class:`AtssMatcher`. With MODEL.ALRP.OFFICIAL_INFERENCE the detections
    are selected in the order of the official test (see :class:`OfficialOrderInference`); with
    TEST.KEEP_EMPTY_DETECTIONS the boxes that clipping made empty are kept.
    """

    ranking_loss_name = "retinanet"

    @configurable
    def __init__(self, *, official_inference: bool = False, keep_empty_detections: bool = False, **kwargs):
        """
        Args:
            official_inference: select detections as the official (mmdetection 2.x) test does.
            keep_empty_detections: keep the detections that clipping made empty.
            kwargs: :class:`DenseRankingDetector` and :class:`detectron2.modeling.RetinaNet` arguments.
        """
        super().__init__(**kwargs)
        self.official_inference = official_inference
        self.keep_empty_detections = keep_empty_detections

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        alrp = cfg.MODEL.ALRP
        require_config(alrp.MATCHER in MATCHERS, "MODEL.ALRP.MATCHER", alrp.MATCHER, f"must be one of {MATCHERS}")
        matcher_keys = {"topk": "MODEL.ALRP.ATSS_TOPK", "low_quality_gt": "MODEL.ALRP.LOW_QUALITY_MATCH_GT"}
        with naming_config_keys(cfg, matcher_keys):
            if alrp.MATCHER == "atss":
                ret["anchor_matcher"] = AtssMatcher(alrp.ATSS_TOPK)
            else:
                retinanet = cfg.MODEL.RETINANET
                ret["anchor_matcher"] = MinIoULowQualityMatcher(
                    retinanet.IOU_THRESHOLDS,
                    retinanet.IOU_LABELS,
                    min_iou=0.0,
                    low_quality_gt=alrp.LOW_QUALITY_MATCH_GT,
                )
        ret["official_inference"] = alrp.OFFICIAL_INFERENCE
        ret["keep_empty_detections"] = cfg.TEST.KEEP_EMPTY_DETECTIONS
        return ret

    @torch.no_grad()
    def label_anchors(self, anchors: List[Boxes], gt_instances: List[Instances]) -> Tuple[List[Tensor], List[Tensor]]:
        """As :meth:`RetinaNet.label_anchors`; with ATSS, one batched call of the matcher (which
        sees the anchors per level) labels every image. An image without ground truth gets
        background labels and zero boxes."""
        if isinstance(self.anchor_matcher, AtssMatcher):
            return label_anchors_batched(self.anchor_matcher, anchors, gt_instances, self.num_classes)
        return super().label_anchors(anchors, gt_instances)
