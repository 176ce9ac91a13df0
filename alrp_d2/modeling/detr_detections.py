"""A DETR's predictions as detectron2 ``Instances``: the top-k (query, class) pairs of every image by sigmoid score, as
Hugging Face's ``post_process_object_detection`` of RT-DETR and Deformable-DETR selects them (no NMS), with their
boxes in the image's pixels."""

from __future__ import annotations

from typing import List, Sequence

import torch
from detectron2.structures import Boxes, Instances
from torch import Tensor

from ..detr.matched_queries import cxcywh_to_xyxy

__all__ = ["top_k_detections"]


def top_k_detections(
    logits: Tensor, pred_boxes: Tensor, scales: Tensor, image_sizes: Sequence[tuple], num_detections: int
) -> List[Instances]:
    """Per image the ``num_detections`` (at most Q * C) highest sigmoid scores of ``logits`` (B, Q, C) over all
    (query, class) pairs, each with its class and its query's box of ``pred_boxes`` (B, Q, 4), normalised (cx, cy,
    w, h), times its image's row of ``scales`` (B, 4) (:func:`~alrp_d2.modeling.detr_inputs.box_scales`), clipped to
    the image (``image_sizes``: (height, width) before padding)."""
    batch, queries, num_classes = logits.shape
    scores, pairs = logits.sigmoid().flatten(1).topk(min(num_detections, queries * num_classes), dim=1)
    query = torch.div(pairs, num_classes, rounding_mode="floor")
    boxes = torch.gather(pred_boxes, 1, query.unsqueeze(-1).expand(-1, -1, 4))
    boxes = cxcywh_to_xyxy(boxes) * scales[:, None, :]
    results = []
    for image in range(batch):
        result = Instances(tuple(image_sizes[image]))
        result.pred_boxes = Boxes(boxes[image])
        result.pred_boxes.clip(result.image_size)
        result.scores = scores[image]
        result.pred_classes = pairs[image] % num_classes
        results.append(result)
    return results
