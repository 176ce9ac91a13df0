"""The LRP metric object, with torchmetrics' ``MeanAveragePrecision`` conventions."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from .annotations import Detections, GroundTruths
from .image_inputs import ImageArrays, image_pairs
from .keypoint_inputs import KeypointSigmas, checked_sigmas, keypoint_count, sigmas_of_classes
from .lrp_metric import LRP_TAU
from .matching import COCO_MAX_DETECTIONS, IOU_TYPES, candidate_matches
from .results import lrp_results


def _concatenate(images: List[ImageArrays], key: str, dtype: Any) -> np.ndarray:
    return np.concatenate([image[key] for image in images]).astype(dtype) if images else np.zeros(0, dtype=dtype)


def _keypoint_rows(images: List[ImageArrays]) -> Dict[str, np.ndarray]:
    """The images' keypoints (and ground truths' ``num_keypoints``) concatenated; none without keypoints."""
    keys = [key for key in ("keypoints", "num_keypoints") if images and key in images[0]]
    return {key: np.concatenate([image[key] for image in images]) for key in keys}


def _flat_arrays(images: List[ImageArrays], classes: np.ndarray) -> Dict[str, Any]:
    """The images' rows concatenated, with their image index and class index."""
    masks = None if not images or images[0]["masks"] is None else [m for image in images for m in image["masks"]]
    counts = [len(image["label"]) for image in images]
    return {
        "image": np.repeat(np.arange(len(images)), counts),
        "label": np.searchsorted(classes, _concatenate(images, "label", np.int64)),
        "box": _concatenate(images, "box", np.float64).reshape(-1, 4),
        "area": _concatenate(images, "area", np.float64),
        "masks": masks,
        **_keypoint_rows(images),
    }


def gathered(images: List[Dict[str, ImageArrays]]) -> List[Dict[str, ImageArrays]]:
    """Every process's images, in rank order, when torch.distributed is initialised with several processes (as
    torchmetrics gathers list states); the images themselves otherwise."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return images
    per_rank: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, images)
    return [image for rank_images in per_rank for image in rank_images]


class LRP:
    """Optimal LRP (oLRP), its components, AP90, rho and the per-class oLRP and LRP-optimal score thresholds.

    ``update(preds, target)`` takes lists of per-image dicts as torchmetrics' ``MeanAveragePrecision`` does, e.g.
    Hugging Face's ``post_process_object_detection`` output as it comes: predictions ``boxes`` (absolute
    ``[x1, y1, x2, y2]``; ``masks`` N x H x W with ``iou_type="segm"``), ``scores``, ``labels``; targets ``boxes`` (or
    ``masks``), ``labels`` and optionally ``iscrowd``. With ``iou_type="keypoints"`` (torchvision's Keypoint R-CNN
    format), predictions ``keypoints`` (N x K x 2 or 3) instead of boxes, targets ``keypoints`` (M x K x 3, the third
    COCO's visibility) besides ``boxes`` and an optional ``area`` (the boxes' by default), and OKS with
    ``keypoint_sigmas`` (one sequence, or one per label; COCO's person sigmas by default) in place of IoU.
    ``compute()`` evaluates every image given since the last ``reset()`` as pycocotools' COCOeval matches them (IoU
    0.5, crowds ignored, at most ``max_detections`` per image and class: COCO's 100, 20 for keypoints) and returns
    tensors: ``oLRP``, ``oLRP_loc``, ``oLRP_FP``, ``oLRP_FN``, ``AP90`` (x100), ``rho``, and,
    aligned with ``classes`` (the labels seen, sorted), ``num_gt_per_class``, ``oLRP_per_class``, the components per
    class and ``thresholds`` (NaN where undefined).

    On several processes (``torch.distributed`` initialised), each process updates with its own images and every
    process calls ``compute()``, which gathers all images with ``all_gather_object`` and returns the same results
    on each."""

    def __init__(
        self, iou_type: str = "bbox", max_detections: Optional[int] = None, keypoint_sigmas: KeypointSigmas = None
    ):
        if iou_type not in IOU_TYPES:
            raise ValueError(f"iou_type must be one of {IOU_TYPES}, got {iou_type!r}")
        max_detections = COCO_MAX_DETECTIONS[iou_type] if max_detections is None else max_detections
        if isinstance(max_detections, bool) or not isinstance(max_detections, int) or max_detections < 1:
            raise ValueError(f"max_detections must be a positive integer, got {max_detections!r}")
        self.iou_type = iou_type
        self.max_detections = max_detections
        self._sigmas = checked_sigmas(keypoint_sigmas, iou_type)
        self._images: List[Dict[str, ImageArrays]] = []

    def update(self, preds: Sequence[Mapping[str, Any]], target: Sequence[Mapping[str, Any]]) -> None:
        """Adds the images of ``preds`` and ``target`` (same length, one dict per image); checked whole before any is
        kept."""
        keypoints = 0 if self._sigmas is None else keypoint_count(self._sigmas)
        self._images.extend(image_pairs(preds, target, self.iou_type, keypoints))

    def reset(self) -> None:
        """Forgets every image given."""
        self._images = []

    def compute(self) -> Dict[str, torch.Tensor]:
        """The results (see the class) over every image given, on every process."""
        images = gathered(self._images)
        preds = [image["preds"] for image in images]
        truths = [image["target"] for image in images]
        classes = np.unique(
            np.concatenate([_concatenate(preds, "label", np.int64), _concatenate(truths, "label", np.int64)])
        )
        pred_rows, truth_rows = _flat_arrays(preds, classes), _flat_arrays(truths, classes)
        dets = Detections(score=_concatenate(preds, "score", np.float64), **pred_rows)
        gts = GroundTruths(crowd=_concatenate(truths, "crowd", bool), **truth_rows)
        sigmas = None if self._sigmas is None else sigmas_of_classes(self._sigmas, classes.tolist())
        candidates = candidate_matches(dets, gts, len(classes), self.iou_type, self.max_detections, LRP_TAU, sigmas)
        results = lrp_results(candidates, classes.tolist())
        return {
            key: torch.tensor(value, dtype=torch.int64 if key in ("classes", "num_gt_per_class") else torch.float64)
            for key, value in results.items()
        }
