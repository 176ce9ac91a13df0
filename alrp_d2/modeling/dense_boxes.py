"""The boxes of a dense head's rows, (image, anchor) pairs in row-major order, as the ranking criteria read them
(:class:`~alrp_d2.criteria.PositiveSource`)."""

from __future__ import annotations

from typing import Any, List, NamedTuple, Tuple

import torch
from detectron2.layers import cat
from detectron2.structures import Boxes
from fvcore.nn import smooth_l1_loss
from torch import Tensor

from ..criteria.targets import PositiveTargets
from ..losses.localisation_error import paired_iou_giou

__all__ = ["DenseBoxes", "DensePositives"]


class DensePositives(NamedTuple):
    """The positive anchors of a dense head's batch: their anchors, predicted deltas and matched boxes."""

    anchors: Tensor
    pred_deltas: Tensor
    gt_boxes: Tensor


class DenseBoxes:
    """The anchors, predicted deltas and matched boxes of every (image, anchor) row of a dense head's batch.

    Args:
        box2box_transform: the head's box coding.
        anchors: per level (the same for every image).
        pred_deltas: per level (N, R_level, 4).
        gt_boxes: per image (R, 4), the matched box of every anchor.
        smooth_l1_beta: beta of the head's Smooth L1 on the encoded deltas (:meth:`encoded_box_loss`).
    """

    def __init__(
        self,
        box2box_transform: Any,
        anchors: List[Boxes],
        pred_deltas: List[Tensor],
        gt_boxes: List[Tensor],
        smooth_l1_beta: float = 0.0,
    ):
        self.box2box_transform = box2box_transform
        self.anchors = Boxes.cat(anchors).tensor
        self.level_ends = torch.tensor([len(level) for level in anchors], device=self.anchors.device).cumsum(0)
        self.pred_deltas = cat(pred_deltas, dim=1)
        self.gt_boxes = torch.stack(gt_boxes)
        self.smooth_l1_beta = smooth_l1_beta

    def gather(self, positives: PositiveTargets) -> DensePositives:
        """The anchors, predicted deltas and matched boxes of the positives' rows."""
        return DensePositives(
            self.anchors[positives.row % len(self.anchors)],
            self.pred_deltas.reshape(-1, 4)[positives.row],
            self.gt_boxes.reshape(-1, 4)[positives.row],
        )

    def decoded_boxes(self, positives: PositiveTargets) -> Tuple[Tensor, Tensor]:
        """The boxes decoded from the positives' predicted deltas, and their matched boxes."""
        gathered = self.gather(positives)
        return self.box2box_transform.apply_deltas(gathered.pred_deltas, gathered.anchors), self.target_boxes(gathered)

    def target_boxes(self, positives: DensePositives) -> Tensor:
        """The localisation targets of the positives: their matched boxes."""
        return positives.gt_boxes

    def encoded_box_loss(self, positives: PositiveTargets) -> Tensor:
        """Smooth L1 of each positive's predicted deltas against its encoded target, averaged over the four (the
        localisation loss of the official AP Loss heads)."""
        gathered = self.gather(positives)
        target_deltas = self.box2box_transform.get_deltas(gathered.anchors, gathered.gt_boxes)
        return smooth_l1_loss(gathered.pred_deltas, target_deltas, self.smooth_l1_beta).mean(dim=1)

    @torch.no_grad()
    def row_overlaps(self) -> Tensor:
        """(N * R,) the IoU of every row's predicted box with its matched box, detached."""
        all_anchors = self.anchors.repeat(len(self.pred_deltas), 1)
        pred_boxes = self.box2box_transform.apply_deltas(self.pred_deltas.reshape(-1, 4), all_anchors)
        return paired_iou_giou(pred_boxes, self.gt_boxes.reshape(-1, 4))[0]

    @property
    def num_levels(self) -> int:
        return len(self.level_ends)

    def levels(self, positives: PositiveTargets) -> Tensor:
        """(P,) the pyramid level of each positive's anchor."""
        return torch.bucketize(positives.row % len(self.anchors), self.level_ends, right=True)
