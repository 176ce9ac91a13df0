"""The box head of aLRP Faster R-CNN: sigmoid classifiers trained with aLRP Loss over all
proposals, without sampling (paper Sec. 5.4, App. G.4); with Rank & Sort Loss, the box and mask
heads of RS R-CNN and RS Mask R-CNN (Oksuz et al., ICCV 2021)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec, cat
from detectron2.modeling import ROI_HEADS_REGISTRY, StandardROIHeads
from detectron2.modeling.roi_heads import ROI_MASK_HEAD_REGISTRY, FastRCNNOutputLayers, select_foreground_proposals
from detectron2.structures import ImageList, Instances
from torch import Tensor, nn
from torch.nn import functional as F

from ..checks.errors import require_argument
from ..criteria.targets import RowLabels
from .head_ranking_loss import HeadLoss, HeadRankingLoss
from .proposal_boxes import ProposalBoxes

__all__ = ["AlrpFastRCNNOutputLayers", "AlrpROIHeads", "keep_every_proposal"]

Predictions = Tuple[Tensor, Tensor]


class AlrpFastRCNNOutputLayers(FastRCNNOutputLayers):
    """Fast R-CNN outputs with one sigmoid classifier per class instead of the softmax
    (App. G.4): ``cls_score`` is Linear(in, K), no background logit; class-specific box
    regression (K x 4). The loss is one aLRP Loss ranking over all (proposal, class) pairs of
    the batch, the positives being (proposal, its GT class); E_loc is computed on the boxes
    decoded from the GT class's deltas. Losses: ``loss_box_cls`` and ``loss_box_loc``
    (:class:`HeadRankingLoss` named "box"). Inference scores are the sigmoid scores.

    With Rank & Sort Loss as the criterion it is the box head of RS R-CNN (the official
    ``RankBasedShared2FCBBoxHead``): RS Loss ranks all (proposal, class) pairs with the IoUs of the
    positives' decoded boxes as targets, and the GIoU loss of every positive is weighted by the
    proposal's detached best class score and balanced by the loss values of the step (docs/rank_sort.md).
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
    def from_config(cls, cfg: CfgNode, input_shape: ShapeSpec, balanced_tasks: Sequence[str] = ()) -> Dict:
        """detectron2's arguments and the ranking loss "box", which balances ``balanced_tasks`` (the mask head's
        task, :meth:`AlrpROIHeads.box_balanced_tasks`)."""
        if cfg.MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG:
            raise ValueError(
                "Invalid config value MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG=True: "
                "aLRP Faster R-CNN regresses class-specific boxes (App. G.4)"
            )
        ret = super().from_config(cfg, input_shape)
        ret["ranking_loss"] = HeadRankingLoss.from_config(
            cfg, "box", balanced_tasks=balanced_tasks, argument_keys={"balanced_tasks": "MODEL.ALRP.CRITERION"}
        )
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

    A mask head that declares its loss a task of the box head (``box_balanced_task``: RS Mask R-CNN's
    :class:`~alrp_d2.modeling.RankSortMaskHead`, the official ``RankBasedStandardRoIHead``) is trained with the box
    head's step, passed as an argument: the box head's criterion must balance the task (``balanced_tasks``), each
    foreground proposal's mask loss is weighted by the criterion's weight of that positive (Rank & Sort Loss: its
    detached best class score), at most MODEL.ALRP.MASK_MAX_POSITIVES foreground proposals of the batch (a random
    subset when there are more) train the mask head, and its loss is balanced by the criterion
    (:meth:`HeadRankingLoss.balance_task`; Rank & Sort Loss: ``loss_mask = (L_rank + L_sort) / L_mask * L_mask`` with
    the box head's values of the step).
    """

    @configurable
    def __init__(self, **kwargs):
        """
        Args:
            kwargs: :class:`StandardROIHeads` arguments; the box predictor's ranking loss balances the task the mask
                head declares (``box_balanced_task``), and only that one.
        """
        super().__init__(**kwargs)
        balanced = self.box_predictor.ranking_loss.balanced_tasks
        mask_head = type(self.mask_head) if self.mask_on else None
        declared = self.box_balanced_tasks(mask_head)
        require_argument(
            tuple(balanced) == declared,
            type(self).__name__,
            "box_predictor.ranking_loss.balanced_tasks",
            tuple(balanced),
            f"must be {declared}, the tasks the mask head {getattr(mask_head, '__name__', None)} declares "
            "(box_balanced_task)",
        )

    @staticmethod
    def box_balanced_tasks(mask_head: Optional[type]) -> Tuple[str, ...]:
        """The task of the box head that the class ``mask_head`` declares its loss to be (``box_balanced_task``), or
        none (detectron2's mask heads, no mask head)."""
        task = getattr(mask_head, "box_balanced_task", None)
        return (task,) if task else ()

    @classmethod
    def _init_box_head(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]) -> Dict:
        ret = super()._init_box_head(cfg, input_shape)
        mask_head = ROI_MASK_HEAD_REGISTRY.get(cfg.MODEL.ROI_MASK_HEAD.NAME) if cfg.MODEL.MASK_ON else None
        tasks = cls.box_balanced_tasks(mask_head)
        ret["box_predictor"] = AlrpFastRCNNOutputLayers(cfg, ret["box_head"].output_shape, balanced_tasks=tasks)
        return ret

    def forward(
        self,
        images: ImageList,
        features: Dict[str, Tensor],
        proposals: List[Instances],
        targets: Optional[List[Instances]] = None,
    ):
        """detectron2's ``forward``. In training with a mask head that the box head balances, the box head's step
        reaches the mask head as an argument: detectron2's forward passes nothing from ``_forward_box`` to
        ``_forward_mask`` but losses, so this one calls its parts (labelling, the keypoint head) around the two."""
        if not (self.training and self.box_predictor.ranking_loss.balanced_tasks):
            return super().forward(images, features, proposals, targets)
        proposals = self.label_and_sample_proposals(proposals, targets)
        box_features = self.box_pooler(
            [features[f] for f in self.box_in_features], [x.proposal_boxes for x in proposals]
        )
        box = self.box_predictor.ranking_losses(self.box_predictor(self.box_head(box_features)), proposals)
        losses = dict(box.losses)
        losses["loss_mask"] = self._balanced_mask_loss(features, proposals, box)
        losses.update(self._forward_keypoint(features, proposals))
        return proposals, losses

    def _balanced_mask_loss(self, features: Dict[str, Tensor], proposals: List[Instances], box: HeadLoss) -> Tensor:
        """The loss of the mask head on at most ``max_positives`` foreground proposals (the box positives), each
        weighted by the criterion's ``positive_weights`` and the whole by its ``task_weight`` of the box head's
        step."""
        mask_head = self.mask_head
        foreground, _ = select_foreground_proposals(proposals, self.num_classes)
        count = sum(len(image) for image in foreground)
        weights = box.output.positive_weights
        if weights is None:
            weights = box.positives.row.new_ones(count, dtype=torch.float32)
        if len(weights) != count:
            raise ValueError(
                f"{type(self.box_predictor.ranking_loss.criterion).__name__} gives {len(weights)} positive weights "
                f"for {count} foreground proposals: its box positives must be the foreground proposals"
            )
        instances, weights = mask_head.subsample(foreground, weights)
        # detectron2's _forward_mask in training, without selecting the foreground again (a sync per image).
        if self.mask_pooler is not None:
            mask_features = self.mask_pooler(
                [features[f] for f in self.mask_in_features], [x.proposal_boxes for x in instances]
            )
        else:
            mask_features = {f: features[f] for f in self.mask_in_features}
        loss = mask_head.weighted_loss(mask_features, instances, weights)
        balanced, _ = self.box_predictor.ranking_loss.balance_task(mask_head.box_balanced_task, loss, box)
        return balanced

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
