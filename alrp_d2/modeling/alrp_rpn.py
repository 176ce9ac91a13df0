"""The RPN of aLRP Faster R-CNN: detectron2's RPN trained with aLRP Loss, without sampling
(paper Sec. 5.4, App. G.4); the anchor labelling and objectness initialisation of the official RPNs."""

from __future__ import annotations

import math
from typing import Dict, List

from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling import PROPOSAL_GENERATOR_REGISTRY
from detectron2.modeling.proposal_generator import RPN, StandardRPNHead
from detectron2.structures import Boxes
from torch import Tensor, nn

from ..checks.errors import naming_config_keys
from ..criteria.config_keys import RPN_KEYS
from .dense_boxes import DenseBoxes
from .dense_ranking_detector import dense_ranking_loss
from .head_ranking_loss import HeadRankingLoss
from .low_quality_matcher import MinIoULowQualityMatcher

__all__ = ["AlrpRPN", "MinIoULowQualityRPN", "with_objectness_prior"]


def with_objectness_prior(head: StandardRPNHead, prior_prob: float) -> StandardRPNHead:
    """``head`` whose objectness logits start at the bias
    log(p / (1 - p)) of ``prior_prob`` (0.5: detectron2's 0; the official aLRP RPN's 0.01)."""
    if not 0.0 < prior_prob < 1.0:
        raise ValueError(f"prior_prob must be in (0, 1), got {prior_prob}")
    nn.init.constant_(head.objectness_logits.bias, math.log(prior_prob / (1 - prior_prob)))
    return head


@PROPOSAL_GENERATOR_REGISTRY.register()
class MinIoULowQualityRPN(RPN):
    """detectron2's RPN whose anchors are labelled by :class:`MinIoULowQualityMatcher` (the official RPN assigner:
    low-quality matches need IoU >= MODEL.ALRP.RPN_LOW_QUALITY_MIN_IOU, their ground truth as
    MODEL.ALRP.LOW_QUALITY_MATCH_GT) and whose objectness logits start at the bias log(p / (1 - p)) of
    MODEL.ALRP.RPN_PRIOR_PROB (0.5: detectron2's 0). Loss and sampling are detectron2's (the official
    cross-entropy baselines)."""

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]) -> Dict:
        alrp = cfg.MODEL.ALRP
        ret = super().from_config(cfg, input_shape)
        with naming_config_keys(cfg, {"low_quality_gt": "MODEL.ALRP.LOW_QUALITY_MATCH_GT"}):
            ret["anchor_matcher"] = MinIoULowQualityMatcher(
                cfg.MODEL.RPN.IOU_THRESHOLDS,
                cfg.MODEL.RPN.IOU_LABELS,
                min_iou=alrp.RPN_LOW_QUALITY_MIN_IOU,
                low_quality_gt=alrp.LOW_QUALITY_MATCH_GT,
            )
        with_objectness_prior(ret["head"], alrp.RPN_PRIOR_PROB)
        return ret


@PROPOSAL_GENERATOR_REGISTRY.register()
class AlrpRPN(MinIoULowQualityRPN):
    """detectron2's RPN (head, anchors, matcher, proposals) whose loss is one aLRP Loss
    ranking over the objectness logits of every labelled anchor of every image of the batch:
    no sampling (App. G.4). E_loc is computed on the decoded boxes of the positives with
    tau = MODEL.ALRP.RPN_TAU, the RPN's positive threshold; both components are weighted by
    MODEL.ALRP.RPN_WEIGHT (Sec. 5.4). Anchors are labelled as :class:`MinIoULowQualityRPN`'s. Losses:
    ``loss_rpn_cls`` and ``loss_rpn_loc`` (:class:`HeadRankingLoss` named "rpn"). With MODEL.ALRP.CRITERION
    "RankSortCriterion" it is RS R-CNN's RPN (the official ``RankBasedRPNHead``): Rank & Sort Loss with the IoUs of the
    positives' decoded boxes as targets and their GIoU loss weighted by their objectness and balanced by the
    loss values of the step.
    """

    @configurable
    def __init__(self, *, ranking_loss: HeadRankingLoss, **kwargs):
        """
        Args:
            ranking_loss: the RPN's aLRP (or AP) loss, with RPN_WEIGHT, RPN_DELTA and RPN_TAU.
            kwargs: :class:`detectron2.modeling.RPN` arguments (its sampling and loss ones unused).
        """
        super().__init__(**kwargs)
        self.ranking_loss = ranking_loss

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]) -> Dict:
        ret = super().from_config(cfg, input_shape)
        ret["ranking_loss"] = HeadRankingLoss.from_config(
            cfg,
            "rpn",
            keys=RPN_KEYS,
            loss_weight=cfg.MODEL.ALRP.RPN_WEIGHT,
            argument_keys={"loss_weight": "MODEL.ALRP.RPN_WEIGHT"},
        )
        return ret

    def _subsample_labels(self, label: Tensor) -> Tensor:
        """No sampling: every labelled anchor takes part in the ranking (App. G.4)."""
        return label

    def losses(
        self,
        anchors: List[Boxes],
        pred_objectness_logits: List[Tensor],
        gt_labels: List[Tensor],
        pred_anchor_deltas: List[Tensor],
        gt_boxes: List[Tensor],
    ) -> Dict[str, Tensor]:
        """The ranking loss of the batch over the anchors labelled 1 (positive) or 0 (negative)."""
        boxes = DenseBoxes(self.box2box_transform, anchors, pred_anchor_deltas, gt_boxes, self.smooth_l1_beta)
        loss = dense_ranking_loss(
            self.ranking_loss, gt_labels, None, pred_objectness_logits, boxes, "rpn/num_pos_anchors"
        )
        return loss.losses
