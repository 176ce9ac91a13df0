"""LRP of detections on a COCO dataset, evaluated as ``COCOeval`` would: the images and categories of the ground
truth, crowds ignored, at most 100 detections per image and category. The ground truth is a pycocotools ``COCO``
object; the detections are the result of its ``loadRes`` (:func:`evaluate_coco`) or a list of COCO results
(:func:`evaluate_results`, the command's route, which builds no second ``COCO`` object). Every entry is checked
(:mod:`.coco_entries`) and a bad one named by its id and key; repeated ground-truth ids are refused, as COCOeval
matches by id."""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from .annotations import Detections, GroundTruths
from .coco_entries import detection_problem, first_repeat, ground_truth_problem, is_int, is_number
from .lrp_metric import LRP_TAU
from .matching import IOU_TYPES, candidate_matches
from .results import lrp_results

MAX_DETECTIONS = 100


def _annotations(coco: COCO, image_ids: List[int]) -> List[Dict[str, Any]]:
    """The annotations of the images, image by image (each in the file's order)."""
    return list(chain.from_iterable(coco.imgToAnns.get(image_id, ()) for image_id in image_ids))


def _named(entry: Any, index: int, what: str) -> str:
    """``what`` and the entry's id, or its position among the evaluated entries when it has none."""
    if isinstance(entry, dict) and "id" in entry:
        return f"{what} {entry['id']!r}"
    return f"{what} #{index} (it has no 'id')"


def _image_sizes(coco_gt: COCO) -> Dict[Any, Any]:
    return {image_id: (image.get("height"), image.get("width")) for image_id, image in coco_gt.imgs.items()}


def check_ground_truths(anns: Sequence[Any], coco_gt: COCO, iou_type: str) -> None:
    """Each ground-truth annotation well-formed (a ValueError naming its id and key) and the ids distinct."""
    sizes, categories = _image_sizes(coco_gt), set(coco_gt.cats)
    for index, ann in enumerate(anns):
        problem = ground_truth_problem(ann, sizes, categories, iou_type)
        if not problem and not is_int(ann.get("id")):
            problem = f"'id' must be an integer, got {ann.get('id')!r}"
        if problem:
            raise ValueError(f"{_named(ann, index, 'ground-truth annotation')}: {problem}")
    repeat = first_repeat([ann.get("id") for ann in anns])
    if repeat is not None:
        raise ValueError(
            f"two ground-truth annotations have the id {anns[repeat].get('id')!r}: COCOeval matches ground truths by "
            "id, so its results would differ; give each annotation its own id"
        )


def check_detections(dets: Sequence[Any], coco_gt: COCO, iou_type: str) -> None:
    """Each detection well-formed, of an image and a category of ``coco_gt`` (a ValueError naming its id and key)."""
    sizes, categories = _image_sizes(coco_gt), set(coco_gt.cats)
    for index, det in enumerate(dets):
        problem = detection_problem(det, sizes, categories, iou_type)
        if problem:
            raise ValueError(f"{_named(det, index, 'detection')}: {problem}")


def _column(records: List[Dict[str, Any]], key: str, dtype: Any) -> np.ndarray:
    return np.fromiter(map(itemgetter(key), records), dtype=dtype, count=len(records))


def _boxes(records: List[Dict[str, Any]]) -> np.ndarray:
    boxes = np.empty((len(records), 4), dtype=np.float64)
    for row, record in zip(boxes, records):
        row[:] = record["bbox"]
    return boxes


def _indices(values: np.ndarray, known: List[int]) -> np.ndarray:
    return np.searchsorted(np.asarray(known, dtype=np.int64), values)


def ground_truth_arrays(coco_gt: COCO, anns: List[Dict[str, Any]], image_ids: List[int], category_ids: List[int],
                        iou_type: str) -> GroundTruths:  # fmt: skip
    """The checked ground truths as flat arrays (image and class indices)."""
    return GroundTruths(
        image=_indices(_column(anns, "image_id", np.int64), image_ids),
        label=_indices(_column(anns, "category_id", np.int64), category_ids),
        crowd=_column(anns, "iscrowd", np.int64).astype(bool),
        box=_boxes(anns),
        area=_column(anns, "area", np.float64),
        masks=[coco_gt.annToRLE(ann) for ann in anns] if iou_type == "segm" else None,
    )


def detection_arrays(dets: List[Dict[str, Any]], masks: Any, area: np.ndarray, boxes: np.ndarray,
                     image_ids: List[int], category_ids: List[int]) -> Detections:  # fmt: skip
    """The checked detections as flat arrays, with their masks (segm), areas and boxes."""
    return Detections(
        image=_indices(_column(dets, "image_id", np.int64), image_ids),
        label=_indices(_column(dets, "category_id", np.int64), category_ids),
        score=_column(dets, "score", np.float64),
        box=boxes,
        area=area,
        masks=masks,
    )


def _evaluate(coco_gt: COCO, dets: Detections, iou_type: str, max_detections: int) -> Dict[str, Any]:
    image_ids, category_ids = sorted(coco_gt.getImgIds()), sorted(coco_gt.getCatIds())
    anns = _annotations(coco_gt, image_ids)
    check_ground_truths(anns, coco_gt, iou_type)
    gts = ground_truth_arrays(coco_gt, anns, image_ids, category_ids, iou_type)
    candidates = candidate_matches(dets, gts, len(category_ids), iou_type, max_detections, LRP_TAU)
    return lrp_results(candidates, category_ids)


def _check_iou_type(iou_type: str) -> None:
    if iou_type not in IOU_TYPES:
        raise ValueError(f"iou_type must be one of {IOU_TYPES}, got {iou_type!r}")


def evaluate_coco(
    coco_gt: COCO, coco_dt: COCO, iou_type: str = "bbox", max_detections: int = MAX_DETECTIONS
) -> Dict[str, Any]:
    """oLRP, its components, AP90, rho and the per-class results (:mod:`.results`; ``classes`` are the category ids)
    of the detections ``coco_dt`` (``coco_gt.loadRes(...)``) on ``coco_gt`` (``iou_type`` "bbox" or "segm": the
    boxes' or the masks' IoUs). Equal to :class:`~alrp_d2.evaluation.COCOLRPEvaluator`'s metrics on the same
    detections. A malformed annotation or detection (a missing key, a box of 3 numbers, a string for a number), a
    detection of an image or a category that the ground truth lacks, or two ground truths with one id: a ValueError
    naming it."""
    _check_iou_type(iou_type)
    image_ids, category_ids = sorted(coco_gt.getImgIds()), sorted(coco_gt.getCatIds())
    dets = list(coco_dt.anns.values())
    check_detections(dets, coco_gt, iou_type)
    dets = _annotations(coco_dt, image_ids)
    masks, boxes = _regions(dets, coco_dt, iou_type)
    arrays = detection_arrays(dets, masks, _loaded_areas(dets), boxes, image_ids, category_ids)
    return _evaluate(coco_gt, arrays, iou_type, max_detections)


def _loaded_areas(dets: List[Dict[str, Any]]) -> np.ndarray:
    """The ``area`` that ``loadRes`` gave each detection (COCOeval's, for the area range 'all')."""
    for index, det in enumerate(dets):
        if not is_number(det.get("area")) or det["area"] < 0:
            raise ValueError(f"{_named(det, index, 'detection')}: 'area' must be a finite number >= 0, got "
                             f"{det.get('area')!r}")  # fmt: skip
    return _column(dets, "area", np.float64)


def _regions(dets: List[Dict[str, Any]], coco: COCO, iou_type: str) -> Tuple[Optional[List[Any]], np.ndarray]:
    """The detections' masks (RLEs; None for boxes) and boxes (XYWH; a mask's bounding box)."""
    if iou_type == "bbox":
        return None, _boxes(dets)
    masks = [coco.annToRLE(det) for det in dets]
    return masks, np.asarray(mask_utils.toBbox(masks), dtype=np.float64).reshape(-1, 4) if masks else np.zeros((0, 4))


def evaluate_results(
    coco_gt: COCO, results: List[Dict[str, Any]], iou_type: str = "bbox", max_detections: int = MAX_DETECTIONS
) -> Dict[str, Any]:
    """:func:`evaluate_coco` of a list of COCO results (``image_id``, ``category_id``, ``score`` and ``bbox`` or an
    RLE ``segmentation``), already checked (:func:`check_detections`), as ``coco_gt.loadRes(results)`` would give
    them: a box's area is its width x height, a mask's its pixels'."""
    _check_iou_type(iou_type)
    image_ids, category_ids = sorted(coco_gt.getImgIds()), sorted(coco_gt.getCatIds())
    masks, boxes = _regions(results, coco_gt, iou_type)
    if masks is None:
        area = boxes[:, 2] * boxes[:, 3]
    else:
        area = np.asarray(mask_utils.area(masks), dtype=np.float64).reshape(-1) if masks else np.zeros(0)
    arrays = detection_arrays(results, masks, area, boxes, image_ids, category_ids)
    return _evaluate(coco_gt, arrays, iou_type, max_detections)
