"""The per-image dicts of :class:`~alrp_d2.lrp.LRP` (torchmetrics' ``MeanAveragePrecision`` format) checked and
turned into numpy arrays: predictions ``boxes`` (N x 4, absolute ``[x1, y1, x2, y2]``) or ``masks`` (N x H x W),
``scores`` (N), ``labels`` (N); targets the same without scores, with optional ``iscrowd`` (M). For keypoints
(:mod:`.keypoint_inputs`), predictions ``keypoints`` (N x K x 2 or 3) and targets ``keypoints`` (M x K x 3), ``boxes``
and an optional ``area`` (M). Every error names the list, the image index and the key."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from pycocotools import mask as mask_utils

from .annotations import xyxy_to_xywh
from .keypoint_inputs import prediction_keypoints, target_keypoints

ImageArrays = Dict[str, Any]


def _as_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _key(entry: Mapping[str, Any], key: str, where: str) -> np.ndarray:
    if key not in entry:
        raise ValueError(f"{where} has no {key!r} (keys: {sorted(entry)})")
    return _as_numpy(entry[key])


def _labels(entry: Mapping[str, Any], where: str) -> np.ndarray:
    labels = _key(entry, "labels", where)
    if labels.ndim != 1:
        raise ValueError(f"{where}['labels'] must have shape (N,), got {tuple(labels.shape)}")
    if labels.dtype.kind not in "iub" and not np.all(np.isfinite(labels) & (labels == np.round(labels))):
        raise ValueError(f"{where}['labels'] must hold integer class labels, got {labels.dtype} values")
    return labels.astype(np.int64)


def _boxes(entry: Mapping[str, Any], where: str, count: int) -> np.ndarray:
    boxes = _key(entry, "boxes", where).astype(np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or len(boxes) != count:
        raise ValueError(f"{where}['boxes'] must have shape ({count}, 4) for {count} labels, got {tuple(boxes.shape)}")
    if not np.all(np.isfinite(boxes)):
        raise ValueError(f"{where}['boxes'] holds NaN or infinite coordinates")
    if np.any(boxes[:, 2:] < boxes[:, :2]):
        raise ValueError(f"{where}['boxes'] must be absolute [x1, y1, x2, y2] with x2 >= x1 and y2 >= y1")
    return xyxy_to_xywh(boxes)


def _masks(entry: Mapping[str, Any], where: str, count: int) -> List[Any]:
    masks = _key(entry, "masks", where)
    if masks.ndim != 3 or len(masks) != count:
        raise ValueError(f"{where}['masks'] must have shape ({count}, H, W) for {count} labels, got {masks.shape}")
    if masks.dtype != bool and not np.all((masks == 0) | (masks == 1)):
        raise ValueError(f"{where}['masks'] must be binary (bool, or 0 and 1)")
    return list(mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0).astype(np.uint8))))


def _regions(entry: Mapping[str, Any], where: str, count: int, iou_type: str) -> ImageArrays:
    """The boxes (XYWH) and areas, and for ``segm`` the masks as RLEs with their boxes and areas."""
    if iou_type == "bbox":
        box = _boxes(entry, where, count)
        return {"box": box, "area": box[:, 2] * box[:, 3], "masks": None}
    rles = _masks(entry, where, count)
    box = mask_utils.toBbox(rles).reshape(-1, 4) if rles else np.zeros((0, 4))
    area = mask_utils.area(rles).astype(np.float64) if rles else np.zeros(0)
    return {"box": box.astype(np.float64), "area": area, "masks": rles}


def _target_area(entry: Mapping[str, Any], where: str, count: int) -> Optional[np.ndarray]:
    if "area" not in entry:
        return None
    area = _as_numpy(entry["area"]).astype(np.float64)
    if area.shape != (count,) or not np.all(np.isfinite(area) & (area >= 0)):
        raise ValueError(f"{where}['area'] must hold a finite area >= 0 for each of its {count} labels, got {area}")
    return area


def prediction_arrays(entry: Mapping[str, Any], index: int, iou_type: str, keypoint_count: int = 0) -> ImageArrays:
    """One image's predictions (``preds[index]``) as arrays: label, score, box, area, masks (keypoints with
    ``keypoint_count`` keypoints each)."""
    where = f"preds[{index}]"
    if not isinstance(entry, Mapping):
        raise TypeError(f"{where} must be a dict, got {type(entry).__name__}")
    labels = _labels(entry, where)
    scores = _key(entry, "scores", where).astype(np.float64)
    if scores.shape != labels.shape:
        raise ValueError(f"{where}['scores'] must have shape {labels.shape} as its labels, got {scores.shape}")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"{where}['scores'] holds NaN or infinite scores")
    if iou_type == "keypoints":
        return {"label": labels, "score": scores, **prediction_keypoints(entry, where, len(labels), keypoint_count)}
    return {"label": labels, "score": scores, **_regions(entry, where, len(labels), iou_type)}


def target_arrays(entry: Mapping[str, Any], index: int, iou_type: str, keypoint_count: int = 0) -> ImageArrays:
    """One image's ground truth (``target[index]``) as arrays: label, crowd, box, area, masks (keypoints and
    num_keypoints)."""
    where = f"target[{index}]"
    if not isinstance(entry, Mapping):
        raise TypeError(f"{where} must be a dict, got {type(entry).__name__}")
    labels = _labels(entry, where)
    crowd = _as_numpy(entry["iscrowd"]) if "iscrowd" in entry else np.zeros(len(labels), dtype=np.int64)
    if crowd.shape != labels.shape or not np.all((crowd == 0) | (crowd == 1)):
        raise ValueError(f"{where}['iscrowd'] must hold 0 or 1 for each of its {len(labels)} labels, got {crowd}")
    if iou_type == "keypoints":
        boxes, area = _boxes(entry, where, len(labels)), _target_area(entry, where, len(labels))
        regions = target_keypoints(entry, where, len(labels), keypoint_count, boxes, area)
    else:
        regions = _regions(entry, where, len(labels), iou_type)
    return {"label": labels, "crowd": crowd.astype(bool), **regions}


def check_sizes(preds: ImageArrays, target: ImageArrays, index: int) -> None:
    """The masks of an image's predictions and targets must have the same height and width."""
    sizes = {tuple(rle["size"]) for rle in (preds["masks"] or []) + (target["masks"] or [])}
    if len(sizes) > 1:
        raise ValueError(f"preds[{index}] and target[{index}] hold masks of different sizes (H, W): {sorted(sizes)}")


def image_pairs(
    preds: Sequence[Mapping[str, Any]], target: Sequence[Mapping[str, Any]], iou_type: str, keypoint_count: int = 0
) -> List[Dict[str, ImageArrays]]:
    """The checked images of one ``update``: ``{"preds": ..., "target": ...}`` each (``keypoint_count`` keypoints
    per object with ``iou_type="keypoints"``)."""
    if not isinstance(preds, Sequence) or not isinstance(target, Sequence):
        raise TypeError(
            f"preds and target must be lists of per-image dicts, got {type(preds).__name__} and {type(target).__name__}"
        )
    if len(preds) != len(target):
        raise ValueError(f"preds and target must hold the same number of images, got {len(preds)} and {len(target)}")
    pairs = []
    for index, (pred, truth) in enumerate(zip(preds, target)):
        pair = {
            "preds": prediction_arrays(pred, index, iou_type, keypoint_count),
            "target": target_arrays(truth, index, iou_type, keypoint_count),
        }
        if iou_type == "segm":
            check_sizes(pair["preds"], pair["target"], index)
        pairs.append(pair)
    return pairs
