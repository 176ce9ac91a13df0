"""A transcription of BRS-DETR's per-decoder-layer loss, written here from reading BRL's
``projects/models/rank_based_co_deformable_detr_head.py`` (blisgard/BucketedRankingBasedLosses,
``RankBasedCoDeformDETRHead.loss_single`` with ``_get_target_single``), one worker, computed in float64 with the
official UNBUCKETED Rank & Sort Loss (:func:`tests.loop_reference.rank_sort_loss_loop`) in place of
``BucketedRankSort``, which equals it only at delta 0.

What the head does, step by step (and so does this transcription):

1. per image, the labels of the Q queries: the class of the matched target, ``C`` (background) for the others; all
   label weights 1; box targets and weights (1 in the 4 columns of a matched query, else 0); the box targets are the
   pixel xyxy ground truth divided by the image size, as cxcywh;
2. the predicted and target boxes in pixels (xyxy times ``[w, h, w, h]`` of the image);
3. the (B * Q, C) labels one-hot, flattened; the one-hot entries replaced by the IoU (mmdetection's
   ``bbox_overlaps``, eps 1e-6) of the matched predicted box with its target (a matched pair of IoU 0 becomes a
   negative); Rank & Sort Loss at delta 0.5, both components times the ranking weight (BRS-DETR: 2);
4. the L1 loss of the normalised cxcywh boxes over the matched queries (summed over the four, divided by the number of
   matched queries, at least 1) and the GIoU loss of the pixel boxes (mmdetection's ``GIoULoss``, eps 1e-6, the
   4-column weights averaged to one per query), each multiplied by ``(L_rank + L_sort) / value`` (the factor a
   constant; not where the value is 0): each equals the weighted Rank & Sort Loss in value.

Returns the four values and the gradients of their sum with respect to the logits (the ranking term's official
backward: only L_rank's update, times the weight) and to the predicted boxes (through the two box terms).
"""

from __future__ import annotations

from typing import Dict, Mapping, Sequence, Tuple

import torch
from torch import Tensor

from .loop_reference import rank_sort_loss_loop


def _cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def _xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


def _aligned_overlaps(boxes: Tensor, others: Tensor, mode: str, eps: float = 1e-6) -> Tensor:
    """mmdetection's ``bbox_overlaps(..., is_aligned=True)``: IoU or GIoU, union and enclosing area at least eps."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    other_area = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    top_left = torch.max(boxes[:, :2], others[:, :2])
    bottom_right = torch.min(boxes[:, 2:], others[:, 2:])
    size = (bottom_right - top_left).clamp(min=0)
    overlap = size[:, 0] * size[:, 1]
    union = torch.max(area + other_area - overlap, torch.tensor(eps, dtype=boxes.dtype))
    ious = overlap / union
    if mode == "iou":
        return ious
    enclosing_size = (torch.max(boxes[:, 2:], others[:, 2:]) - torch.min(boxes[:, :2], others[:, :2])).clamp(min=0)
    enclosing = torch.max(enclosing_size[:, 0] * enclosing_size[:, 1], torch.tensor(eps, dtype=boxes.dtype))
    return ious - (enclosing - union) / enclosing


def brs_detr_layer_loss(
    logits: Tensor,
    pred_boxes: Tensor,
    indices: Sequence[Tuple[Tensor, Tensor]],
    targets: Sequence[Mapping[str, Tensor]],
    image_sizes: Sequence[Tuple[int, int]],
    rank_weight: float = 2.0,
    delta: float = 0.5,
) -> Tuple[Dict[str, Tensor], Tensor, Tensor]:
    """BRS-DETR's ``loss_single`` of one layer on one worker (module docstring).

    Args:
        logits: (B, Q, C); pred_boxes: (B, Q, 4) normalised cxcywh; indices, targets: HF's matcher output and
            targets (normalised cxcywh); image_sizes: (height, width) of each image in pixels.

    Returns:
        ``{"rank", "sort", "bbox", "iou"}`` values, d(sum)/d logits (B, Q, C), d(sum)/d pred_boxes (B, Q, 4).
    """
    logits = logits.detach().double()
    pred_boxes = pred_boxes.detach().double().requires_grad_(True)
    batch, queries, num_classes = logits.shape

    labels, box_targets, box_weights, factors = [], [], [], []
    for (query, target), image_targets, (height, width) in zip(indices, targets, image_sizes):
        factor = torch.tensor([width, height, width, height], dtype=torch.float64)
        gt_pixels = _cxcywh_to_xyxy(image_targets["boxes"].double()) * factor
        image_labels = torch.full((queries,), num_classes, dtype=torch.long)
        image_labels[query] = image_targets["class_labels"][target].long()
        image_box_targets = torch.zeros(queries, 4, dtype=torch.float64)
        image_box_targets[query] = _xyxy_to_cxcywh(gt_pixels[target] / factor)
        image_box_weights = torch.zeros(queries, 4, dtype=torch.float64)
        image_box_weights[query] = 1.0
        labels.append(image_labels)
        box_targets.append(image_box_targets)
        box_weights.append(image_box_weights)
        factors.append(factor.repeat(queries, 1))
    labels_all = torch.cat(labels)
    bbox_targets = torch.cat(box_targets)
    bbox_weights = torch.cat(box_weights)
    pixel_factors = torch.cat(factors)

    positive_rows = torch.nonzero(labels_all < num_classes).squeeze(1)
    flat_pred = pred_boxes.reshape(-1, 4)
    boxes = _cxcywh_to_xyxy(flat_pred) * pixel_factors
    boxes_gt = _cxcywh_to_xyxy(bbox_targets) * pixel_factors

    one_hot = torch.zeros(batch * queries, num_classes, dtype=torch.float64)
    one_hot[positive_rows, labels_all[positive_rows]] = 1.0
    flat_targets = one_hot.reshape(-1)
    iou_targets = _aligned_overlaps(boxes[positive_rows].detach(), boxes_gt[positive_rows], "iou")
    flat_targets[flat_targets == 1] = iou_targets
    ranking, sorting, ranking_grad = rank_sort_loss_loop(logits.reshape(-1), flat_targets, delta)
    ranking, sorting = ranking * rank_weight, sorting * rank_weight
    logits_grad = (ranking_grad * rank_weight).reshape(batch, queries, num_classes)

    num_positives = max(float(len(positive_rows)), 1.0)
    weight_total = bbox_weights.sum()
    weight_total = weight_total if weight_total >= 1e-12 else torch.ones((), dtype=torch.float64)
    # mmdetection's L1Loss and GIoULoss with BRS-DETR's loss weights (5 and 2; the value balance cancels them).
    l1 = 5.0 * (bbox_weights * (flat_pred - bbox_targets).abs()).sum() / num_positives
    losses_bbox = (bbox_weights * l1).sum() / weight_total
    if float(losses_bbox.item()) != 0:
        losses_bbox = losses_bbox * ((ranking + sorting) / float(losses_bbox.item()))
    query_weights = bbox_weights.mean(-1)
    if bool((query_weights > 0).any()):
        giou = 2.0 * (query_weights * (1 - _aligned_overlaps(boxes, boxes_gt, "giou"))).sum() / num_positives
    else:
        giou = (boxes * query_weights.unsqueeze(1)).sum()
    losses_iou = (bbox_weights * giou).sum() / weight_total
    if float(losses_iou.item()) != 0:
        losses_iou = losses_iou * ((ranking + sorting) / float(losses_iou.item()))
    (boxes_grad,) = torch.autograd.grad(losses_bbox + losses_iou, [pred_boxes])
    values = {"rank": ranking, "sort": sorting, "bbox": losses_bbox.detach(), "iou": losses_iou.detach()}
    return values, logits_grad, boxes_grad
