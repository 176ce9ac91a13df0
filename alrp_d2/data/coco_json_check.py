"""Validation of a COCO-format annotation file before detectron2 loads it (``--dataset``): every
problem is reported with the file and the id of the image, annotation or category, instead of a
bare ``KeyError`` later or a box that detectron2 would silently mirror, drop or stretch.

Errors (the file is refused, all problems listed): a missing or ill-typed key of an image
(``id``, ``file_name``, ``width``, ``height``), annotation (``id``, ``image_id``, ``category_id``,
``bbox``) or category (``id``, ``name``); a bbox that is not 4 finite numbers or has a negative
width or height; duplicate image, annotation or category ids and duplicate category names; an
annotation whose image or category is not in the file; an ``ignore`` flag (detectron2 refuses it);
in an evaluated dataset, an annotation without ``area`` or ``iscrowd`` (COCO evaluation needs them)
or with a zero width or height (no detection could ever match it); a segmentation that cannot be
rasterised safely or would give an empty mask (:mod:`.segmentation_check`: polygons of finite
numbers, even length >= 6, overlapping the image and the box; RLE of the image's size with valid
counts) and, for a mask model, an annotation without one.
A box that does not overlap its image, or reaches more than one image size beyond it
(:func:`~.segmentation_check.coordinate_bounds`, e.g. ``[500, 500, 20, 20]`` in a 96 px image or
``[10, 10, 1e30, 20]``), is an error in an evaluated dataset (no detection could match it).
Counted warnings (detectron2's behaviour kept): in a training-only dataset, boxes with a zero width
or height, which detectron2 drops from training, and boxes outside their image as above, which
detectron2 clips to the image (dropping those left empty).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from ..json_file import InvalidJsonError, load_json
from .dataset_classes import duplicate_classes
from .segmentation_check import coordinate_bounds, segmentation_problem

__all__ = ["CocoJsonError", "check_coco_json", "check_coco_segmentations"]

logger = logging.getLogger(__name__)

MAX_LISTED = 20


class CocoJsonError(ValueError):
    """The annotation file is not usable COCO; the message names the file and every bad entry."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_id(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, str) and value != "")


def _label(kind: str, entry: Any, index: int) -> str:
    if isinstance(entry, dict) and _is_id(entry.get("id")):
        return f"{kind} id {entry['id']!r}"
    return f"{kind}s[{index}]"


def _listed(section: Any, key: str, problems: List[str], required: bool = True) -> List[Any]:
    if section is None and not required:
        return []
    if not isinstance(section, list):
        problems.append(f"'{key}' must be a list, got {type(section).__name__}")
        return []
    return section


def _missing_keys(entry: Any, keys: Tuple[str, ...]) -> List[str]:
    return [key for key in keys if key not in entry] if isinstance(entry, dict) else list(keys)


def _duplicates(ids: List[Any], kind: str, problems: List[str]) -> None:
    for value, count in Counter(ids).items():
        if count > 1:
            problems.append(f"{kind} id {value!r} appears {count} times")


def _check_categories(content: Dict[str, Any], problems: List[str]) -> List[Tuple[int, str]]:
    categories = []
    entries = _listed(content.get("categories"), "categories", problems)
    if not entries and not problems:
        problems.append("'categories' is empty")
    for index, entry in enumerate(entries):
        label = _label("category", entry, index)
        missing = _missing_keys(entry, ("id", "name"))
        if missing:
            problems.append(f"{label}: missing {missing}")
        elif not _is_int(entry["id"]) or not isinstance(entry["name"], str):
            problems.append(f"{label}: id must be an integer and name a string, got {entry['id']!r} {entry['name']!r}")
        else:
            categories.append((entry["id"], entry["name"]))
    problems.extend(duplicate_classes(categories))
    return sorted(categories)


ImageSizes = Dict[Any, Optional[Tuple[int, int]]]  # image id -> (width, height), None when invalid


def _check_images(content: Dict[str, Any], problems: List[str]) -> ImageSizes:
    """Appends the problems of the images; returns the (width, height) of each id (None: invalid)."""
    ids = []
    sizes: ImageSizes = {}
    for index, entry in enumerate(_listed(content.get("images"), "images", problems)):
        label = _label("image", entry, index)
        if isinstance(entry, dict) and _is_id(entry.get("id")):
            ids.append(entry["id"])
            sizes[entry["id"]] = None
        elif isinstance(entry, dict) and "id" in entry:
            problems.append(f"{label}: 'id' must be an integer or a string, got {entry['id']!r}")
        missing = _missing_keys(entry, ("id", "file_name", "width", "height"))
        if missing:
            problems.append(f"{label}: missing {missing}")
            continue
        if not isinstance(entry["file_name"], str) or not entry["file_name"]:
            problems.append(f"{label}: 'file_name' must be a non-empty string, got {entry['file_name']!r}")
        if not all(_is_int(entry[k]) and entry[k] > 0 for k in ("width", "height")):
            problems.append(f"{label}: width and height must be integers > 0: {entry['width']!r} {entry['height']!r}")
        elif _is_id(entry["id"]):
            sizes[entry["id"]] = (entry["width"], entry["height"])
    _duplicates(ids, "image", problems)
    return sizes


ZERO_SIZE, OUTSIDE = "zero-size", "outside"  # the kinds of boxes a training set may keep, with a counted warning
KEPT_BOXES = {
    ZERO_SIZE: "with a zero width or height, which detectron2 drops from training",
    OUTSIDE: "with a box outside its image or reaching more than one image size beyond it, which detectron2 clips "
    "to the image for training (dropping the boxes left empty)",
}


def _outside_image(bbox: List[float], size: Optional[Tuple[int, int]]) -> str:
    """Why the box [x, y, width, height] lies outside its image of ``size`` (width, height), or ""."""
    if size is None:
        return ""
    width, height = size
    x1, y1, x2, y2 = bbox[0], bbox[1], bbox[0] + bbox[2], bbox[1] + bbox[3]
    if min(x2, width) <= max(x1, 0) or min(y2, height) <= max(y1, 0):
        return f"bbox {bbox!r} does not overlap its {width} x {height} image"
    x_low, y_low, x_high, y_high = coordinate_bounds(width, height)
    if x1 < x_low or y1 < y_low or x2 > x_high or y2 > y_high:
        return (
            f"bbox {bbox!r} reaches more than one image size beyond its {width} x {height} image (x in "
            f"[{x_low}, {x_high}], y in [{y_low}, {y_high}])"
        )
    return ""


def _bbox_problem(bbox: Any, evaluated: bool, size: Optional[Tuple[int, int]] = None) -> Tuple[str, str]:
    """(the problem of ``bbox`` in an image of ``size`` (width, height; None: unknown) or "", the kind of box that
    a training set keeps with a counted warning (:data:`ZERO_SIZE`, :data:`OUTSIDE`) or "")."""
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(_is_number(v) for v in bbox):
        return f"bbox must be 4 numbers [x, y, width, height], got {bbox!r}", ""
    if not all(math.isfinite(v) for v in bbox):
        return f"bbox {bbox!r} is not finite", ""
    if bbox[2] < 0 or bbox[3] < 0:
        return f"bbox {bbox!r} has a negative width or height", ""
    if bbox[2] == 0 or bbox[3] == 0:
        problem = f"bbox {bbox!r} has a zero width or height (no detection can match it in evaluation)"
        return (problem, "") if evaluated else ("", ZERO_SIZE)
    outside = _outside_image(bbox, size)
    if outside:
        return (f"{outside} (no detection can match it in evaluation)", "") if evaluated else ("", OUTSIDE)
    return "", ""


def _segmentation_problem(entry: Dict[str, Any], images: ImageSizes, masks: bool) -> str:
    """The problem of the annotation's segmentation (checked when it has one or ``masks``) or ""."""
    size = images.get(entry["image_id"]) if _is_id(entry["image_id"]) else None
    if ("segmentation" not in entry and not masks) or size is None:
        return ""
    width, height = size
    bbox = entry.get("bbox")
    box = bbox if _bbox_problem(bbox, evaluated=True)[0] == "" else None
    return segmentation_problem(entry.get("segmentation"), width, height, box, required=masks) or ""


def _check_annotation(
    entry: Any, label: str, images: ImageSizes, category_ids: set, evaluated: bool, masks: bool, problems: List[str]
) -> str:
    """Appends the problems of one annotation; returns the kind of box a training set keeps with a warning, or ""."""
    required = ("id", "image_id", "category_id", "bbox") + (("area", "iscrowd") if evaluated else ())
    missing = _missing_keys(entry, required)
    if missing:
        problems.append(f"{label}: missing {missing}" + (" (COCO evaluation needs area and iscrowd)" * evaluated))
        return ""
    where = f"{label} (image id {entry['image_id']!r})"
    if not _is_id(entry["image_id"]) or entry["image_id"] not in images:
        problems.append(f"{where}: no image with this id in 'images'")
    if not _is_int(entry["category_id"]) or entry["category_id"] not in category_ids:
        problems.append(f"{where}: category_id {entry['category_id']!r} is not in 'categories'")
    if entry.get("iscrowd", 0) not in (0, 1) or isinstance(entry.get("iscrowd"), bool):
        problems.append(f"{where}: iscrowd must be 0 or 1, got {entry['iscrowd']!r}")
    if "area" in entry and not (_is_number(entry["area"]) and math.isfinite(entry["area"]) and entry["area"] >= 0):
        problems.append(f"{where}: area must be a finite number >= 0, got {entry['area']!r}")
    if entry.get("ignore", 0):
        problems.append(f"{where}: 'ignore' is not supported by detectron2 (use iscrowd)")
    size = images.get(entry["image_id"]) if _is_id(entry["image_id"]) else None
    problem, kept = _bbox_problem(entry["bbox"], evaluated, size)
    if problem:
        problems.append(f"{where}: {problem}")
    problem = _segmentation_problem(entry, images, masks)
    if problem:
        problems.append(f"{where}: {problem}")
    return kept


def _check_annotations(
    content: Dict[str, Any], images: ImageSizes, category_ids: set, evaluated: bool, masks: bool, problems: List[str]
) -> Dict[str, List[str]]:
    """Appends the problems of the annotations; returns the labels of the boxes a training set keeps with a warning,
    by kind (:data:`ZERO_SIZE`, :data:`OUTSIDE`)."""
    ids: List[Any] = []
    kept: Dict[str, List[str]] = {ZERO_SIZE: [], OUTSIDE: []}
    for index, entry in enumerate(_listed(content.get("annotations"), "annotations", problems, required=False)):
        label = _label("annotation", entry, index)
        if isinstance(entry, dict) and _is_id(entry.get("id")):
            ids.append(entry["id"])
        kind = _check_annotation(entry, label, images, category_ids, evaluated, masks, problems)
        if kind:
            kept[kind].append(label)
    _duplicates(ids, "annotation", problems)
    return kept


def _read(json_file: str) -> Dict[str, Any]:
    try:
        with open(json_file, "rb") as f:
            content = load_json(f, json_file)
    except OSError as error:
        raise FileNotFoundError(f"cannot read the annotation file {json_file}: {error.strerror}") from error
    except InvalidJsonError as error:
        raise CocoJsonError(str(error)) from error
    if not isinstance(content, dict):
        raise CocoJsonError(f"{json_file} must hold a COCO object with images, annotations and categories")
    return content


def _raise_problems(json_file: str, problems: List[str]) -> None:
    if problems:
        listed = "\n".join(f"  {problem}" for problem in problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise CocoJsonError(f"{json_file} has {len(problems)} problem(s):\n{listed}{more}")


def check_coco_json(json_file: str, evaluated: bool = False, masks: bool = False) -> List[Tuple[int, str]]:
    """Validates the COCO annotation file ``json_file`` (``evaluated``: the dataset is also in
    DATASETS.TEST; ``masks``: the model trains or evaluates masks, MODEL.MASK_ON) and returns its
    (category id, name) sorted by id, the contiguous class order of detectron2's
    ``load_coco_json``. Raises FileNotFoundError, or :class:`CocoJsonError` listing every problem
    (module docstring); warns with a count for kept detectron2 behaviour."""
    content = _read(json_file)
    problems: List[str] = []
    categories = _check_categories(content, problems)
    images = _check_images(content, problems)
    kept = _check_annotations(content, images, {i for i, _ in categories}, evaluated, masks, problems)
    _raise_problems(json_file, problems)
    for kind, what in KEPT_BOXES.items():
        if kept[kind]:
            logger.warning(f"{json_file}: {len(kept[kind])} annotation(s) {what} (e.g. {', '.join(kept[kind][:5])})")
    return categories


def check_coco_segmentations(json_file: str, masks: bool) -> None:
    """Validates only the segmentations of the COCO annotation file ``json_file`` (of a dataset
    registered by other code than ``--dataset``, e.g. ``register_coco_instances``, the built-in
    COCO datasets or the shapes set), naming the file, image and annotation id of every bad one;
    ``masks``: every annotation must have one. Annotations whose image has no valid size are left
    to detectron2."""
    content = _read(json_file)
    images = _check_images(content, [])
    problems: List[str] = []
    for index, entry in enumerate(content.get("annotations") or []):
        if not isinstance(entry, dict) or not _is_id(entry.get("image_id")):
            continue
        problem = _segmentation_problem(entry, images, masks)
        if problem:
            problems.append(f"{_label('annotation', entry, index)} (image id {entry['image_id']!r}): {problem}")
    _raise_problems(json_file, problems)
