"""Cascade R-CNN whose every stage is trained by a ranking loss (RS Cascade R-CNN: the official
``RankBasedCascadeRoIHead`` of Rank & Sort Loss and of Bucketed Ranking-based Losses)."""

from __future__ import annotations

from typing import Dict, List, Tuple

from detectron2.config import configurable
from detectron2.modeling.roi_heads import CascadeROIHeads
from detectron2.modeling.roi_heads.cascade_rcnn import _ScaleGradient
from detectron2.structures import Instances
from torch import Tensor

from .alrp_roi_heads import AlrpFastRCNNOutputLayers, keep_every_proposal

__all__ = ["AlrpCascadeROIHeads"]


class AlrpCascadeROIHeads(CascadeROIHeads):
    """detectron2's ``CascadeROIHeads`` with an :class:`AlrpFastRCNNOutputLayers` (and its own
    :class:`~alrp_d2.modeling.HeadRankingLoss`, named per stage) in every stage and no sampling: every proposal (and
    the GT boxes with ``proposal_append_gt``) trains the first stage, every box of the previous stage the next
    (detectron2 labels those without sampling). Built from a LazyConfig only (``model.roi_heads._target_``).

    A stage's loss is weighted by its ranking loss's ``loss_weight`` (mmdetection's ``stage_loss_weights``). The
    gradient that reaches the shared features from each stage is multiplied by ``feature_gradient_scale``: 1 is
    mmdetection's (the Rank & Sort configs: stage weights 1, 1, 1, nothing scaled), ``1 / num_stages`` detectron2's
    (which averages the stages' gradients on the features)."""

    @configurable
    def __init__(self, *, feature_gradient_scale: float = 1.0, **kwargs):
        """
        Args:
            feature_gradient_scale: the factor of each stage's gradient on the pooled features.
            kwargs: :class:`detectron2.modeling.roi_heads.CascadeROIHeads` arguments.
        """
        super().__init__(**kwargs)
        stages = [type(predictor).__name__ for predictor in self.box_predictor]
        if not all(isinstance(predictor, AlrpFastRCNNOutputLayers) for predictor in self.box_predictor):
            raise ValueError(f"every stage's box_predictor must be an AlrpFastRCNNOutputLayers, got {stages}")
        self.feature_gradient_scale = feature_gradient_scale

    def _sample_proposals(
        self, matched_idxs: Tensor, matched_labels: Tensor, gt_classes: Tensor
    ) -> Tuple[Tensor, Tensor]:
        return keep_every_proposal(matched_idxs, matched_labels, gt_classes, self.num_classes)

    def _run_stage(self, features: List[Tensor], proposals: List[Instances], stage: int) -> Tuple[Tensor, Tensor]:
        """detectron2's stage with the features' gradient scaled by ``feature_gradient_scale``."""
        box_features = self.box_pooler(features, [x.proposal_boxes for x in proposals])
        if self.training and self.feature_gradient_scale != 1.0:
            box_features = _ScaleGradient.apply(box_features, self.feature_gradient_scale)
        box_features = self.box_head[stage](box_features)
        return self.box_predictor[stage](box_features)

    @classmethod
    def from_config(cls, cfg, input_shape) -> Dict:
        raise ValueError(
            "AlrpCascadeROIHeads is built from a LazyConfig (configs/COCO-Detection/rs_cascade_rcnn_R_50_FPN_1x.py), "
            "not from a yacs config"
        )
