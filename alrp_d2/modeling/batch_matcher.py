"""Matchers that label the anchors of all images of a batch in one call (ATSS, FoveaBox), and detectron2's
``label_anchors`` result from them."""

from __future__ import annotations

from typing import List, Protocol, Tuple

import torch
from detectron2.structures import Boxes, Instances
from torch import Tensor

from .padding import pad_per_image

__all__ = ["BatchMatcher", "label_anchors_batched"]


class BatchMatcher(Protocol):
    """A matcher that labels the anchors of all images of a batch in one call (ATSS, FoveaBox)."""

    def match_batch(self, gt_boxes: Tensor, num_gt: List[int], anchors: List[Boxes]) -> Tuple[Tensor, Tensor]:
        """(N, G, 4) padded ground truths, their numbers per image and the anchors of each
        level -> (N, R) matched ground-truth index (0 for negatives) and (N, R) int8 labels
        (1 positive, 0 negative)."""
        ...


def label_anchors_batched(
    matcher: BatchMatcher, anchors: List[Boxes], gt_instances: List[Instances], num_classes: int
) -> Tuple[List[Tensor], List[Tensor]]:
    """detectron2's ``label_anchors`` result for a :class:`BatchMatcher`: per image, (R,) labels
    (the class of positives, ``num_classes`` for background) and (R, 4) matched boxes (the
    first ground truth's for background anchors, zeros in an image without ground truth)."""
    gt_boxes = pad_per_image([x.gt_boxes.tensor for x in gt_instances], 0.0)  # (N, G, 4)
    gt_classes = pad_per_image([x.gt_classes for x in gt_instances], num_classes)  # (N, G)
    matched_idxs, anchor_labels = matcher.match_batch(gt_boxes, [len(x) for x in gt_instances], anchors)
    gt_labels = torch.where(anchor_labels == 1, gt_classes.gather(1, matched_idxs), num_classes)
    matched_gt_boxes = gt_boxes.gather(1, matched_idxs.unsqueeze(-1).expand(-1, -1, 4))
    return list(gt_labels.unbind(0)), list(matched_gt_boxes.unbind(0))
