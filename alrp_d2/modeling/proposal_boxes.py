"""The boxes of a box head's rows, the proposals of the batch, as the ranking criteria read them
(:class:`~alrp_d2.criteria.PositiveSource`)."""

from __future__ import annotations

from typing import Any, Tuple

import torch
from fvcore.nn import smooth_l1_loss
from torch import Tensor

from ..criteria.targets import PositiveTargets
from ..losses.localisation_error import paired_iou_giou

__all__ = ["ProposalBoxes"]


class ProposalBoxes:
    """The proposals of a box head with class-specific box regression: a positive's box is decoded from the deltas
    of its ground-truth class.

    Args:
        box2box_transform: the head's box coding.
        class_deltas: (R, K, 4) the predicted deltas of every proposal and class.
        proposal_boxes: (R, 4).
        gt_boxes: (R, 4) the matched box of every proposal (any box for background proposals).
        gt_classes: (R,) the class of every proposal (K for background, -1 for ignored).
        smooth_l1_beta: beta of the head's Smooth L1 on the encoded deltas (:meth:`encoded_box_loss`).
    """

    def __init__(
        self,
        box2box_transform: Any,
        class_deltas: Tensor,
        proposal_boxes: Tensor,
        gt_boxes: Tensor,
        gt_classes: Tensor,
        smooth_l1_beta: float = 0.0,
    ):
        self.box2box_transform = box2box_transform
        self.class_deltas = class_deltas
        self.proposal_boxes = proposal_boxes
        self.gt_boxes = gt_boxes
        self.gt_classes = gt_classes
        self.smooth_l1_beta = smooth_l1_beta

    def decoded_boxes(self, positives: PositiveTargets) -> Tuple[Tensor, Tensor]:
        deltas = self.class_deltas[positives.row, positives.label]
        return self.box2box_transform.apply_deltas(deltas, self.proposal_boxes[positives.row]), self.gt_boxes[
            positives.row
        ]

    def encoded_box_loss(self, positives: PositiveTargets) -> Tensor:
        targets = self.box2box_transform.get_deltas(self.proposal_boxes[positives.row], self.gt_boxes[positives.row])
        deltas = self.class_deltas[positives.row, positives.label]
        return smooth_l1_loss(deltas, targets, self.smooth_l1_beta).mean(dim=1)

    @torch.no_grad()
    def row_overlaps(self) -> Tensor:
        """(R,) the IoU of every proposal's box decoded from its GT class's deltas with its matched box (any class for
        background proposals)."""
        rows = torch.arange(len(self.gt_classes), device=self.gt_classes.device)
        deltas = self.class_deltas[rows, self.gt_classes.clamp(0, self.class_deltas.shape[1] - 1)]
        return paired_iou_giou(self.box2box_transform.apply_deltas(deltas, self.proposal_boxes), self.gt_boxes)[0]

    num_levels = 1

    def levels(self, positives: PositiveTargets) -> Tensor:
        """(P,) zeros: the proposals of a box head are one level."""
        return torch.zeros_like(positives.row)
