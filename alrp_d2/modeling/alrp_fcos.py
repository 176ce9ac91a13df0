"""aLRP FCOS: detectron2's FCOS (its location assignment and head) trained with aLRP Loss."""

from __future__ import annotations

from typing import Dict, List

from detectron2.config import configurable
from detectron2.layers import cat
from detectron2.modeling import META_ARCH_REGISTRY
from detectron2.modeling.meta_arch.fcos import FCOS, FCOSHead
from detectron2.modeling.meta_arch.retinanet import RetinaNet, RetinaNetHead
from detectron2.structures import Boxes, ImageList
from torch import Tensor
from torch.nn import functional as F

from ..checks.errors import require_config
from ..criteria.targets import PositiveTargets
from .dense_boxes import DenseBoxes
from .dense_head_inputs import dense_head_inputs
from .dense_ranking_detector import DenseRankingDetector, dense_ranking_loss

__all__ = ["AlrpFCOS", "ConfigurableFCOS"]

CENTERNESS_CHOICES = ("bce", "none")


@META_ARCH_REGISTRY.register()
class ConfigurableFCOS(FCOS):
    """detectron2's FCOS (focal loss + GIoU + centre-ness BCE), built from MODEL.FCOS of a yacs
    config (detectron2 builds it only from its LazyConfig): the baseline of :class:`AlrpFCOS`."""

    # Whether MODEL.FCOS.CENTERNESS may be "none" (a head without the branch).
    centerness_optional = False
    num_classes_key = "MODEL.FCOS.NUM_CLASSES"  # the number of classes the dataset checks compare

    @configurable
    def __init__(self, **kwargs):
        """Arguments of :class:`detectron2.modeling.meta_arch.fcos.FCOS`."""
        super().__init__(**kwargs)

    @classmethod
    def from_config(cls, cfg) -> Dict:
        fcos = cfg.MODEL.FCOS
        choices = CENTERNESS_CHOICES if cls.centerness_optional else CENTERNESS_CHOICES[:1]
        require_config(
            fcos.CENTERNESS in choices, "MODEL.FCOS.CENTERNESS", fcos.CENTERNESS, f"{cls.__name__} supports {choices}"
        )
        backbone, head_args = dense_head_inputs(cfg, fcos)
        return {
            "backbone": backbone,
            "head": FCOSHead(**head_args) if fcos.CENTERNESS == "bce" else RetinaNetHead(num_anchors=1, **head_args),
            "head_in_features": fcos.IN_FEATURES,
            "num_classes": fcos.NUM_CLASSES,
            "center_sampling_radius": fcos.CENTER_SAMPLING_RADIUS,
            "focal_loss_alpha": fcos.FOCAL_LOSS_ALPHA,
            "focal_loss_gamma": fcos.FOCAL_LOSS_GAMMA,
            "test_score_thresh": fcos.SCORE_THRESH_TEST,
            "test_topk_candidates": fcos.TOPK_CANDIDATES_TEST,
            "test_nms_thresh": fcos.NMS_THRESH_TEST,
            "max_detections_per_image": cfg.TEST.DETECTIONS_PER_IMAGE,
            "pixel_mean": cfg.MODEL.PIXEL_MEAN,
            "pixel_std": cfg.MODEL.PIXEL_STD,
        }


@META_ARCH_REGISTRY.register()
class AlrpFCOS(DenseRankingDetector, ConfigurableFCOS):
    """FCOS whose focal loss + GIoU loss is replaced by one ranking (aLRP Loss, or the criterion of
    MODEL.ALRP.CRITERION) over all
    (location, class) pairs of the per-device batch (:class:`~alrp_d2.modeling.HeadRankingLoss`
    named "fcos": ``loss_fcos_cls`` and ``loss_fcos_loc``), E_loc the GIoU error of the decoded
    boxes.

    Centre-ness (MODEL.FCOS.CENTERNESS) exists in FCOS to make scores reflect localisation
    quality, which aLRP Loss does by ranking: "bce" keeps the branch, trained by FCOS's BCE
    (``loss_fcos_ctr``) and multiplied into the scores at test time (sqrt(p * c)); "none" builds
    the head without it and ranks by the class scores alone.
    """

    centerness_optional = True
    ranking_loss_name = "fcos"

    @configurable
    def __init__(self, **kwargs):
        """kwargs: :class:`DenseRankingDetector` and :class:`ConfigurableFCOS` arguments."""
        super().__init__(**kwargs)
        self.centerness = isinstance(self.head, FCOSHead)

    @property
    def _prediction_dims(self) -> List[int]:
        return [self.num_classes, 4, 1] if self.centerness else [self.num_classes, 4]

    def forward_training(self, images: ImageList, features: List[Tensor], predictions, gt_instances):
        pred_logits, pred_deltas, *pred_centerness = self._transpose_dense_predictions(
            predictions, self._prediction_dims
        )
        anchors = self.anchor_generator(features)
        gt_labels, gt_boxes = self.label_anchors(anchors, gt_instances)
        boxes = self.dense_boxes(anchors, pred_deltas, gt_boxes)
        loss = dense_ranking_loss(self.ranking_loss, gt_labels, self.num_classes, pred_logits, boxes)
        losses = dict(loss.losses)
        if pred_centerness:
            losses["loss_fcos_ctr"] = self.centerness_loss(loss.positives, boxes, pred_centerness[0])
        return losses

    def centerness_loss(self, positives: PositiveTargets, boxes: DenseBoxes, pred_centerness: List[Tensor]) -> Tensor:
        """FCOS's centre-ness loss: BCE of the positives' centre-ness / EMA of their number per batch."""
        normalizer = self._ema_update("loss_normalizer", max(len(positives.row), 1), 300)
        gathered = boxes.gather(positives)
        targets = self.compute_ctrness_targets([Boxes(gathered.anchors)], [gathered.gt_boxes])[0]
        logits = cat(pred_centerness, dim=1).reshape(-1)[positives.row]
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / normalizer

    def forward_inference(self, images: ImageList, features: List[Tensor], predictions: List[List[Tensor]]):
        """FCOS's inference (scores sqrt(class score x centre-ness)); without the centre-ness branch
        RetinaNet's (class scores), whose ``inference_single_image`` FCOS shares."""
        if self.centerness:
            return super().forward_inference(images, features, predictions)
        return RetinaNet.forward_inference(self, images, features, predictions)
