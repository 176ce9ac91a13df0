"""Localisation errors E_loc of positives (paper Sec. 2.2 and App. E line 12)."""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["paired_iou_giou", "loc_error"]

LOC_ERROR_KINDS = ("giou", "iou")


def _empty_if_inverted(boxes: Tensor) -> Tensor:
    """(x1, y1, max(x1, x2), max(y1, y2)): a box with x2 < x1 or y2 < y1 becomes empty in that
    direction (zero width or height at its x1 / y1)."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([x1, y1, torch.max(x1, x2), torch.max(y1, y2)], dim=-1)


def paired_iou_giou(boxes: Tensor, other: Tensor, eps: float = 1e-7) -> Tuple[Tensor, Tensor]:
    """IoU and GIoU of each pair of xyxy boxes, (K, 4) x (K, 4) -> (K,), (K,).

    Written without boolean indexing, so it needs no host synchronisation; ``eps`` keeps
    zero-area boxes finite (IoU 0, GIoU 0 for two identical points) with finite gradients.
    An inverted box (x2 < x1 or y2 < y1) counts as empty in the inverted direction, so IoU is
    in [0, 1] and GIoU in [-1, 1] for every finite input. Half-precision boxes are computed in
    float32 (areas of ~1000 px boxes overflow float16); the results have that wider dtype.
    """
    dtype = torch.promote_types(torch.promote_types(boxes.dtype, other.dtype), torch.float32)
    x1, y1, x2, y2 = _empty_if_inverted(boxes.to(dtype)).unbind(-1)
    gx1, gy1, gx2, gy2 = _empty_if_inverted(other.to(dtype)).unbind(-1)
    inter_w = (torch.min(x2, gx2) - torch.max(x1, gx1)).clamp(min=0)
    inter_h = (torch.min(y2, gy2) - torch.max(y1, gy1)).clamp(min=0)
    intersection = inter_w * inter_h
    union = (x2 - x1) * (y2 - y1) + (gx2 - gx1) * (gy2 - gy1) - intersection
    iou = intersection / (union + eps)
    enclosing = (torch.max(x2, gx2) - torch.min(x1, gx1)) * (torch.max(y2, gy2) - torch.min(y1, gy1))
    giou = iou - (enclosing - union) / (enclosing + eps)
    return iou, giou


def loc_error(pred_boxes: Tensor, gt_boxes: Tensor, kind: str = "giou", tau: float = 0.5) -> Tensor:
    """Normalised localisation error of each positive, in [0, 1] for matched boxes.

    ``"iou"``: (1 - IoU) / (1 - tau) (Sec. 2.2); ``"giou"``: ((1 - GIoU) / 2) / (1 - tau)
    (App. E line 12). ``tau`` is the positive-labelling IoU threshold. For any finite boxes the
    error is in [0, 1 / (1 - tau)]: an inverted box (x2 < x1 or y2 < y1) is empty in the inverted
    direction (IoU 0; a fully inverted prediction of a box is no match). Float16 / bfloat16 boxes
    give float32 errors (see :func:`paired_iou_giou`).

    Args:
        pred_boxes, gt_boxes: (P, 4) xyxy boxes, pred_boxes[i] matched to gt_boxes[i].
        kind: "giou" or "iou".
        tau: in [0, 1).
    """
    if kind not in LOC_ERROR_KINDS:
        raise ValueError(f"loc_error kind must be one of {LOC_ERROR_KINDS}, got {kind!r}")
    if not 0.0 <= tau < 1.0:
        raise ValueError(f"tau must be in [0, 1), got {tau}")
    if pred_boxes.shape != gt_boxes.shape or pred_boxes.shape[-1:] != (4,):
        raise ValueError(
            f"pred_boxes and gt_boxes must both be (P, 4), got {tuple(pred_boxes.shape)} and {tuple(gt_boxes.shape)}"
        )
    iou, giou = paired_iou_giou(pred_boxes, gt_boxes)
    error = 1.0 - iou if kind == "iou" else (1.0 - giou) / 2.0
    return error / (1.0 - tau)
