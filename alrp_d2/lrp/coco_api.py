"""LRP of detections on a COCO dataset, evaluated as ``COCOeval`` would: the images and categories of the ground
truth, crowds (and for keypoints objects without labelled keypoints) ignored, at most 100 detections per image and
category (20 for keypoints). The ground truth is a pycocotools ``COCO`` object; the detections are the result of its
``loadRes`` (:func:`evaluate_coco`) or a list of COCO results (:func:`result_detections` and
:func:`evaluate_detections`, the command's route, which builds no second ``COCO`` object). Every entry is checked
(:mod:`.coco_entries`) and a bad one named by its id and key; repeated ground-truth ids are refused, as COCOeval
looks ground truths up by id."""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from .annotations import Detections, GroundTruths
from .coco_entries import (
    BoxColumns,
    EntryError,
    box_detection_columns,
    boxed_keypoint_results,
    detection_problem,
    first_repeat,
    ground_truth_problem,
    is_int,
    is_number,
)
from .keypoint_inputs import (
    KeypointSigmas,
    checked_sigmas,
    coco_keypoints,
    keypoint_count,
    keypoints_of,
    sigmas_of_classes,
)
from .keypoint_similarity import keypoint_extent
from .lrp_metric import LRP_TAU
from .matching import COCO_MAX_DETECTIONS, IOU_TYPES, candidate_matches
from .results import lrp_results


class Regions(NamedTuple):
    """Detections' masks (RLEs; None but for segm), boxes (N x 4 XYWH) and keypoints (N x K x 3; None but for
    keypoints)."""

    masks: Optional[List[Any]]
    box: np.ndarray
    keypoints: Optional[np.ndarray] = None


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


def check_ground_truths(anns: Sequence[Any], coco_gt: COCO, iou_type: str, keypoints: int = 0) -> None:
    """Each ground-truth annotation well-formed (a ValueError naming its id and key) and the ids distinct."""
    sizes, categories = _image_sizes(coco_gt), set(coco_gt.cats)
    for index, ann in enumerate(anns):
        problem = ground_truth_problem(ann, sizes, categories, iou_type, keypoints)
        if not problem and not is_int(ann.get("id")):
            problem = f"'id' must be an integer, got {ann.get('id')!r}"
        if problem:
            raise ValueError(f"{_named(ann, index, 'ground-truth annotation')}: {problem}")
    repeat = first_repeat([ann.get("id") for ann in anns])
    if repeat is not None:
        raise ValueError(
            f"two ground-truth annotations have the id {anns[repeat].get('id')!r}: COCOeval looks ground truths up "
            "by id, so it would evaluate one of them twice and the other never; give each annotation its own id"
        )


def check_detections(
    dets: Sequence[Any], coco_gt: COCO, iou_type: str, keypoints: int = 0, boxed: bool = False
) -> None:
    """Each detection well-formed, of an image and a category of ``coco_gt`` (a ValueError naming its id and key)."""
    sizes, categories = _image_sizes(coco_gt), set(coco_gt.cats)
    for index, det in enumerate(dets):
        problem = detection_problem(det, sizes, categories, iou_type, keypoints, boxed)
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


def _keypoint_columns(anns: List[Dict[str, Any]], keypoints: int) -> Dict[str, np.ndarray]:
    """The checked ground truths' ``keypoints`` (M x K x 3) and ``num_keypoints`` for keypoint evaluation; none
    otherwise."""
    if not keypoints:
        return {}
    return {"keypoints": coco_keypoints(anns, keypoints), "num_keypoints": _column(anns, "num_keypoints", np.int64)}


def ground_truth_arrays(coco_gt: COCO, anns: List[Dict[str, Any]], image_ids: List[int], category_ids: List[int],
                        iou_type: str, keypoints: int = 0) -> GroundTruths:  # fmt: skip
    """The checked ground truths as flat arrays (image and class indices; ``keypoints`` of each for keypoints)."""
    return GroundTruths(
        image=_indices(_column(anns, "image_id", np.int64), image_ids),
        label=_indices(_column(anns, "category_id", np.int64), category_ids),
        crowd=_column(anns, "iscrowd", np.int64).astype(bool),
        box=_boxes(anns),
        area=_column(anns, "area", np.float64),
        masks=[coco_gt.annToRLE(ann) for ann in anns] if iou_type == "segm" else None,
        **_keypoint_columns(anns, keypoints),
    )


def _columns(dets: List[Dict[str, Any]], iou_type: str) -> BoxColumns:
    """The checked detections' columns (their boxes for bbox; otherwise no box: :func:`_regions` gives them)."""
    boxes = _boxes(dets) if iou_type == "bbox" else np.zeros((0, 4))
    return BoxColumns(_column(dets, "image_id", np.int64), _column(dets, "category_id", np.int64),
                      _column(dets, "score", np.float64), boxes)  # fmt: skip


def _box_columns(dets: List[Any], coco_gt: COCO) -> Optional[BoxColumns]:
    """:func:`~.coco_entries.box_detection_columns` against the images and categories of ``coco_gt``."""
    image_ids = np.asarray(sorted(coco_gt.getImgIds()), dtype=np.int64)
    return box_detection_columns(dets, image_ids, np.asarray(sorted(coco_gt.getCatIds()), dtype=np.int64))


def detection_arrays(columns: BoxColumns, regions: Regions, area: np.ndarray, coco_gt: COCO) -> Detections:
    """The checked detections as flat arrays (image and class indices), with their masks (segm), boxes, keypoints
    (keypoints) and areas."""
    image_ids, category_ids = sorted(coco_gt.getImgIds()), sorted(coco_gt.getCatIds())
    return Detections(
        image=_indices(columns.image, image_ids),
        label=_indices(columns.category, category_ids),
        score=columns.score,
        box=regions.box,
        area=area,
        masks=regions.masks,
        keypoints=regions.keypoints,
    )


def evaluate_detections(
    coco_gt: COCO,
    dets: Detections,
    iou_type: str = "bbox",
    max_detections: Optional[int] = None,
    keypoint_sigmas: KeypointSigmas = None,
) -> Dict[str, Any]:
    """:func:`evaluate_coco` of checked detections as arrays (:func:`result_detections` with the same
    ``keypoint_sigmas``, the command's route), on the ground truth ``coco_gt``, whose annotations are checked here."""
    _check_iou_type(iou_type)
    image_ids, category_ids = sorted(coco_gt.getImgIds()), sorted(coco_gt.getCatIds())
    checked = checked_sigmas(keypoint_sigmas, iou_type)
    sigmas = None if checked is None else sigmas_of_classes(checked, category_ids)
    keypoints = 0 if checked is None else keypoint_count(checked)
    if keypoints and (dets.keypoints is None or dets.keypoints.shape[1:] != (keypoints, 3)):
        shape = None if dets.keypoints is None else dets.keypoints.shape[1:]
        raise ValueError(f"the detections' keypoints must be {keypoints} x 3 each, as many as the sigmas, got {shape}")
    anns = _annotations(coco_gt, image_ids)
    check_ground_truths(anns, coco_gt, iou_type, keypoints)
    gts = ground_truth_arrays(coco_gt, anns, image_ids, category_ids, iou_type, keypoints)
    limit = COCO_MAX_DETECTIONS[iou_type] if max_detections is None else max_detections
    candidates = candidate_matches(dets, gts, len(category_ids), iou_type, limit, LRP_TAU, sigmas)
    return lrp_results(candidates, category_ids)


def _check_iou_type(iou_type: str) -> None:
    if iou_type not in IOU_TYPES:
        raise ValueError(f"iou_type must be one of {IOU_TYPES}, got {iou_type!r}")


def evaluate_coco(
    coco_gt: COCO,
    coco_dt: COCO,
    iou_type: str = "bbox",
    max_detections: Optional[int] = None,
    keypoint_sigmas: KeypointSigmas = None,
) -> Dict[str, Any]:
    """oLRP, its components, AP90, rho and the per-class results (:mod:`.results`; ``classes`` are the category ids)
    of the detections ``coco_dt`` (``coco_gt.loadRes(...)``) on ``coco_gt`` (``iou_type`` "bbox", "segm" or
    "keypoints": the boxes' or the masks' IoUs, or OKS with ``keypoint_sigmas``, one sequence or one per category id,
    COCO's person sigmas by default), at most ``max_detections`` per image and category (COCOeval's 100, 20 for
    keypoints). Equal to :class:`~alrp_d2.evaluation.COCOLRPEvaluator`'s metrics on the same detections. A malformed
    annotation or detection (a missing key, a box of 3 numbers, a string for a number), a detection of an image or a
    category that the ground truth lacks, or two ground truths with one id: a ValueError naming it."""
    _check_iou_type(iou_type)
    keypoints = keypoints_of(keypoint_sigmas, iou_type)
    dets = _annotations(coco_dt, sorted(coco_gt.getImgIds()))
    complete = len(dets) == len(coco_dt.anns)  # else some detection is of an image the ground truth lacks
    boxed = bool(keypoints) and boxed_keypoint_results(dets)
    columns = _box_columns(dets, coco_gt) if iou_type == "bbox" and complete else None
    if columns is None:
        check_detections(list(coco_dt.anns.values()), coco_gt, iou_type, keypoints, boxed)
        columns = _columns(dets, iou_type)
    regions = _regions(dets, coco_dt, iou_type, columns.box, keypoints)
    arrays = detection_arrays(columns, regions, _loaded_areas(dets), coco_gt)
    return evaluate_detections(coco_gt, arrays, iou_type, max_detections, keypoint_sigmas)


def _loaded_areas(dets: List[Dict[str, Any]]) -> np.ndarray:
    """The ``area`` that ``loadRes`` gave each detection (COCOeval's, for the area range 'all')."""
    for index, det in enumerate(dets):
        if not is_number(det.get("area")) or det["area"] < 0:
            raise ValueError(f"{_named(det, index, 'detection')}: 'area' must be a finite number >= 0, got "
                             f"{det.get('area')!r}")  # fmt: skip
    return _column(dets, "area", np.float64)


def _regions(dets: List[Dict[str, Any]], coco: COCO, iou_type: str, boxes: np.ndarray, keypoints: int) -> Regions:
    """The detections' masks (segm), boxes (XYWH: ``boxes`` for bbox, the masks' for segm; for keypoints their own,
    :func:`~.coco_entries.boxed_keypoint_results`, or the keypoints' extent, as ``loadRes`` gives them) and keypoints
    (keypoints)."""
    if iou_type == "bbox":
        return Regions(None, boxes)
    if iou_type == "keypoints":
        points = coco_keypoints(dets, keypoints)
        return Regions(None, _boxes(dets) if boxed_keypoint_results(dets) else keypoint_extent(points), points)
    masks = [coco.annToRLE(det) for det in dets]
    return Regions(
        masks, np.asarray(mask_utils.toBbox(masks), dtype=np.float64).reshape(-1, 4) if masks else np.zeros((0, 4))
    )


def result_detections(
    coco_gt: COCO, results: List[Any], iou_type: str, keypoint_sigmas: KeypointSigmas = None
) -> Detections:
    """The detections of a list of COCO results (``image_id``, ``category_id``, ``score`` and ``bbox``, an RLE
    ``segmentation`` or ``keypoints``, as many as ``keypoint_sigmas`` has) as ``coco_gt.loadRes(results)`` would give
    them (a box's area its width x height, a mask's its pixels', keypoints' that of their box), checked: the first bad
    one an :class:`EntryError` naming its index and what is wrong. Box detections are checked and read a column at a
    time."""
    _check_iou_type(iou_type)
    keypoints = keypoints_of(keypoint_sigmas, iou_type)
    columns = _box_columns(results, coco_gt) if iou_type == "bbox" else None
    if columns is None:
        sizes, categories = _image_sizes(coco_gt), set(coco_gt.cats)
        boxed = bool(keypoints) and boxed_keypoint_results(results)
        for index, det in enumerate(results):
            problem = detection_problem(det, sizes, categories, iou_type, keypoints, boxed)
            if problem:
                raise EntryError(index, problem)
        columns = _columns(results, iou_type)
    regions = _regions(results, coco_gt, iou_type, columns.box, keypoints)
    if regions.masks is None:
        area = regions.box[:, 2] * regions.box[:, 3]
    else:
        area = (
            np.asarray(mask_utils.area(regions.masks), dtype=np.float64).reshape(-1) if regions.masks else np.zeros(0)
        )
    return detection_arrays(columns, regions, area, coco_gt)
