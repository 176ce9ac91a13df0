"""A COCO ground-truth file and a COCO results file checked before pycocotools reads them: every problem is a
:class:`CocoFileError` naming the file, the entry (its index and id) and what is wrong, never a bare ``KeyError`` or
``AssertionError`` of pycocotools, nor a detection silently left out."""

from __future__ import annotations

import contextlib
import io
import math
from typing import Any, Dict, List, Set, Tuple

from pycocotools.coco import COCO

from ..json_file import load_json
from .coco_keypoint_checks import detection_keypoint_problem, ground_truth_keypoint_problem


class CocoFileError(ValueError):
    """A COCO file that cannot be evaluated; the message names the file and the entry."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _read(path: str) -> Any:
    try:
        with open(path, "rb") as file:
            return load_json(file, path)
    except OSError as error:
        raise CocoFileError(f"{path}: cannot be read ({error.strerror})") from None
    except ValueError as error:
        raise CocoFileError(str(error)) from None


def _entries(content: Dict[str, Any], key: str, path: str) -> List[Dict[str, Any]]:
    entries = content.get(key)
    if not isinstance(entries, list):
        raise CocoFileError(f"{path}: {key!r} must be a list, got {type(entries).__name__}")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not _is_int(entry.get("id")):
            raise CocoFileError(f"{path}: {key}[{index}] must be an object with an integer 'id', got {entry!r:.200}")
    ids = [entry["id"] for entry in entries]
    if len(set(ids)) != len(ids):
        index = next(i for i, value in enumerate(ids) if ids.index(value) != i)
        raise CocoFileError(f"{path}: {key}[{index}] repeats the id {ids[index]}")
    return entries


def _box_problem(bbox: Any) -> str:
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(map(_is_number, bbox)):
        return f"'bbox' must be 4 finite numbers [x, y, width, height], got {bbox!r:.200}"
    return "" if bbox[2] >= 0 and bbox[3] >= 0 else f"'bbox' has a negative width or height: {bbox}"


def _rle_problem(segmentation: Any, size: Tuple[int, int]) -> str:
    if not isinstance(segmentation, dict) or not isinstance(segmentation.get("counts"), (str, list)):
        return f"'segmentation' must be an RLE {{'size': [h, w], 'counts': ...}}, got {segmentation!r:.200}"
    if list(segmentation.get("size", ())) != list(size):
        return f"the RLE's size {segmentation.get('size')} is not its image's [height, width] {list(size)}"
    return ""


def _ground_truth_problem(
    ann: Dict[str, Any], images: Dict[int, Tuple[int, int]], categories: Set[int], segm: bool, keypoints: int
):
    if ann.get("image_id") not in images:
        return f"image_id {ann.get('image_id')!r} is not an image of the file"
    if ann.get("category_id") not in categories:
        return f"category_id {ann.get('category_id')!r} is not a category of the file"
    if ann.get("iscrowd") not in (0, 1) or isinstance(ann.get("iscrowd"), bool):
        return f"'iscrowd' must be 0 or 1, got {ann.get('iscrowd')!r}"
    if not _is_number(ann.get("area")) or ann["area"] < 0:
        return f"'area' must be a finite number >= 0, got {ann.get('area')!r}"
    if segm and not isinstance(ann.get("segmentation"), (list, dict)):
        return "has no 'segmentation' (polygons or RLE), which --iou-type segm needs"
    keypoint_problem = ground_truth_keypoint_problem(ann, keypoints) if keypoints else ""
    return keypoint_problem or _box_problem(ann.get("bbox"))


def _image_sizes(images: List[Dict[str, Any]], path: str) -> Dict[int, Tuple[int, int]]:
    for index, image in enumerate(images):
        if not (_is_int(image.get("height")) and _is_int(image.get("width"))):
            raise CocoFileError(f"{path}: images[{index}] (id {image['id']}) needs integer 'height' and 'width'")
    return {image["id"]: (image["height"], image["width"]) for image in images}


def check_ground_truth(path: str, segm: bool, keypoints: int = 0) -> Dict[str, Any]:
    """The content of the ground-truth file ``path`` after its checks (``keypoints`` per object, if any)."""
    content = _read(path)
    if not isinstance(content, dict):
        raise CocoFileError(f"{path}: a COCO ground-truth file is an object with images, annotations, categories")
    images = _image_sizes(_entries(content, "images", path), path)
    categories = {category["id"] for category in _entries(content, "categories", path)}
    for index, ann in enumerate(_entries(content, "annotations", path)):
        problem = _ground_truth_problem(ann, images, categories, segm, keypoints)
        if problem:
            raise CocoFileError(f"{path}: annotations[{index}] (id {ann['id']}): {problem}")
    return content


def _detection_problem(det: Any, ground_truth: Dict[str, Any], segm: bool, keypoints: int, boxed: bool) -> str:
    if not isinstance(det, dict):
        return f"must be an object, got {det!r:.200}"
    sizes = {image["id"]: (image["height"], image["width"]) for image in ground_truth["images"]}
    if det.get("image_id") not in sizes:
        return f"image_id {det.get('image_id')!r} is not an image of the ground truth"
    if det.get("category_id") not in {category["id"] for category in ground_truth["categories"]}:
        return f"category_id {det.get('category_id')!r} is not a category of the ground truth"
    if not _is_number(det.get("score")):
        return f"'score' must be a finite number, got {det.get('score')!r}"
    if keypoints:
        # pycocotools reads every keypoint result's area from its box when the first has one (loadRes).
        return detection_keypoint_problem(det, keypoints) or (_box_problem(det.get("bbox")) if boxed else "")
    return _rle_problem(det.get("segmentation"), sizes[det["image_id"]]) if segm else _box_problem(det.get("bbox"))


def check_detections(path: str, ground_truth: Dict[str, Any], segm: bool, keypoints: int = 0) -> List[Dict[str, Any]]:
    """The detections of the results file ``path`` (a list of COCO results) after their checks."""
    content = _read(path)
    if not isinstance(content, list):
        raise CocoFileError(f"{path}: a COCO results file is a list of detections, got {type(content).__name__}")
    boxed = bool(content) and isinstance(content[0], dict) and bool(content[0].get("bbox"))
    for index, det in enumerate(content):
        problem = _detection_problem(det, ground_truth, segm, keypoints, boxed)
        if problem:
            raise CocoFileError(f"{path}: entry {index}: {problem}")
    return content


def load_coco_pair(gt_path: str, dt_path: str, iou_type: str, keypoints: int = 0) -> Tuple[COCO, COCO]:
    """pycocotools ``COCO`` objects of the checked ground truth and detections (no detection: an empty result);
    ``keypoints``: the number of keypoints of every object with ``iou_type="keypoints"``."""
    segm = iou_type == "segm"
    ground_truth = check_ground_truth(gt_path, segm, keypoints)
    detections = check_detections(dt_path, ground_truth, segm, keypoints)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = ground_truth
        coco_gt.createIndex()
        if detections:
            return coco_gt, coco_gt.loadRes([dict(det) for det in detections])
        coco_dt = COCO()
        coco_dt.dataset = {
            "images": ground_truth["images"],
            "categories": ground_truth["categories"],
            "annotations": [],
        }
        coco_dt.createIndex()
    return coco_gt, coco_dt
