"""What is wrong with one COCO entry, a ground-truth annotation or a detection, for the files' checks
(:mod:`.coco_files`) and :func:`~alrp_d2.lrp.evaluate_coco` alike: each check returns the problem in words ("" when
there is none), naming the key. The checks that depend on the IoU type (the region: box, mask or keypoints) are looked
up in :data:`GROUND_TRUTH_REGION` and :data:`DETECTION_REGION`; every check is O(1) given the image sizes, the category
set and the number of keypoints, so checking N entries is O(N). Box detections are checked a column at a time
(:func:`box_detection_columns`), the per-entry checks then only naming the first bad one."""

from __future__ import annotations

import math
from itertools import chain
from operator import itemgetter
from typing import Any, Callable, Collection, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np

ImageSizes = Mapping[Any, Tuple[int, int]]
#: A region's check: the entry, its image's [height, width] and the number of keypoints of every object (keypoints).
RegionCheck = Callable[[Mapping[str, Any], Tuple[int, int], int], str]
DETECTION_KEYS = ("image_id", "category_id", "score", "bbox")


class BoxColumns(NamedTuple):
    """Box detections as columns: image and category ids, scores, XYWH boxes (N x 4)."""

    image: np.ndarray
    category: np.ndarray
    score: np.ndarray
    box: np.ndarray


def is_int(value: Any) -> bool:
    """An integer (Python's or numpy's), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """A finite real number (Python's or numpy's), not a bool nor a string."""
    if type(value) is float:  # JSON's numbers first: the checks of a file run once per coordinate
        return value - value == 0.0  # False for NaN and infinities
    if type(value) is int:
        return True
    numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    return numeric and math.isfinite(value)


def box_problem(bbox: Any) -> str:
    """A COCO box: 4 finite numbers ``[x, y, width, height]``, width and height >= 0."""
    if not isinstance(bbox, (list, tuple, np.ndarray)) or len(bbox) != 4:
        return f"'bbox' must be 4 finite numbers [x, y, width, height], got {bbox!r:.200}"
    x, y, width, height = bbox
    if not (is_number(x) and is_number(y) and is_number(width) and is_number(height)):
        return f"'bbox' must be 4 finite numbers [x, y, width, height], got {bbox!r:.200}"
    return "" if width >= 0 and height >= 0 else f"'bbox' has a negative width or height: {list(bbox)}"


def rle_problem(segmentation: Any, size: Tuple[int, int]) -> str:
    """A COCO RLE ``{'size': [height, width], 'counts': ...}`` of the image's size."""
    if not isinstance(segmentation, dict) or not isinstance(segmentation.get("counts"), (str, bytes, list)):
        return f"'segmentation' must be an RLE {{'size': [h, w], 'counts': ...}}, got {segmentation!r:.200}"
    if list(segmentation.get("size", ())) != list(size):
        return f"the RLE's size {segmentation.get('size')} is not its image's [height, width] {list(size)}"
    return ""


def _polygons_problem(segmentation: Any) -> str:
    if not all(isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0 for p in segmentation):
        return "'segmentation' polygons must be lists of x, y pairs (at least 3 points)"
    return "" if all(is_number(v) for p in segmentation for v in p) else "'segmentation' polygons hold a non-number"


def _ground_truth_mask_problem(ann: Mapping[str, Any], size: Tuple[int, int], keypoints: int) -> str:
    segmentation = ann.get("segmentation")
    if isinstance(segmentation, list) and segmentation:
        problem = _polygons_problem(segmentation)
    elif isinstance(segmentation, dict):
        problem = rle_problem(segmentation, size)
    else:
        problem = "has no 'segmentation' (polygons or RLE), which iou_type 'segm' needs"
    return problem or box_problem(ann.get("bbox"))


def keypoints_problem(values: Any, count: int) -> str:
    """COCO's ``keypoints``: a list of x, y, v (a visibility, or a result's score) for each of ``count`` keypoints."""
    if not isinstance(values, list) or len(values) != 3 * count:
        return (
            f"'keypoints' must be a list of {3 * count} numbers (x, y, v for each of the {count} keypoints of the "
            f"sigmas), got {values!r:.200}"
        )
    return "" if all(map(is_number, values)) else f"'keypoints' must hold finite numbers, got {values!r:.200}"


def _ground_truth_keypoints_problem(ann: Mapping[str, Any], size: Tuple[int, int], keypoints: int) -> str:
    """Keypoints with COCO's visibilities (0: unlabelled, 1, 2), ``num_keypoints`` counting the labelled ones (v > 0:
    COCOeval ignores an object without any), and the box (OKS of an object without labelled keypoints needs it)."""
    problem = keypoints_problem(ann.get("keypoints"), keypoints)
    if problem:
        return problem
    visibility = ann["keypoints"][2::3]
    if any(v not in (0, 1, 2) for v in visibility):
        return f"'keypoints' visibilities (every third value) must be 0, 1 or 2, got {visibility}"
    labelled, given = sum(1 for v in visibility if v > 0), ann.get("num_keypoints")
    if given != labelled or isinstance(given, (bool, np.bool_)):
        return f"'num_keypoints' must be the number of labelled keypoints (v > 0), {labelled}, got {given!r}"
    return box_problem(ann.get("bbox"))


#: The region a ground truth needs for each IoU type (its box is needed by every type: COCO files have it).
GROUND_TRUTH_REGION: Dict[str, RegionCheck] = {
    "bbox": lambda ann, size, keypoints: box_problem(ann.get("bbox")),
    "segm": _ground_truth_mask_problem,
    "keypoints": _ground_truth_keypoints_problem,
}
#: The region a detection needs for each IoU type.
DETECTION_REGION: Dict[str, RegionCheck] = {
    "bbox": lambda det, size, keypoints: box_problem(det.get("bbox")),
    "segm": lambda det, size, keypoints: rle_problem(det.get("segmentation"), size),
    "keypoints": lambda det, size, keypoints: keypoints_problem(det.get("keypoints"), keypoints),
}


def boxed_keypoint_results(dets: Sequence[Any]) -> bool:
    """Whether keypoint results take their boxes and areas from their ``bbox`` rather than from their keypoints'
    extent: pycocotools' ``loadRes`` does so for all of them when the first has a box."""
    return bool(dets) and isinstance(dets[0], dict) and bool(dets[0].get("bbox"))


def _image_and_category_problem(entry: Mapping[str, Any], sizes: ImageSizes, categories: Collection[Any]) -> str:
    if entry.get("image_id") not in sizes:
        return f"image_id {entry.get('image_id')!r} is not an image of the ground truth"
    if entry.get("category_id") not in categories:
        return f"category_id {entry.get('category_id')!r} is not a category of the ground truth"
    return ""


def ground_truth_problem(
    ann: Any, sizes: ImageSizes, categories: Collection[Any], iou_type: str, keypoints: int = 0
) -> str:
    """What is wrong with the ground-truth annotation ``ann`` (image and category known, ``iscrowd`` 0 or 1, ``area``,
    the region of ``iou_type``; ``keypoints`` of every object for "keypoints")."""
    if not isinstance(ann, dict):
        return f"must be an object, got {ann!r:.200}"
    problem = _image_and_category_problem(ann, sizes, categories)
    if problem:
        return problem
    if ann.get("iscrowd") not in (0, 1) or isinstance(ann.get("iscrowd"), (bool, np.bool_)):
        return f"'iscrowd' must be 0 or 1, got {ann.get('iscrowd')!r}"
    if not is_number(ann.get("area")) or ann["area"] < 0:
        return f"'area' must be a finite number >= 0, got {ann.get('area')!r}"
    return GROUND_TRUTH_REGION[iou_type](ann, sizes[ann["image_id"]], keypoints)


def detection_problem(
    det: Any, sizes: ImageSizes, categories: Collection[Any], iou_type: str, keypoints: int = 0, boxed: bool = False
) -> str:
    """What is wrong with the detection ``det`` (image and category known, a finite ``score``, the region of
    ``iou_type``; ``keypoints`` of every object for "keypoints", and the box too when ``boxed``:
    :func:`boxed_keypoint_results`)."""
    if not isinstance(det, dict):
        return f"must be an object, got {det!r:.200}"
    problem = _image_and_category_problem(det, sizes, categories)
    if problem:
        return problem
    if not is_number(det.get("score")):
        return f"'score' must be a finite number, got {det.get('score')!r}"
    problem = DETECTION_REGION[iou_type](det, sizes[det["image_id"]], keypoints)
    return problem or (box_problem(det.get("bbox")) if boxed else "")


def first_repeat(ids: Sequence[Any]) -> Optional[int]:
    """The index of the first entry whose id an earlier entry has, None when the ids are distinct (O(N))."""
    seen = set()
    for index, value in enumerate(ids):
        if value in seen:
            return index
        seen.add(value)
    return None


def _types_within(values: Iterable[Any], allowed: Set[type]) -> bool:
    return set(map(type, values)) <= allowed


def box_detection_columns(dets: List[Any], image_ids: np.ndarray, category_ids: np.ndarray) -> Optional[BoxColumns]:
    """``image_id``, ``category_id``, ``score`` and ``bbox`` of box detections as arrays when every detection is
    well-formed (what :func:`detection_problem` checks, checked a column at a time: types in C loops, values
    vectorised; ``image_ids`` and ``category_ids`` sorted); None when any is not, for the per-entry checks to name."""
    if not _types_within(dets, {dict}):
        return None
    try:
        image, category, score, bbox = (list(map(itemgetter(key), dets)) for key in DETECTION_KEYS)
    except KeyError:
        return None
    plain = _types_within(image, {int}) and _types_within(category, {int}) and _types_within(score, {int, float})
    if not (plain and _types_within(bbox, {list}) and set(map(len, bbox)) <= {4}):
        return None
    if not _types_within(chain.from_iterable(bbox), {int, float}):
        return None
    count = len(dets)
    try:
        columns = BoxColumns(np.fromiter(image, np.int64, count), np.fromiter(category, np.int64, count),
                             np.fromiter(score, np.float64, count),
                             np.fromiter(chain.from_iterable(bbox), np.float64, 4 * count).reshape(-1, 4))  # fmt: skip
    except OverflowError:  # an id beyond int64: not an id of the ground truth
        return None
    finite = np.isfinite(columns.score).all() and np.isfinite(columns.box).all()
    known = np.isin(columns.image, image_ids).all() and np.isin(columns.category, category_ids).all()
    return columns if finite and known and (columns.box[:, 2:] >= 0).all() else None


class EntryError(ValueError):
    """The entry ``index`` of a list of detections is not well-formed: ``problem`` says why."""

    def __init__(self, index: int, problem: str):
        super().__init__(f"entry {index}: {problem}")
        self.index, self.problem = index, problem
