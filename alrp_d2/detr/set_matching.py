"""The Hungarian matching of every set of a training step in the own-box-term modes (``box_terms`` other than
"model"): the cost HF's matchers assign (``RTDetrHungarianMatcher``, ``DeformableDetrHungarianMatcher``), computed
for each image's queries against that image's targets only ([B, Q, T_max], the targets padded; HF builds the whole
batch's [B * Q, sum T] block and keeps its diagonal blocks), all sets' costs moved to the host in one copy, then
scipy's ``linear_sum_assignment`` per image on the [Q, T_b] block, as HF calls it.

The cost of query q and target t (Carion et al., Eq. 1 with the focal class cost of Zhu et al.):
``w_box * |b_q - b_t|_1 + w_class * c(p_q,t) - w_giou * GIoU(b_q, b_t)``, ``c = alpha (1 - p)^gamma (-log(p + 1e-8))
- (1 - alpha) p^gamma (-log(1 - p + 1e-8))`` of the sigmoid ``p`` (``-p`` of the softmax without focal cost); NaN
and infinite costs replaced by the largest float, as HF replaces them.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from .matched_queries import cxcywh_to_xyxy

__all__ = ["MatchingCost", "deformable_detr_cost", "match_sets", "matching_costs", "rt_detr_cost"]

Targets = Sequence[dict]
Indices = List[Tuple[Tensor, Tensor]]


class MatchingCost(NamedTuple):
    """The weights of a matcher's cost terms and its class cost: ``focal`` (alpha, gamma) of the sigmoid
    probabilities, or None: minus the softmax probability."""

    class_weight: float
    box_weight: float
    giou_weight: float
    focal: Optional[Tuple[float, float]]


def rt_detr_cost(config: Any) -> MatchingCost:
    """``RTDetrHungarianMatcher``'s cost of an RT-DETR config."""
    focal = (config.matcher_alpha, config.matcher_gamma) if config.use_focal_loss else None
    return MatchingCost(config.matcher_class_cost, config.matcher_bbox_cost, config.matcher_giou_cost, focal)


def deformable_detr_cost(config: Any) -> MatchingCost:
    """``DeformableDetrHungarianMatcher``'s cost of a Deformable-DETR config (alpha 0.25, gamma 2, fixed by HF)."""
    return MatchingCost(config.class_cost, config.bbox_cost, config.giou_cost, (0.25, 2.0))


def pairwise_giou(boxes: Tensor, targets: Tensor) -> Tensor:
    """(B, Q, T) GIoU of the (B, Q, 4) xyxy ``boxes`` with the (B, T, 4) xyxy ``targets`` of the same image."""
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    target_area = (targets[..., 2] - targets[..., 0]) * (targets[..., 3] - targets[..., 1])
    low, high = boxes[:, :, None, :2], boxes[:, :, None, 2:]
    target_low, target_high = targets[:, None, :, :2], targets[:, None, :, 2:]
    overlap = (torch.min(high, target_high) - torch.max(low, target_low)).clamp(min=0)
    intersection = overlap[..., 0] * overlap[..., 1]
    union = area[:, :, None] + target_area[:, None, :] - intersection
    iou = intersection / union
    enclosing_size = (torch.max(high, target_high) - torch.min(low, target_low)).clamp(min=0)
    enclosing = enclosing_size[..., 0] * enclosing_size[..., 1]
    return iou - (enclosing - union) / enclosing


@torch.no_grad()
def matching_costs(cost: MatchingCost, logits: Tensor, boxes: Tensor, targets: Targets) -> Tensor:
    """(B, Q, T_max) the cost (module docstring) of each image's queries (``logits`` [B, Q, C], ``boxes`` [B, Q, 4]
    normalised cxcywh) against its own targets, padded to the largest number of targets ``T_max``."""
    batch, queries, _ = logits.shape
    labels = pad_sequence([target["class_labels"].to(logits.device) for target in targets], batch_first=True)
    target_boxes = pad_sequence([target["boxes"].to(boxes) for target in targets], batch_first=True)
    probabilities = logits.sigmoid() if cost.focal is not None else logits.softmax(-1)
    matched = probabilities.gather(2, labels[:, None, :].expand(batch, queries, labels.shape[1]))
    if cost.focal is None:
        class_cost = -matched
    else:
        alpha, gamma = cost.focal
        negative = (1 - alpha) * (matched**gamma) * (-(1 - matched + 1e-8).log())
        positive = alpha * ((1 - matched) ** gamma) * (-(matched + 1e-8).log())
        class_cost = positive - negative
    box_cost = torch.cdist(boxes, target_boxes, p=1)
    giou = pairwise_giou(cxcywh_to_xyxy(boxes), cxcywh_to_xyxy(target_boxes))
    total = cost.box_weight * box_cost + cost.class_weight * class_cost + cost.giou_weight * -giou
    largest = torch.finfo(total.dtype).max
    return torch.nan_to_num(total, nan=largest, posinf=largest, neginf=largest)


def match_sets(cost: MatchingCost, sets: Sequence[Tuple[Tensor, Tensor]], targets: Targets) -> List[Indices]:
    """The Hungarian matching of every (logits, boxes) set with ``targets`` (HF's per-image ``(query indices, target
    indices)``, CPU int64): every set's costs in one host copy, one assignment per image."""
    if not sets:
        return []
    counts = [len(target["class_labels"]) for target in targets]
    costs = [matching_costs(cost, logits, boxes, targets) for logits, boxes in sets]
    on_host = torch.cat([set_costs.flatten() for set_costs in costs]).cpu().split([c.numel() for c in costs])
    matchings = []
    for set_costs, shape in zip(on_host, (c.shape for c in costs)):
        images = set_costs.view(shape)
        assigned = [linear_sum_assignment(image[:, :count]) for image, count in zip(images, counts)]
        matchings.append(
            [(torch.as_tensor(q, dtype=torch.int64), torch.as_tensor(t, dtype=torch.int64)) for q, t in assigned]
        )
    return matchings
