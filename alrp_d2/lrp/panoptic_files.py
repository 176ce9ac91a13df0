"""COCO panoptic files (a JSON and a folder of PNGs on each side) read and checked: every problem is a
:class:`PanopticFileError` naming the file, the image, the segment id and the key, never a bare ``KeyError`` nor a
segment silently left out.

A PNG holds one segment id per pixel, ``id = R + 256 G + 256^2 B``; 0 is VOID (no segment). The ground truth's
``segments_info`` give each segment's ``category_id``, ``iscrowd`` and ``area`` (the area used in its IoU, as the
official evaluation uses it); a prediction's give ``id`` and ``category_id``, its area is counted in its PNG."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import numpy as np
from PIL import Image

from ..json_file import load_json

VOID = 0
#: The most segments an image may have on one side (their indices, VOID and "other" fit 16 bits).
MAX_SEGMENTS = 2**16 - 3


class PanopticFileError(ValueError):
    """A panoptic file that cannot be evaluated; the message names the file, the image and the segment."""


@dataclass(frozen=True)
class Categories:
    """The ground truth's categories in file order: ids, names and whether each is a thing."""

    ids: List[int]
    names: List[str]
    isthing: np.ndarray

    def index(self) -> Dict[int, int]:
        return {category_id: i for i, category_id in enumerate(self.ids)}


@dataclass(frozen=True)
class Segments:
    """One image's segments on one side: ids, category indices, crowd flags and (ground truth) JSON areas."""

    ids: np.ndarray
    classes: np.ndarray
    crowd: np.ndarray
    areas: np.ndarray


@dataclass(frozen=True)
class ImagePair:
    """One image's ground-truth and prediction entries and PNG paths."""

    image_id: Any
    gt: Segments
    pred: Segments
    gt_png: str
    pred_png: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_json(path: str) -> Dict[str, Any]:
    """The content of the panoptic JSON ``path``: an object with a list of 'annotations'."""
    try:
        with open(path, "rb") as file:
            content = load_json(file, path)
    except OSError as error:
        raise PanopticFileError(f"{path}: cannot be read ({error.strerror})") from None
    except ValueError as error:
        raise PanopticFileError(str(error)) from None
    if not isinstance(content, dict) or not isinstance(content.get("annotations"), list):
        raise PanopticFileError(f"{path}: a COCO panoptic file is an object with a list of 'annotations'")
    return content


def read_categories(content: Dict[str, Any], path: str) -> Categories:
    """The 'categories' of the ground truth ``path``: each an object with an integer 'id' and 'isthing' 0 or 1."""
    entries = content.get("categories")
    if not isinstance(entries, list):
        raise PanopticFileError(f"{path}: 'categories' must be a list, got {type(entries).__name__}")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not _is_int(entry.get("id")) or entry.get("isthing") not in (0, 1):
            raise PanopticFileError(f"{path}: categories[{index}] needs an integer 'id' and 'isthing' 0 or 1")
    ids = [entry["id"] for entry in entries]
    if len(set(ids)) != len(ids):
        raise PanopticFileError(f"{path}: categories repeat an id: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    names = [str(entry.get("name", entry["id"])) for entry in entries]
    return Categories(ids, names, np.array([entry["isthing"] == 1 for entry in entries], dtype=bool))


def _annotations_by_image(content: Dict[str, Any], path: str) -> Dict[Any, Tuple[int, Dict[str, Any]]]:
    by_image: Dict[Any, Tuple[int, Dict[str, Any]]] = {}
    for index, annotation in enumerate(content["annotations"]):
        if not isinstance(annotation, dict) or "image_id" not in annotation:
            raise PanopticFileError(f"{path}: annotations[{index}] must be an object with an 'image_id'")
        image_id = annotation["image_id"]
        if image_id in by_image:
            raise PanopticFileError(f"{path}: annotations[{index}] repeats image_id {image_id!r}")
        for key, kind in (("file_name", str), ("segments_info", list)):
            if not isinstance(annotation.get(key), kind):
                raise PanopticFileError(f"{path}: annotations[{index}] (image_id {image_id!r}) needs {key!r}")
        by_image[image_id] = (index, annotation)
    return by_image


def _segment_problem(segment: Any, class_index: Dict[int, int], ground_truth: bool) -> str:
    if not isinstance(segment, dict) or not _is_int(segment.get("id")) or not 0 < segment["id"] < 256**3:
        return "needs an integer 'id' in [1, 2^24) (0 is VOID)"
    if segment.get("category_id") not in class_index:
        return f"'category_id' {segment.get('category_id')!r} is not a category of the ground truth"
    if ground_truth and segment.get("iscrowd") not in (0, 1):
        return f"'iscrowd' must be 0 or 1, got {segment.get('iscrowd')!r}"
    area = segment.get("area")
    if ground_truth and not (isinstance(area, (int, float)) and not isinstance(area, bool) and 0 <= area < np.inf):
        return f"'area' must be a finite number >= 0, got {area!r}"
    return ""


def _segments(entry: Tuple[int, Dict[str, Any]], path: str, class_index: Dict[int, int], ground_truth: bool):
    index, annotation = entry
    where = f"{path}: annotations[{index}] (image_id {annotation['image_id']!r})"
    segments = annotation["segments_info"]
    for number, segment in enumerate(segments):
        problem = _segment_problem(segment, class_index, ground_truth)
        if problem:
            raise PanopticFileError(f"{where}: segments_info[{number}] (id {segment.get('id')!r}): {problem}")
    if len(segments) > MAX_SEGMENTS:
        raise PanopticFileError(f"{where}: {len(segments)} segments, more than the {MAX_SEGMENTS} an image may have")
    ids = np.array([segment["id"] for segment in segments], dtype=np.int64)
    if len(np.unique(ids)) != len(ids):
        raise PanopticFileError(f"{where}: segments_info repeats the segment id {_first_repeat(ids)}")
    return Segments(
        ids=ids,
        classes=np.array([class_index[segment["category_id"]] for segment in segments], dtype=np.int64),
        crowd=np.array([ground_truth and segment["iscrowd"] == 1 for segment in segments], dtype=bool),
        areas=np.array([segment["area"] if ground_truth else 0 for segment in segments], dtype=np.float64),
    )


def _first_repeat(ids: np.ndarray) -> int:
    values, counts = np.unique(ids, return_counts=True)
    return int(values[counts > 1][0])


def image_pairs(gt_json: str, gt_folder: str, pred_json: str, pred_folder: str) -> Tuple[Categories, List[ImagePair]]:
    """The categories and, in ground-truth order, every image's checked segments on both sides and its PNG paths;
    each ground-truth image needs a prediction, and each prediction an image of the ground truth."""
    gt_content, pred_content = read_json(gt_json), read_json(pred_json)
    categories = read_categories(gt_content, gt_json)
    class_index = categories.index()
    gt_entries = _annotations_by_image(gt_content, gt_json)
    pred_entries = _annotations_by_image(pred_content, pred_json)
    extra = [image_id for image_id in pred_entries if image_id not in gt_entries]
    if extra:
        raise PanopticFileError(f"{pred_json}: image_id {extra[0]!r} is not an image of the ground truth {gt_json}")
    pairs = []
    for image_id, gt_entry in gt_entries.items():
        if image_id not in pred_entries:
            raise PanopticFileError(f"{pred_json}: no annotation of image_id {image_id!r} (in {gt_json})")
        pred_entry = pred_entries[image_id]
        pairs.append(
            ImagePair(
                image_id,
                _segments(gt_entry, gt_json, class_index, ground_truth=True),
                _segments(pred_entry, pred_json, class_index, ground_truth=False),
                os.path.join(gt_folder, gt_entry[1]["file_name"]),
                os.path.join(pred_folder, pred_entry[1]["file_name"]),
            )
        )
    return categories, pairs


def read_ids(path: str) -> np.ndarray:
    """The segment ids of the RGB PNG ``path`` (uint32, ``R + 256 G + 256^2 B``)."""
    try:
        with Image.open(path) as image:
            if image.mode != "RGB":
                raise PanopticFileError(f"{path}: a panoptic PNG is RGB, got mode {image.mode!r}")
            rgba = np.asarray(image.convert("RGBA"))
    except OSError as error:
        raise PanopticFileError(f"{path}: cannot be read as a PNG ({error})") from None
    return rgba.view("<u4")[..., 0] & 0xFFFFFF  # R + G << 8 + B << 16 (+ alpha << 24, masked)


def check_prediction_ids(pair: ImagePair, pixels: np.ndarray, unlisted: np.ndarray) -> None:
    """Every id of the prediction's PNG but VOID has a segment in its JSON (``unlisted``: an id that has none, if
    any), and every segment has pixels (``pixels``, per segment)."""
    if len(unlisted):
        raise PanopticFileError(
            f"{pair.pred_png}: image_id {pair.image_id!r} has pixels of segment id {int(unlisted[0])}, which its "
            "prediction's segments_info does not list"
        )
    missing = pair.pred.ids[pixels == 0]
    if len(missing):
        raise PanopticFileError(
            f"{pair.pred_png}: image_id {pair.image_id!r}: segment id {int(missing[0])} of the prediction's "
            "segments_info has no pixel in the PNG"
        )


def check_ground_truth_areas(pair: ImagePair, pixels: np.ndarray) -> None:
    """Each ground-truth segment's JSON 'area' (its area in the IoUs) is at least its pixels in the PNG."""
    short = np.flatnonzero(pair.gt.areas < pixels)
    if len(short):
        segment_id, area = int(pair.gt.ids[short[0]]), float(pair.gt.areas[short[0]])
        raise PanopticFileError(
            f"{pair.gt_png}: image_id {pair.image_id!r}: segment id {segment_id} has {int(pixels[short[0]])} pixels, "
            f"more than its 'area' {area:g} in the ground truth's segments_info"
        )


def png_bytes(ids: np.ndarray) -> bytes:
    """The RGB PNG of the segment ids ``ids`` (``R + 256 G + 256^2 B``; ids in [0, 2^24))."""
    rgb = np.stack([ids % 256, ids // 256 % 256, ids // 65536 % 256], axis=-1).astype(np.uint8)
    with io.BytesIO() as out:
        Image.fromarray(rgb).save(out, format="PNG")
        return out.getvalue()
