"""A COCO ground-truth file and a COCO results file checked before they are evaluated: every problem is a
:class:`CocoFileError` naming the file, the entry (its index and id) and what is wrong (:mod:`.coco_entries`), never a
bare ``KeyError`` or ``AssertionError`` of pycocotools, nor a detection silently left out. The image sizes and the
category set are built once and the detections are checked as they are read into arrays
(:func:`~alrp_d2.lrp.coco_api.result_detections`), so checking a pair is linear in its entries."""

from __future__ import annotations

import contextlib
import io
from typing import Any, Dict, List, Tuple

from pycocotools.coco import COCO

from ..json_file import load_json
from .annotations import Detections
from .coco_api import result_detections
from .coco_entries import EntryError, first_repeat, ground_truth_problem, is_int
from .keypoint_inputs import KeypointSigmas, keypoints_of


class CocoFileError(ValueError):
    """A COCO file that cannot be evaluated; the message names the file and the entry."""


def _read(path: str) -> Any:
    try:
        with open(path, "rb") as file:
            return load_json(file, path)
    except OSError as error:
        raise CocoFileError(f"{path}: cannot be read ({error.strerror})") from None
    except ValueError as error:
        raise CocoFileError(str(error)) from None


def _entries(content: Dict[str, Any], key: str, path: str) -> List[Dict[str, Any]]:
    """``content[key]``: a list of objects with distinct integer ids."""
    entries = content.get(key)
    if not isinstance(entries, list):
        raise CocoFileError(f"{path}: {key!r} must be a list, got {type(entries).__name__}")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not is_int(entry.get("id")):
            raise CocoFileError(f"{path}: {key}[{index}] must be an object with an integer 'id', got {entry!r:.200}")
    repeat = first_repeat([entry["id"] for entry in entries])
    if repeat is not None:
        raise CocoFileError(f"{path}: {key}[{repeat}] repeats the id {entries[repeat]['id']}")
    return entries


def _image_sizes(images: List[Dict[str, Any]], path: str) -> Dict[int, Tuple[int, int]]:
    for index, image in enumerate(images):
        if not (is_int(image.get("height")) and is_int(image.get("width"))):
            raise CocoFileError(f"{path}: images[{index}] (id {image['id']}) needs integer 'height' and 'width'")
    return {image["id"]: (image["height"], image["width"]) for image in images}


def check_ground_truth(path: str, iou_type: str, keypoints: int = 0) -> Dict[str, Any]:
    """The content of the ground-truth file ``path`` after its checks (``keypoints`` of every object, if any)."""
    content = _read(path)
    if not isinstance(content, dict):
        raise CocoFileError(f"{path}: a COCO ground-truth file is an object with images, annotations, categories")
    sizes = _image_sizes(_entries(content, "images", path), path)
    categories = {category["id"] for category in _entries(content, "categories", path)}
    for index, ann in enumerate(_entries(content, "annotations", path)):
        problem = ground_truth_problem(ann, sizes, categories, iou_type, keypoints)
        if problem:
            raise CocoFileError(f"{path}: annotations[{index}] (id {ann['id']}): {problem}")
    return content


def _results(path: str) -> List[Any]:
    content = _read(path)
    if not isinstance(content, list):
        raise CocoFileError(f"{path}: a COCO results file is a list of detections, got {type(content).__name__}")
    return content


def load_coco_pair(
    gt_path: str, dt_path: str, iou_type: str, keypoint_sigmas: KeypointSigmas = None
) -> Tuple[COCO, Detections]:
    """The checked ground truth as a pycocotools ``COCO`` object and the checked detections as arrays (for
    :func:`~alrp_d2.lrp.coco_api.evaluate_detections` with the same ``keypoint_sigmas``, whose number of keypoints
    every object has with ``iou_type`` "keypoints")."""
    ground_truth = check_ground_truth(gt_path, iou_type, keypoints_of(keypoint_sigmas, iou_type))
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = ground_truth
        coco_gt.createIndex()
    try:
        return coco_gt, result_detections(coco_gt, _results(dt_path), iou_type, keypoint_sigmas)
    except EntryError as error:
        raise CocoFileError(f"{dt_path}: {error}") from None
