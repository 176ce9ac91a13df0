"""The box head of aLRP Faster R-CNN: sigmoid classifiers trained with aLRP Loss over all
proposals, without sampling (paper Sec. 5.4, App. G.4); with Rank & Sort Loss, the box and mask
heads of RS R-CNN and RS Mask R-CNN (Oksuz et al., ICCV 2021)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec, cat
from detectron2.modeling import ROI_HEADS_REGISTRY, StandardROIHeads
from detectron2.modeling.roi_heads import FastRCNNOutputLayers, select_foreground_proposals
from detectron2.structures import ImageList, Instances
from torch import Tensor, nn
from torch.nn import functional as F

from ..criteria.targets import RowLabels
from .head_ranking_loss import HeadLoss, HeadRankingLoss
from .proposal_boxes import ProposalBoxes
from .rank_sort_mask_head import RankSortMaskHead

__all__ = ["AlrpFastRCNNOutputLayers", "AlrpROIHeads", "keep_every_proposal"]

Predictions = Tuple[Tensor, Tensor]


class AlrpFastRCNNOutputLayers(FastRCNNOutputLayers):
    """Fast R-CNN outputs with one sigmoid classifier per class instead of the softmax
    (App. G.4): ``cls_score`` is Linear(in, K), no background logit; class-specific box
    regression (K x 4). The loss is one aLRP Loss ranking over all (proposal, class) pairs of
    the batch, the positives being (proposal, its GT class); E_loc is computed on the boxes
    decoded from the GT class's deltas. Losses: ``loss_box_cls`` and ``loss_box_loc``
    (:class:`HeadRankingLoss` named "box"). Inference scores are the sigmoid scores.

    With MODEL.ALRP.CRITERION "RankSortCriterion" it is the box head of RS R-CNN (the official
    ``RankBasedShared2FCBBoxHead``): RS Loss ranks all (proposal, class) pairs with the IoUs of the
    positives' decoded boxes as targets, and the GIoU loss of every positive is weighted by the
    proposal's detached best class score and balanced by the loss values of the step (see
    :class:`~alrp_d2.criteria.RankSortCriterion`).
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
        ret = super().from_config(cfg, input_shape)
        rank_sort_mask = cfg.MODEL.MASK_ON and cfg.MODEL.ROI_MASK_HEAD.NAME == RankSortMaskHead.__name__
        tasks = ("mask",) if rank_sort_mask else ()
        ret["ranking_loss"] = HeadRankingLoss.from_config(cfg, "box", balanced_tasks=tasks)
        return ret

    def losses(self, predictions: Predictions, proposals: List[Instances]) -> Dict[str, Tensor]:
        """The ranking loss of all proposals x classes of the batch (:meth:`ranking_losses`)."""
        return self.ranking_losses(predictions, proposals).losses

    def ranking_losses(self, predictions: Predictions, proposals: List[Instances]) -> HeadLoss:
        """The ranking loss of all proposals x classes of the batch (``gt_classes``: class in [0, K)
        for positives, K for background, as labelled by :class:`AlrpROIHeads`). A batch without
        proposals gives zero losses."""
        scores, proposal_deltas = predictions
        gt_classes = cat([p.gt_classes for p in proposals], dim=0)
        proposal_boxes = cat([p.proposal_boxes.tensor for p in proposals], dim=0)
        # Images without GT have no gt_boxes; their proposals are all negatives.
        gt_boxes = cat([(p.gt_boxes if p.has("gt_boxes") else p.proposal_boxes).tensor for p in proposals], dim=0)
        # Class-agnostic regression (cascade stages): every class's row reads the one box.
        box_dim = proposal_boxes.shape[1]
        class_deltas = proposal_deltas.reshape(len(gt_classes), proposal_deltas.shape[1] // box_dim, box_dim)
        class_deltas = class_deltas.expand(-1, self.num_classes, -1)
        boxes = ProposalBoxes(
            self.box2box_transform, class_deltas, proposal_boxes, gt_boxes, gt_classes, self.smooth_l1_beta
        )
        return self.ranking_loss(scores, RowLabels(gt_classes, self.num_classes), boxes)

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

    With MODEL.MASK_ON and MODEL.ROI_MASK_HEAD.NAME "RankSortMaskHead" (RS Mask R-CNN, the official
    ``RankBasedStandardRoIHead``), training passes the box head's results to the mask head explicitly: each
    foreground proposal's mask loss is weighted by its detached best class score, at most
    MODEL.ALRP.MASK_MAX_POSITIVES foreground proposals of the batch (a random subset when there are more) train the
    mask head, and its loss is balanced as the box loss: ``loss_mask = (L_rank + L_sort) / L_mask * L_mask`` with
    the box head's values of the step (:meth:`HeadRankingLoss.balance_task`).
    """

    @classmethod
    def _init_box_head(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]) -> Dict:
        ret = super()._init_box_head(cfg, input_shape)
        ret["box_predictor"] = AlrpFastRCNNOutputLayers(cfg, ret["box_head"].output_shape)
        return ret

    def forward(
        self,
        images: ImageList,
        features: Dict[str, Tensor],
        proposals: List[Instances],
        targets: Optional[List[Instances]] = None,
    ):
        """detectron2's ``forward``; in training with a :class:`RankSortMaskHead`, the box head's scores and loss
        values reach the mask head as arguments."""
        if not (self.training and isinstance(getattr(self, "mask_head", None), RankSortMaskHead)):
            return super().forward(images, features, proposals, targets)
        proposals = self.label_and_sample_proposals(proposals, targets)
        box_features = self.box_pooler(
            [features[f] for f in self.box_in_features], [x.proposal_boxes for x in proposals]
        )
        predictions = self.box_predictor(self.box_head(box_features))
        box = self.box_predictor.ranking_losses(predictions, proposals)
        losses = dict(box.losses)
        score_weights = predictions[0].detach().sigmoid().amax(dim=1)
        losses["loss_mask"] = self._rank_sort_mask_loss(features, proposals, score_weights, box.task_value)
        losses.update(self._forward_keypoint(features, proposals))
        return proposals, losses

    def _rank_sort_mask_loss(
        self, features: Dict[str, Tensor], proposals: List[Instances], score_weights: Tensor, task_value: Tensor
    ) -> Tensor:
        """The loss of the :class:`RankSortMaskHead` on at most ``max_positives`` foreground proposals, weighted by
        their (R,) ``score_weights`` and balanced by the box head's ``task_value``."""
        mask_head: RankSortMaskHead = self.mask_head
        foreground, selected = select_foreground_proposals(proposals, self.num_classes)
        # The foreground rows by their number, known on the host: no synchronisation.
        rows = torch.nonzero_static(cat(selected), size=sum(len(image) for image in foreground)).squeeze(1)
        instances, weights = mask_head.subsample(foreground, score_weights[rows])
        # detectron2's _forward_mask in training, without selecting the foreground again (a sync per image).
        if self.mask_pooler is not None:
            mask_features = self.mask_pooler(
                [features[f] for f in self.mask_in_features], [x.proposal_boxes for x in instances]
            )
        else:
            mask_features = {f: features[f] for f in self.mask_in_features}
        loss = mask_head.weighted_loss(mask_features, instances, weights)
        return self.box_predictor.ranking_loss.balance_task("mask", loss, task_value)

    def _sample_proposals(
        self, matched_idxs: Tensor, matched_labels: Tensor, gt_classes: Tensor
    ) -> Tuple[Tensor, Tensor]:
        return keep_every_proposal(matched_idxs, matched_labels, gt_classes, self.num_classes)


def keep_every_proposal(
    matched_idxs: Tensor, matched_labels: Tensor, gt_classes: Tensor, num_classes: int
) -> Tuple[Tensor, Tensor]:
    """detectron2's ``ROIHeads._sample_proposals`` without sampling: every proposal, labelled with its matched GT
    class (matcher label 1), the background class ``num_classes`` (label 0) or -1 (ignored, label -1)."""
    if gt_classes.numel() == 0:
        labels = torch.full_like(matched_idxs, num_classes)
    else:
        labels = gt_classes[matched_idxs].masked_fill(matched_labels == 0, num_classes)
        labels = labels.masked_fill(matched_labels == -1, -1)
    return torch.arange(len(matched_idxs), device=matched_idxs.device), labels
