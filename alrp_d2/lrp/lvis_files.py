"""An LVIS ground truth and LVIS results (files, or their content already loaded) checked before LVIS LRP evaluates
them: every problem is an :class:`LVISFileError` naming the file (or "ground truth" / "detections" for loaded
content), the entry (its index and id) and the key, never a bare ``KeyError`` nor an entry silently left out. The
checks are linear in the files (dictionaries built once); the detections, the largest list, are checked in a few
passes and scanned entry by entry only to name a bad one."""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Set, Tuple, Union

import numpy as np

from ..json_file import load_json

#: LVIS's frequency groups: rare (< 10 training images), common (< 100) and frequent.
FREQUENCY_GROUPS = ("r", "c", "f")
IOU_TYPES = ("bbox", "segm")
Source = Union[str, "os.PathLike[str]", Dict[str, Any], List[Dict[str, Any]]]


class LVISFileError(ValueError):
    """An LVIS ground truth or results that cannot be evaluated; the message names the file and the entry."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_source(source: Source, what: str) -> Tuple[Any, str]:
    """The content of ``source`` (a path to a JSON file, or the content itself) and the name errors give it."""
    if not isinstance(source, (str, os.PathLike)):
        return source, what
    path = os.fspath(source)
    try:
        with open(path, "rb") as file:
            return load_json(file, path), path
    except OSError as error:
        raise LVISFileError(f"{path}: cannot be read ({error.strerror})") from None
    except ValueError as error:
        raise LVISFileError(str(error)) from None


def _entries(content: Dict[str, Any], key: str, name: str) -> List[Dict[str, Any]]:
    entries = content.get(key)
    if not isinstance(entries, list):
        raise LVISFileError(f"{name}: {key!r} must be a list, got {type(entries).__name__}")
    seen: Set[int] = set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not _is_int(entry.get("id")):
            raise LVISFileError(f"{name}: {key}[{index}] must be an object with an integer 'id', got {entry!r:.200}")
        if entry["id"] in seen:
            raise LVISFileError(f"{name}: {key}[{index}] repeats the id {entry['id']}")
        seen.add(entry["id"])
    return entries


def _box_problem(bbox: Any) -> str:
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(map(_is_number, bbox)):
        return f"'bbox' must be 4 finite numbers [x, y, width, height], got {bbox!r:.200}"
    return "" if bbox[2] >= 0 and bbox[3] >= 0 else f"'bbox' has a negative width or height: {bbox}"


def _image_problem(image: Dict[str, Any], categories: Set[int]) -> str:
    if not (_is_int(image.get("height")) and _is_int(image.get("width"))):
        return "needs integer 'height' and 'width'"
    for key in ("neg_category_ids", "not_exhaustive_category_ids"):
        ids = image.get(key)
        if not isinstance(ids, list) or not all(_is_int(i) and i in categories for i in ids):
            return f"{key!r} must be a list of category ids of the file (LVIS's federated labels), got {ids!r:.200}"
    return ""


def _annotation_problem(ann: Dict[str, Any], images: Set[int], categories: Set[int], iou_type: str) -> str:
    if ann.get("image_id") not in images:
        return f"image_id {ann.get('image_id')!r} is not an image of the file"
    if ann.get("category_id") not in categories:
        return f"category_id {ann.get('category_id')!r} is not a category of the file"
    if not _is_number(ann.get("area")) or ann["area"] < 0:
        return f"'area' must be a finite number >= 0, got {ann.get('area')!r}"
    if ann.get("ignore", 0) not in (0, 1):
        return f"'ignore' must be 0 or 1, got {ann['ignore']!r}"
    if iou_type == "segm":
        has_segmentation = isinstance(ann.get("segmentation"), (list, dict))
        return "" if has_segmentation else "has no 'segmentation' (polygons or RLE), which segm IoUs need"
    return _box_problem(ann.get("bbox"))


def check_ground_truth(content: Any, name: str, iou_type: str) -> Dict[str, Any]:
    """``content`` (an LVIS annotation file's) after its checks: images with their size and federated labels
    (``neg_category_ids``, ``not_exhaustive_category_ids``), categories with a ``frequency`` of "r", "c" or "f",
    annotations of those images and categories with an area and a box (segm: a segmentation)."""
    if not isinstance(content, dict):
        raise LVISFileError(f"{name}: an LVIS ground truth is an object with images, annotations, categories")
    categories = _entries(content, "categories", name)
    for index, category in enumerate(categories):
        if category.get("frequency") not in FREQUENCY_GROUPS:
            raise LVISFileError(
                f"{name}: categories[{index}] (id {category['id']}): 'frequency' must be one of "
                f"{FREQUENCY_GROUPS}, got {category.get('frequency')!r}"
            )
    category_ids = {category["id"] for category in categories}
    images = _entries(content, "images", name)
    for index, image in enumerate(images):
        problem = _image_problem(image, category_ids)
        if problem:
            raise LVISFileError(f"{name}: images[{index}] (id {image['id']}): {problem}")
    image_ids = {image["id"] for image in images}
    for index, ann in enumerate(_entries(content, "annotations", name)):
        problem = _annotation_problem(ann, image_ids, category_ids, iou_type)
        if problem:
            raise LVISFileError(f"{name}: annotations[{index}] (id {ann['id']}): {problem}")
    return content


def _rle_problem(segmentation: Any, size: List[int]) -> str:
    if not isinstance(segmentation, dict) or not isinstance(segmentation.get("counts"), str):
        return f"'segmentation' must be a compressed RLE {{'size': [h, w], 'counts': str}}, got {segmentation!r:.200}"
    if list(segmentation.get("size", ())) != size:
        return f"the RLE's size {segmentation.get('size')} is not its image's [height, width] {size}"
    return ""


def _detection_problem(det: Any, sizes: Dict[int, List[int]], categories: Set[int], needs_box: bool, segm: bool):
    if not isinstance(det, dict):
        return f"must be an object, got {det!r:.200}"
    if det.get("image_id") not in sizes:
        return f"image_id {det.get('image_id')!r} is not an image of the ground truth"
    if det.get("category_id") not in categories:
        return f"category_id {det.get('category_id')!r} is not a category of the ground truth"
    if not _is_number(det.get("score")):
        return f"'score' must be a finite number, got {det.get('score')!r}"
    problem = _box_problem(det.get("bbox")) if needs_box else ""
    return problem or (_rle_problem(det.get("segmentation"), sizes[det["image_id"]]) if segm else "")


def _all_numbers(values: List[Any]) -> bool:
    """Whether every value is a finite Python int or float (not a bool), checked with one array."""
    if not all(type(value) is float or type(value) is int for value in values):
        return False
    return bool(np.isfinite(np.asarray(values, dtype=np.float64)).all())


def _results_pass(
    content: List[Any], sizes: Dict[int, List[int]], categories: Set[int], needs_box: bool, segm: bool
) -> bool:
    """Whether every detection passes the checks of :func:`_detection_problem`, in a few passes over the list (a
    False sends the check to the entry-by-entry scan, which names the first bad entry)."""
    if not all(type(det) is dict for det in content):
        return False
    if not all(det.get("image_id") in sizes and det.get("category_id") in categories for det in content):
        return False
    if not _all_numbers([det.get("score") for det in content]):
        return False
    if needs_box:
        boxes = [det.get("bbox") for det in content]
        if not all(type(box) is list and len(box) == 4 for box in boxes):
            return False
        if not _all_numbers([x for box in boxes for x in box]) or (np.asarray(boxes).reshape(-1, 4)[:, 2:] < 0).any():
            return False
    return not segm or all(
        type(det.get("segmentation")) is dict
        and type(det["segmentation"].get("counts")) is str
        and det["segmentation"].get("size") == sizes[det["image_id"]]
        for det in content
    )


def results_have_boxes(results: List[Dict[str, Any]]) -> bool:
    """Whether LVIS reads the results as boxes: its first result has a ``bbox`` (then every detection's area is its
    box's, also for segm IoUs; otherwise its mask's)."""
    return bool(results) and "bbox" in results[0]


def check_results(content: Any, name: str, ground_truth: Dict[str, Any], iou_type: str) -> List[Dict[str, Any]]:
    """``content`` (an LVIS results file's: a list of detections) after its checks against the checked
    ``ground_truth``: an image and a category of it, a finite score, a box (bbox IoUs, or when the first detection has
    one) and a compressed RLE of the image's size (segm IoUs)."""
    if not isinstance(content, list):
        raise LVISFileError(f"{name}: LVIS results are a list of detections, got {type(content).__name__}")
    sizes = {image["id"]: [image["height"], image["width"]] for image in ground_truth["images"]}
    categories = {category["id"] for category in ground_truth["categories"]}
    segm = iou_type == "segm"
    needs_box = not segm or results_have_boxes(content)
    if _results_pass(content, sizes, categories, needs_box, segm):
        return content
    for index, det in enumerate(content):
        problem = _detection_problem(det, sizes, categories, needs_box, segm)
        if problem:
            raise LVISFileError(f"{name}: entry {index}: {problem}")
    return content
