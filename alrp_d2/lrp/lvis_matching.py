"""LVIS's federated matching of detections to ground truths (the LVIS API's ``LVISResults`` and
``LVISEval.evaluate``, as the official LRP-Error fork runs them), on flat arrays:

- at most ``max_detections`` detections an image (300 in LVIS), the highest scores (ties in the given order);
- objects and detections of area 0 left out (LVIS's annotation filter keeps areas strictly above 0);
- federated labels: a detection of a category that the image neither has objects of nor lists in its
  ``neg_category_ids`` is left out; an unmatched detection of a category in its ``not_exhaustive_category_ids`` is
  ignored (neither a TP nor an FP);
- no crowds (LVIS has none: an ``iscrowd`` key is not read); an object marked ``ignore`` is matched after the regular
  ones and its detection ignored, as COCO's crowds but taken by one detection only;
- per area range, objects outside it ignored and unmatched detections outside it ignored.

Detections are matched greedily by descending score at IoU 0.5 (:func:`~.greedy_matching.greedy_assignment`) on the
IoUs of :func:`~.matching.candidate_matches`."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from pycocotools import mask as mask_utils

from .annotations import Detections, GroundTruths
from .greedy_matching import greedy_assignment, matched_ious
from .lrp_metric import LRP_TAU, DetectionMatches
from .lvis_files import results_have_boxes
from .matching import CandidateMatches, candidate_matches

#: LVIS's area ranges (``Params.area_rng``).
LVIS_AREA_RANGES = {
    "all": (0.0, 1e5**2),
    "small": (0.0, 32.0**2),
    "medium": (32.0**2, 96.0**2),
    "large": (96.0**2, 1e5**2),
}
#: LVIS's detections per image (``LVISResults``'s ``max_dets``).
LVIS_MAX_DETECTIONS = 300


def _indices(values: Sequence[int], known: np.ndarray) -> np.ndarray:
    return np.searchsorted(known, np.asarray(values, dtype=np.int64).reshape(-1))


def _column(records: List[Dict[str, Any]], key: str, dtype: Any) -> np.ndarray:
    return np.asarray([record[key] for record in records], dtype=dtype).reshape(len(records))


def _boxes(records: List[Dict[str, Any]]) -> np.ndarray:
    return np.asarray([record.get("bbox", (0.0, 0.0, 0.0, 0.0)) for record in records], dtype=np.float64).reshape(-1, 4)


def _ground_truth_mask(ann: Dict[str, Any], height: int, width: int) -> Any:
    """The annotation's RLE (polygons merged, an uncompressed RLE compressed), as LVIS's ``ann_to_rle``."""
    segmentation = ann["segmentation"]
    if isinstance(segmentation, list):
        return mask_utils.merge(mask_utils.frPyObjects(segmentation, height, width))
    if isinstance(segmentation["counts"], list):
        return mask_utils.frPyObjects(segmentation, height, width)
    return segmentation


def ground_truths(
    content: Dict[str, Any], image_ids: np.ndarray, category_ids: np.ndarray, iou_type: str
) -> Tuple[GroundTruths, np.ndarray]:
    """The objects of area above 0, sorted by image and category (each pair's in the file's order), without crowds,
    and their ``ignore`` flags."""
    anns = [ann for ann in content["annotations"] if ann["area"] > 0]
    image = _indices([ann["image_id"] for ann in anns], image_ids)
    label = _indices([ann["category_id"] for ann in anns], category_ids)
    order = np.lexsort((label, image))
    anns = [anns[i] for i in order.tolist()]
    masks = None
    if iou_type == "segm":
        sizes = {im["id"]: (im["height"], im["width"]) for im in content["images"]}
        masks = [_ground_truth_mask(ann, *sizes[ann["image_id"]]) for ann in anns]
    gts = GroundTruths(
        image=image[order],
        label=label[order],
        crowd=np.zeros(len(anns), dtype=bool),
        box=_boxes(anns),
        area=_column(anns, "area", np.float64),
        masks=masks,
    )
    return gts, np.asarray([bool(ann.get("ignore", 0)) for ann in anns], dtype=bool).reshape(len(anns))


def _mask_areas(masks: List[Any]) -> np.ndarray:
    """The RLEs' areas, by 255 at a time: pycocotools' ``area`` of more RLEs overflows under numpy 2 (it sizes its
    output with a uint8)."""
    chunks = [np.asarray(mask_utils.area(masks[i : i + 255]), dtype=np.float64) for i in range(0, len(masks), 255)]
    return np.concatenate(chunks)


def _first_per_image(image: np.ndarray, score: np.ndarray, max_detections: Optional[int]) -> np.ndarray:
    """Indices (ascending) of the ``max_detections`` highest-scored detections of every image, ties in the given
    order (``LVISResults.limit_dets_per_image``); all of them when ``max_detections`` is None."""
    if max_detections is None:
        return np.arange(len(score))
    order = np.lexsort((-score, image))
    sorted_image = image[order]
    starts = np.flatnonzero(np.r_[True, sorted_image[1:] != sorted_image[:-1]]) if len(order) else order
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return np.sort(order[rank < max_detections])


def detections(
    results: List[Dict[str, Any]],
    image_ids: np.ndarray,
    category_ids: np.ndarray,
    iou_type: str,
    max_detections: Optional[int],
) -> Detections:
    """The detections LVIS evaluates, in the given order: at most ``max_detections`` an image, area above 0 (the
    box's when the results have boxes, :func:`~.lvis_files.results_have_boxes`, else the mask's)."""
    boxed = results_have_boxes(results)
    image = _indices([r["image_id"] for r in results], image_ids)
    score = _column(results, "score", np.float64)
    kept = _first_per_image(image, score, max_detections)
    results = [results[i] for i in kept.tolist()]
    box = _boxes(results)
    masks = [r["segmentation"] for r in results] if iou_type == "segm" else None
    if boxed or not masks:
        area = box[:, 2] * box[:, 3]
    else:
        area = _mask_areas(masks)
    label = _indices([r["category_id"] for r in results], category_ids)
    positive = area > 0
    return Detections(
        image=image[kept][positive],
        label=label[positive],
        score=score[kept][positive],
        box=box[positive],
        area=area[positive],
        masks=None if masks is None else [m for m, keep in zip(masks, positive.tolist()) if keep],
    )


def _pair_keys(image: np.ndarray, label: np.ndarray, num_classes: int) -> np.ndarray:
    return image.astype(np.int64) * num_classes + label.astype(np.int64)


def _image_label_keys(content: Dict[str, Any], key: str, image_ids: np.ndarray, category_ids: np.ndarray) -> np.ndarray:
    """The (image, category) pair keys of every image's ``key`` list (e.g. its negative categories)."""
    images = content["images"]
    counts = [len(image[key]) for image in images]
    image = np.repeat(_indices([image["id"] for image in images], image_ids), counts)
    label = _indices([c for image in images for c in image[key]], category_ids)
    return _pair_keys(image, label, len(category_ids))


def federated_candidates(
    content: Dict[str, Any],
    results: List[Dict[str, Any]],
    iou_type: str,
    max_detections: Optional[int],
) -> Tuple[CandidateMatches, np.ndarray, np.ndarray]:
    """The candidate matches (IoU >= 0.5) of the detections LVIS evaluates on the checked ``content``, with each
    object's ``ignore`` flag and whether each evaluated detection's category is not exhaustive in its image."""
    image_ids = np.sort(np.asarray([image["id"] for image in content["images"]], dtype=np.int64))
    category_ids = np.sort(np.asarray([category["id"] for category in content["categories"]], dtype=np.int64))
    num_classes = len(category_ids)
    gts, ignore = ground_truths(content, image_ids, category_ids, iou_type)
    dets = detections(results, image_ids, category_ids, iou_type, max_detections)
    negative = _image_label_keys(content, "neg_category_ids", image_ids, category_ids)
    labelled = np.concatenate([negative, _pair_keys(gts.image, gts.label, num_classes)])
    kept = np.flatnonzero(np.isin(_pair_keys(dets.image, dets.label, num_classes), labelled))
    dets = Detections(
        dets.image[kept],
        dets.label[kept],
        dets.score[kept],
        dets.box[kept],
        dets.area[kept],
        None if dets.masks is None else [dets.masks[i] for i in kept.tolist()],
    )
    candidates = candidate_matches(dets, gts, num_classes, iou_type, max(len(kept), 1), LRP_TAU)
    not_exhaustive = np.isin(
        _pair_keys(candidates.detections.image, candidates.detections.label, num_classes),
        _image_label_keys(content, "not_exhaustive_category_ids", image_ids, category_ids),
    )
    return candidates, ignore, not_exhaustive


def federated_matches(
    candidates: CandidateMatches, ignore: np.ndarray, not_exhaustive: np.ndarray, area_range: Tuple[float, float]
) -> DetectionMatches:
    """LVIS's matching in ``area_range``: TPs and FPs (detections matched to an ignored object, and unmatched ones
    outside the range or of a not-exhaustive category, left out)."""
    dets, gts = candidates.detections, candidates.ground_truths
    low, high = area_range
    gt_ignored = ignore | (gts.area < low) | (gts.area > high)
    matched = greedy_assignment(
        candidates.edge_det, candidates.edge_gt, candidates.edge_iou, gt_ignored, gts.crowd, len(dets.score)
    )
    has_match = matched >= 0
    ignored = (dets.area < low) | (dets.area > high) | not_exhaustive
    ignored[has_match] = gt_ignored[matched[has_match]]
    counted = ~ignored
    ious = matched_ious(candidates.edge_det, candidates.edge_gt, candidates.edge_iou, matched, len(gt_ignored))
    return DetectionMatches(
        class_index=dets.label[counted],
        scores=dets.score[counted],
        is_tp=has_match[counted],
        ious=ious[counted],
        num_gt=np.bincount(gts.label[~gt_ignored], minlength=candidates.num_classes),
    )
