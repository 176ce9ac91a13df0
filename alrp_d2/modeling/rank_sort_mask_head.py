"""The mask head of RS Mask R-CNN (Oksuz et al., "Rank & Sort Loss for Object Detection and Instance
Segmentation", ICCV 2021): the official ``RankBasedFCNMaskHead``'s score-weighted Dice loss."""

from __future__ import annotations

import random
from bisect import bisect_left
from typing import ClassVar, Dict, List, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec, cat
from detectron2.modeling.roi_heads import ROI_MASK_HEAD_REGISTRY, MaskRCNNConvUpsampleHead
from detectron2.structures import Instances
from torch import Tensor

from ..checks.errors import built_naming_config_keys, require_argument
from ..losses.global_ranking import RANKINGS, global_weighted_mean, ranking_group

__all__ = ["RankSortMaskHead", "dice_losses"]

#: Added to the Dice denominator (the official ``dice_coefficient``).
DICE_EPS = 1e-5


def dice_losses(mask_probs: Tensor, gt_masks: Tensor) -> Tensor:
    """(B,) ``1 - 2 sum(p t) / (sum p^2 + sum t^2 + 1e-5)`` of each (B, M, M) predicted mask ``p`` with
    its ground truth ``t`` (Milletari et al., V-Net, 2016), as the official RS mask head."""
    probs, targets = mask_probs.flatten(1), gt_masks.flatten(1)
    intersection = (probs * targets).sum(dim=1)
    union = probs.square().sum(dim=1) + targets.square().sum(dim=1) + DICE_EPS
    return 1.0 - 2.0 * intersection / union


@ROI_MASK_HEAD_REGISTRY.register()
class RankSortMaskHead(MaskRCNNConvUpsampleHead):
    """detectron2's ``MaskRCNNConvUpsampleHead`` (layers and inference) trained as the official RS mask
    head: the Dice loss (:func:`dice_losses`) of each positive's sigmoid mask at its ground-truth class
    against its ground-truth mask in the proposal box (cropped as detectron2's ``mask_rcnn_loss`` does),
    averaged with the weights of the positives (their detached best class score in the box head trained with Rank
    & Sort Loss), over all workers with MODEL.ALRP.RANKING "global". It is trained by
    :class:`~alrp_d2.modeling.AlrpROIHeads`, which passes it at most ``max_positives`` positives of the batch with
    their weights (:meth:`subsample`, :meth:`weighted_loss`) and balances the loss by the box head's RS Loss.
    """

    #: The head's loss is this task of the box head: weighted per positive and balanced by the box head's criterion
    #: (:meth:`~alrp_d2.modeling.HeadRankingLoss.balance_task`), which must balance it (``balances_tasks``).
    box_balanced_task: ClassVar[str] = "mask"

    @built_naming_config_keys({"max_positives": "MODEL.ALRP.MASK_MAX_POSITIVES", "ranking": "MODEL.ALRP.RANKING"})
    @configurable
    def __init__(self, input_shape: ShapeSpec, *, max_positives: int, ranking: str, **kwargs):
        """
        Args:
            input_shape: shape of the per-region features.
            max_positives: the most positives of a worker's batch that train the head (MODEL.ALRP.MASK_MAX_POSITIVES).
            ranking: "per_worker" or "global" (MODEL.ALRP.RANKING): the batch the weighted mean is over.
            kwargs: :class:`MaskRCNNConvUpsampleHead` arguments.
        """
        super().__init__(input_shape, **kwargs)
        owner = type(self).__name__
        integer = isinstance(max_positives, int) and not isinstance(max_positives, bool) and max_positives >= 1
        require_argument(integer, owner, "max_positives", max_positives, "must be an integer >= 1")
        require_argument(ranking in RANKINGS, owner, "ranking", ranking, f"must be one of {RANKINGS}")
        self.max_positives = max_positives
        self.ranking = ranking

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: ShapeSpec) -> Dict:
        ret = super().from_config(cfg, input_shape)
        ret.update(max_positives=cfg.MODEL.ALRP.MASK_MAX_POSITIVES, ranking=cfg.MODEL.ALRP.RANKING)
        return ret

    def forward(self, x: Tensor, instances: List[Instances]):
        """detectron2's inference; training goes through :meth:`weighted_loss`, with the box head's weights."""
        if self.training:
            raise RuntimeError(
                f"{type(self).__name__} weights each mask by the box head's score: it is trained by "
                "MODEL.ROI_HEADS.NAME 'AlrpROIHeads' with MODEL.ALRP.CRITERION 'RankSortCriterion'"
            )
        return super().forward(x, instances)

    def weighted_loss(self, x: Tensor, instances: List[Instances], weights: Tensor) -> Tensor:
        """``loss_mask``: the mean Dice loss of the positives ``instances`` (their fields ``proposal_boxes``,
        ``gt_classes``, ``gt_masks``) weighted by the (B,) ``weights``, from their mask features ``x``."""
        return self.loss_weight * self.weighted_dice_loss(self.layers(x), instances, weights)

    def weighted_dice_loss(self, mask_logits: Tensor, instances: List[Instances], weights: Tensor) -> Tensor:
        """The mean Dice loss of the (B, K or 1, M, M) mask logits of the ``instances`` of the batch,
        weighted by the (B,) ``weights``; 0 (connected to the logits) without positives."""
        images = [image for image in instances if len(image)]
        side = mask_logits.shape[-1]
        if not images:
            gt_masks = mask_logits.new_zeros(0, side, side)
        else:
            gt_masks = cat([image.gt_masks.crop_and_resize(image.proposal_boxes.tensor, side) for image in images])
        if mask_logits.shape[1] == 1:
            logits = mask_logits[:, 0]
        else:
            classes = cat([image.gt_classes for image in images]) if images else weights.new_zeros(0, dtype=torch.long)
            logits = mask_logits[torch.arange(len(mask_logits), device=mask_logits.device), classes]
        losses = dice_losses(logits.float().sigmoid(), gt_masks.to(device=logits.device, dtype=torch.float32))
        return global_weighted_mean(losses, weights, ranking_group(self.ranking))

    def subsample(self, instances: List[Instances], weights: Tensor) -> Tuple[List[Instances], Tensor]:
        """The per-image positives of the batch and their (B,) ``weights``, or a uniformly random subset of
        ``max_positives`` of them when there are more (the official resampling; python's ``random``, which the
        trainer seeds per step, so that a resumed run draws the same subsets)."""
        counts = [len(image) for image in instances]
        if sum(counts) <= self.max_positives:
            return instances, weights
        keep = sorted(random.sample(range(sum(counts)), self.max_positives))
        # One copy of the draw to the device (a copy from pageable memory waits for the device), sliced per image.
        kept = torch.as_tensor(keep, dtype=torch.long, device=instances[0].proposal_boxes.device)
        subsets, start = [], 0
        for image, count in zip(instances, counts):
            chosen = kept[bisect_left(keep, start) : bisect_left(keep, start + count)]
            subsets.append(image[chosen - start])
            start += count
        return subsets, weights[kept]
