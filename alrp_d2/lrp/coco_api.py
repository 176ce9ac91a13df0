"""LRP of detections on a COCO dataset given as pycocotools ``COCO`` objects (the ground truth and the result of its
``loadRes``), evaluated as ``COCOeval`` would: the images and categories of the ground truth, crowds (and for keypoints
objects without labelled keypoints) ignored, at most 100 detections per image and category (20 for keypoints)."""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any, Dict, List, Optional

import numpy as np
from pycocotools.coco import COCO

from .annotations import Detections, GroundTruths
from .keypoint_inputs import KeypointSigmas, checked_sigmas, coco_keypoints, coco_num_keypoints, sigmas_of_classes
from .lrp_metric import LRP_TAU
from .matching import COCO_MAX_DETECTIONS, IOU_TYPES, candidate_matches
from .results import lrp_results


def _annotations(coco: COCO, image_ids: List[int], category_ids: List[int]) -> List[Dict[str, Any]]:
    """The annotations of the images and categories, in COCOeval's order (image by image, in the file's order)."""
    wanted = set(category_ids)
    per_image = (coco.imgToAnns.get(image_id, ()) for image_id in image_ids)
    return [ann for ann in chain.from_iterable(per_image) if ann["category_id"] in wanted]


def _column(records: List[Dict[str, Any]], key: str, dtype: Any, what: str) -> np.ndarray:
    try:
        return np.fromiter(map(itemgetter(key), records), dtype=dtype, count=len(records))
    except KeyError:
        missing = next(r for r in records if key not in r)
        raise ValueError(f"{what} {missing.get('id')!r} has no {key!r}") from None


def _boxes(records: List[Dict[str, Any]], what: str) -> np.ndarray:
    boxes = np.asarray([r["bbox"] for r in records], dtype=np.float64).reshape(-1, 4)
    if not np.all(np.isfinite(boxes)):
        bad = records[int(np.flatnonzero(~np.all(np.isfinite(boxes), axis=1))[0])]
        raise ValueError(f"{what} {bad.get('id')!r} has a box with a NaN or infinite coordinate: {bad['bbox']}")
    return boxes


def _indices(values: np.ndarray, known: List[int]) -> np.ndarray:
    return np.searchsorted(np.asarray(known, dtype=np.int64), values)


def _check_detections(coco_dt: COCO, image_ids: List[int], category_ids: List[int]) -> None:
    images, categories = set(image_ids), set(category_ids)
    for ann in coco_dt.anns.values():
        if ann["image_id"] not in images or ann["category_id"] not in categories:
            raise ValueError(
                f"detection {ann['id']} has image_id {ann['image_id']!r} and category_id {ann['category_id']!r}, "
                "not an image and a category of the ground truth"
            )


def _keypoint_columns(anns: List[Dict[str, Any]], sigmas: Optional[np.ndarray], what: str) -> Dict[str, np.ndarray]:
    """The ``keypoints`` (and the ground truths' ``num_keypoints``) of keypoint evaluation; none otherwise."""
    if sigmas is None:
        return {}
    columns = {"keypoints": coco_keypoints(anns, sigmas.shape[1], what)}
    return {**columns, "num_keypoints": coco_num_keypoints(anns)} if what == "annotation" else columns


def coco_ground_truths(
    coco_gt: COCO, image_ids: List[int], category_ids: List[int], iou_type: str, sigmas: Optional[np.ndarray] = None
) -> GroundTruths:
    """The ground truths of the images and categories as flat arrays (image and class indices; keypoints with
    ``sigmas``)."""
    anns = _annotations(coco_gt, image_ids, category_ids)
    return GroundTruths(
        image=_indices(_column(anns, "image_id", np.int64, "annotation"), image_ids),
        label=_indices(_column(anns, "category_id", np.int64, "annotation"), category_ids),
        crowd=_column(anns, "iscrowd", np.int64, "annotation").astype(bool),
        box=_boxes(anns, "annotation"),
        area=_column(anns, "area", np.float64, "annotation"),
        masks=[coco_gt.annToRLE(ann) for ann in anns] if iou_type == "segm" else None,
        **_keypoint_columns(anns, sigmas, "annotation"),
    )


def coco_detections(
    coco_dt: COCO, image_ids: List[int], category_ids: List[int], iou_type: str, sigmas: Optional[np.ndarray] = None
) -> Detections:
    """The detections (a ``loadRes`` result) on the images and categories as flat arrays."""
    _check_detections(coco_dt, image_ids, category_ids)
    anns = _annotations(coco_dt, image_ids, category_ids)
    scores = _column(anns, "score", np.float64, "detection")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"detection {anns[int(np.flatnonzero(~np.isfinite(scores))[0])]['id']} has a non-finite score")
    return Detections(
        image=_indices(_column(anns, "image_id", np.int64, "detection"), image_ids),
        label=_indices(_column(anns, "category_id", np.int64, "detection"), category_ids),
        score=scores,
        box=_boxes(anns, "detection"),
        area=_column(anns, "area", np.float64, "detection"),
        masks=[coco_dt.annToRLE(ann) for ann in anns] if iou_type == "segm" else None,
        **_keypoint_columns(anns, sigmas, "detection"),
    )


def evaluate_coco(
    coco_gt: COCO,
    coco_dt: COCO,
    iou_type: str = "bbox",
    max_detections: Optional[int] = None,
    keypoint_sigmas: KeypointSigmas = None,
) -> Dict[str, Any]:
    """oLRP, its components, AP90, rho and the per-class results (:mod:`.results`; ``classes`` are the category ids)
    of the detections ``coco_dt`` on ``coco_gt`` (``iou_type`` "bbox", "segm" or "keypoints": the boxes' or the
    masks' IoUs, or OKS with ``keypoint_sigmas``, one sequence or one per category id, COCO's person sigmas by
    default), at most ``max_detections`` per image and category (COCOeval's 100, 20 for keypoints). Equal to
    :class:`~alrp_d2.evaluation.COCOLRPEvaluator`'s metrics on the same detections; a detection of an image or a
    category that the ground truth lacks is a ValueError naming it."""
    if iou_type not in IOU_TYPES:
        raise ValueError(f"iou_type must be one of {IOU_TYPES}, got {iou_type!r}")
    image_ids, category_ids = sorted(coco_gt.getImgIds()), sorted(coco_gt.getCatIds())
    checked = checked_sigmas(keypoint_sigmas, iou_type)
    sigmas = None if checked is None else sigmas_of_classes(checked, category_ids)
    gts = coco_ground_truths(coco_gt, image_ids, category_ids, iou_type, sigmas)
    dets = coco_detections(coco_dt, image_ids, category_ids, iou_type, sigmas)
    limit = COCO_MAX_DETECTIONS[iou_type] if max_detections is None else max_detections
    candidates = candidate_matches(dets, gts, len(category_ids), iou_type, limit, LRP_TAU, sigmas)
    return lrp_results(candidates, category_ids)
