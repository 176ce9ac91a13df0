"""A head's rows with given predicted and matched boxes: the boxes the ranking criteria read, for tests that call a
:class:`~alrp_d2.modeling.HeadRankingLoss` on chosen predictions."""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from alrp_d2.criteria import PositiveTargets
from alrp_d2.losses.localisation_error import paired_iou_giou


class GivenBoxes:
    """(rows, 4) predicted boxes (differentiable) and (rows, 4) matched boxes; one pyramid level unless ``levels``
    gives each row's."""

    def __init__(self, pred_boxes: Tensor, gt_boxes: Tensor, levels: Tensor | None = None, num_levels: int = 1):
        self.pred_boxes = pred_boxes
        self.gt_boxes = gt_boxes
        self.row_levels = torch.zeros(len(pred_boxes), dtype=torch.long) if levels is None else levels
        self.num_levels = num_levels

    def decoded_boxes(self, positives: PositiveTargets) -> Tuple[Tensor, Tensor]:
        return self.pred_boxes[positives.row], self.gt_boxes[positives.row]

    def encoded_box_loss(self, positives: PositiveTargets) -> Tensor:
        return (self.pred_boxes[positives.row] - self.gt_boxes[positives.row]).abs().mean(dim=1)

    def row_overlaps(self) -> Tensor:
        return paired_iou_giou(self.pred_boxes.detach(), self.gt_boxes)[0]

    def levels(self, positives: PositiveTargets) -> Tensor:
        return self.row_levels[positives.row]
