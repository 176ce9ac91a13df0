"""The box head of aLRP Faster R-CNN: sigmoid classifiers trained with aLRP Loss over all
proposals, without sampling (paper Sec. 5.4, App. G.4)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec, cat
from detectron2.modeling import ROI_HEADS_REGISTRY, StandardROIHeads
from detectron2.modeling.roi_heads import FastRCNNOutputLayers
from detectron2.structures import Instances
from torch import Tensor, nn
from torch.nn import functional as F

from .ranking_loss import HeadRankingLoss, PositiveTargets

__all__ = ["AlrpFastRCNNOutputLayers", "AlrpROIHeads"]

Predictions = Tuple[Tensor, Tensor]


class AlrpFastRCNNOutputLayers(FastRCNNOutputLayers):
    """Fast R-CNN outputs with one sigmoid classifier per class instead of the softmax
    (App. G.4): ``cls_score`` is Linear(in, K), no background logit; class-specific box
    regression (K x 4). The loss is one aLRP Loss ranking over all (proposal, class) pairs of
    the batch, the positives being (proposal, its GT class); E_loc is computed on the boxes
    decoded from the GT class's deltas. Losses: ``loss_box_cls`` and ``loss_box_loc``
    (:class:`HeadRankingLoss` named "box"). Inference scores are the sigmoid scores.
    """

    @configurable
    def __init__(self, input_shape: ShapeSpec, *, ranking_loss: HeadRankingLoss, **kwargs):
        """
        Args:
            input_shape: shape of the per-region features.
            ranking_loss: the box head's aLRP (or AP) loss.
            kwargs: :class:`FastRCNNOutputLayers` arguments (its loss ones unused).
        """
        super().__init__(input_shape, **kwargs)
        self.cls_score = nn.Linear(self.cls_score.in_features, self.num_classes)  # type: ignore[has-type]
        nn.init.normal_(self.cls_score.weight, std=0.01)
        nn.init.constant_(self.cls_score.bias, 0)
        self.ranking_loss = ranking_loss

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: ShapeSpec) -> Dict:
        if cfg.MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG:
            raise ValueError(
                "Invalid config value MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG=True: "
                "aLRP Faster R-CNN regresses class-specific boxes (App. G.4)"
            )
        alrp = cfg.MODEL.ALRP
        ret = super().from_config(cfg, input_shape)
        ret["ranking_loss"] = HeadRankingLoss.from_config(cfg, "box", delta=alrp.DELTA, tau=alrp.TAU)
        return ret

    def losses(self, predictions: Predictions, proposals: List[Instances]) -> Dict[str, Tensor]:
        """aLRP Loss of all proposals x classes of the batch (``gt_classes``: class in [0, K)
        for positives, K for background, as labelled by :class:`AlrpROIHeads`). A batch without
        proposals gives zero losses."""
        scores, proposal_deltas = predictions
        gt_classes = cat([p.gt_classes for p in proposals], dim=0)
        proposal_boxes = cat([p.proposal_boxes.tensor for p in proposals], dim=0)
        # Images without GT have no gt_boxes; their proposals are all negatives.
        gt_boxes = cat([(p.gt_boxes if p.has("gt_boxes") else p.proposal_boxes).tensor for p in proposals], dim=0)

        targets = PositiveTargets.of_labels(gt_classes, self.num_classes)
        box_dim = proposal_boxes.shape[1]
        deltas = proposal_deltas.reshape(len(gt_classes), self.num_classes, box_dim)[targets.row, targets.label]
        pred_boxes = self.box2box_transform.apply_deltas(deltas, proposal_boxes[targets.row])
        loc_errors = self.ranking_loss.loc_errors(pred_boxes, gt_boxes[targets.row])
        return self.ranking_loss(scores, targets, loc_errors)

    def predict_probs(self, predictions: Predictions, proposals: List[Instances]) -> Tuple[Tensor, ...]:
        """Sigmoid scores (App. G.4) with a zero background column, which detectron2's
        ``fast_rcnn_inference`` expects and drops."""
        scores, _ = predictions
        probs = F.pad(scores.sigmoid(), (0, 1))
        return probs.split([len(p) for p in proposals], dim=0)


@ROI_HEADS_REGISTRY.register()
class AlrpROIHeads(StandardROIHeads):
    """detectron2's StandardROIHeads with :class:`AlrpFastRCNNOutputLayers` and no sampling:
    every proposal of the batch (and the GT boxes with MODEL.ROI_HEADS.PROPOSAL_APPEND_GT)
    trains the box head (App. G.4); MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE and
    POSITIVE_FRACTION are unused.
    """

    @classmethod
    def _init_box_head(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]) -> Dict:
        ret = super()._init_box_head(cfg, input_shape)
        ret["box_predictor"] = AlrpFastRCNNOutputLayers(cfg, ret["box_head"].output_shape)
        return ret

    def _sample_proposals(
        self, matched_idxs: Tensor, matched_labels: Tensor, gt_classes: Tensor
    ) -> Tuple[Tensor, Tensor]:
        """Keeps every proposal, labelled with its matched GT class (matcher label 1), the
        background class K (label 0) or -1 (ignored, label -1)."""
        if gt_classes.numel() == 0:
            labels = torch.full_like(matched_idxs, self.num_classes)
        else:
            labels = gt_classes[matched_idxs].masked_fill(matched_labels == 0, self.num_classes)
            labels = labels.masked_fill(matched_labels == -1, -1)
        return torch.arange(len(matched_idxs), device=matched_idxs.device), labels
