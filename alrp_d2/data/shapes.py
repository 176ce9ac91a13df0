"""Embedded synthetic detection dataset ("shapes") in COCO format, for a CPU quickstart.

Filled shapes of five classes, 14-64 px, random saturated colours, on textured backgrounds (gradient,
low-frequency noise, distractor lines and blurred blobs, pixel noise). 1-6 objects per image with
limited occlusion, tight boxes and instance masks (COCO RLE, exact) of the visible pixels. Every 50th
image (2%) has no object and every 20th image (5%) has one crowd region (``iscrowd=1``: a cluster of
small shapes), so any 50 consecutive images exercise both. Generated deterministically (one seed per
split) on first use into ``<root>/shapes``, atomically, and registered as ``shapes_train`` /
``shapes_val`` in detectron2's catalogs. OpenCV is imported where an image is drawn, so that importing the package
does not need it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from functools import partial
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets import load_coco_json
from pycocotools import mask as mask_util

__all__ = [
    "SHAPES_CLASSES",
    "SHAPES_DATASETS",
    "SHAPES_SPLIT_SIZES",
    "SHAPES_SPLIT_SEEDS",
    "DATASETS_ROOT_ENV",
    "default_datasets_root",
    "shapes_paths",
    "prepare_shapes_dataset",
    "register_shapes_datasets",
]

logger = logging.getLogger(__name__)

SHAPES_CLASSES = ("circle", "square", "triangle", "ring", "cross")
SHAPES_DATASETS = {"shapes_train": "train", "shapes_val": "val"}
SHAPES_SPLIT_SIZES = {"train": 2000, "val": 300}
SHAPES_SPLIT_SEEDS = {"train": 2020, "val": 2021}
DATASETS_ROOT_ENV = "ALRP_D2_DATASETS"

_IMAGE_SIZE = 128
_MIN_IMAGE_SIZE = 100  # room for the biggest (rotated) shape with its margin
_OBJECT_SIZE_RANGE = (14.0, 64.0)
_MAX_OBJECTS = 6
_EMPTY_IMAGE_PERIOD = 50
_CROWD_IMAGE_PERIOD = 20
_MAX_OCCLUDED_FRACTION = 0.25
_MIN_VISIBLE_AREA = 40
_PLACEMENT_TRIALS = 20
_JPEG_QUALITY = 92
#: Version of the files: 2 added the instance masks. A dataset of another version is regenerated
#: (the same images: the masks take nothing from the random stream).
_FORMAT_VERSION = 2


def default_datasets_root() -> str:
    """``$ALRP_D2_DATASETS`` or ``~/.cache/alrp_d2/datasets``."""
    return os.environ.get(DATASETS_ROOT_ENV) or os.path.join("~", ".cache", "alrp_d2", "datasets")


def _resolve_root(root: Optional[str]) -> str:
    return os.path.abspath(os.path.expanduser(root if root is not None else default_datasets_root()))


def shapes_paths(root: str, split: str) -> Tuple[str, str]:
    """(json_file, image_root) of a split of the shapes dataset under the datasets ``root``."""
    base = os.path.join(root, "shapes")
    return os.path.join(base, "annotations", f"instances_{split}.json"), os.path.join(base, split)


# ---- drawing -------------------------------------------------------------------------------------


def _hsv_colour(rng: np.random.Generator, saturation: Tuple[float, float], value: Tuple[float, float]) -> np.ndarray:
    """A BGR uint8 colour with random hue and saturation / value (fractions) in the given ranges."""
    import cv2

    hsv = np.array([[[rng.uniform(0, 180), rng.uniform(*saturation) * 255, rng.uniform(*value) * 255]]])
    return cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2BGR)[0, 0].astype(np.float32)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Gradient between two dull colours + low-frequency noise + distractor lines and blurred blobs."""
    import cv2

    start, end = (_hsv_colour(rng, (0.0, 0.35), (0.15, 0.75)) for _ in range(2))
    angle = rng.uniform(0, 2 * np.pi)
    steps = np.arange(size, dtype=np.float32) / size
    t = (steps[None, :] * np.cos(angle) + steps[:, None] * np.sin(angle) + 1.0) / 2.0
    image = start * (1 - t[..., None]) + end * t[..., None]
    coarse = rng.normal(0, 12, (6, 6, 3)).astype(np.float32)
    image += cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC)
    for _ in range(rng.integers(0, 3)):
        blob = np.zeros((size, size), np.float32)
        center = tuple(int(v) for v in rng.integers(0, size, 2))
        axes = tuple(int(v) for v in rng.integers(6, 24, 2))
        cv2.ellipse(blob, center, axes, float(rng.uniform(0, 180)), 0, 360, 1.0, -1)
        alpha = cv2.GaussianBlur(blob, (0, 0), 5)[..., None] * 0.6
        image = image * (1 - alpha) + _hsv_colour(rng, (0.0, 0.6), (0.2, 0.9)) * alpha
    for _ in range(rng.integers(1, 5)):
        p0, p1 = (tuple(int(v) for v in rng.integers(0, size, 2)) for _ in range(2))
        cv2.line(image, p0, p1, _hsv_colour(rng, (0.0, 1.0), (0.2, 1.0)).tolist(), int(rng.integers(1, 3)))
    return image


def _rotated(points: np.ndarray, angle_deg: float, center: np.ndarray) -> np.ndarray:
    angle = np.deg2rad(angle_deg)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    return points @ rotation.T + center


def _fill_polygons(mask: np.ndarray, polygons: List[np.ndarray]) -> None:
    """Fills each polygon (union; one fillPoly call would leave the overlap empty, even-odd rule)."""
    import cv2

    for polygon in polygons:
        cv2.fillPoly(mask, [np.round(polygon * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)


def _draw_circle(mask: np.ndarray, center: np.ndarray, size: float, angle: float) -> None:
    import cv2

    cv2.circle(mask, tuple(int(v) for v in np.round(center * 16)), int(round(size * 8)), 1, -1, cv2.LINE_8, 4)


def _draw_ring(mask: np.ndarray, center: np.ndarray, size: float, angle: float) -> None:
    import cv2

    _draw_circle(mask, center, size, angle)
    cv2.circle(mask, tuple(int(v) for v in np.round(center * 16)), int(round(size * 8 * 0.55)), 0, -1, cv2.LINE_8, 4)


def _draw_square(mask: np.ndarray, center: np.ndarray, size: float, angle: float) -> None:
    corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float64) * size * 0.4
    _fill_polygons(mask, [_rotated(corners, angle, center)])


def _draw_triangle(mask: np.ndarray, center: np.ndarray, size: float, angle: float) -> None:
    directions = np.deg2rad([-90.0, 30.0, 150.0])
    corners = np.stack([np.cos(directions), np.sin(directions)], axis=1) * size * 0.55
    _fill_polygons(mask, [_rotated(corners, angle, center)])


def _draw_cross(mask: np.ndarray, center: np.ndarray, size: float, angle: float) -> None:
    bar = np.array([[-0.5, -0.15], [0.5, -0.15], [0.5, 0.15], [-0.5, 0.15]]) * size
    _fill_polygons(mask, [_rotated(bar, angle, center), _rotated(bar, angle + 90, center)])


_DRAWERS: Tuple[Callable[[np.ndarray, np.ndarray, float, float], None], ...] = (
    _draw_circle,
    _draw_square,
    _draw_triangle,
    _draw_ring,
    _draw_cross,
)
_MAX_ROTATION = (0.0, 15.0, 20.0, 0.0, 15.0)


def _shape_mask(rng: np.random.Generator, class_id: int, size: float, image_size: int) -> np.ndarray:
    """Binary mask of one shape of ``class_id`` at a random position fully inside the image."""
    margin = size * 0.75 + 1
    center = rng.uniform(margin, image_size - margin, 2)
    angle = rng.uniform(-_MAX_ROTATION[class_id], _MAX_ROTATION[class_id])
    mask = np.zeros((image_size, image_size), np.uint8)
    _DRAWERS[class_id](mask, center, size, angle)
    return mask.astype(bool)


def _occludes_too_much(new_mask: np.ndarray, owner: np.ndarray, full_areas: List[int]) -> bool:
    """Whether ``new_mask`` would leave an earlier object (or crowd) with less than
    1 - _MAX_OCCLUDED_FRACTION of its pixels visible."""
    visible = np.bincount(owner[(owner >= 0) & ~new_mask], minlength=len(full_areas))
    return bool(np.any(visible < (1 - _MAX_OCCLUDED_FRACTION) * np.asarray(full_areas)))


def _tight_box(mask: np.ndarray) -> List[int]:
    """COCO [x, y, w, h] of the pixels of ``mask`` (pixel edges, so w = number of columns)."""
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)]


def _crowd_mask(rng: np.random.Generator, class_id: int, image_size: int) -> np.ndarray:
    """A cluster of 4-7 small shapes of one class in a ~36 px region (one crowd annotation)."""
    origin = rng.uniform(4, image_size - 40, 2)
    mask = np.zeros((image_size, image_size), np.uint8)
    for _ in range(rng.integers(4, 8)):
        _DRAWERS[class_id](mask, origin + rng.uniform(4, 32, 2), rng.uniform(7, 10), 0.0)
    return mask.astype(bool)


def _render_image(rng: np.random.Generator, index: int, image_size: int) -> Tuple[np.ndarray, List[Dict[str, Any]]]:
    """Image ``index`` (0-based) of a split and its annotations (``category_id`` 1-based, ``bbox``,
    ``area``, ``iscrowd``)."""
    image = _background(rng, image_size)
    owner = np.full((image_size, image_size), -1, np.int64)
    objects = _paint_objects(rng, index, image, owner) if index % _EMPTY_IMAGE_PERIOD != _EMPTY_IMAGE_PERIOD - 1 else []
    image += rng.normal(0, 5, image.shape).astype(np.float32)
    annotations = [_annotation(owner == k, class_id, iscrowd) for k, (class_id, iscrowd) in enumerate(objects)]
    visible = [a for a in annotations if a["area"] >= _MIN_VISIBLE_AREA]
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), visible


def _paint_objects(rng: np.random.Generator, index: int, image: np.ndarray, owner: np.ndarray) -> List[Tuple[int, int]]:
    """Paints a crowd region (every _CROWD_IMAGE_PERIOD-th image) then 1-6 shapes; returns their
    (class_id, iscrowd); ``owner`` gets, per pixel, the index of the object visible there (-1: none)."""
    objects: List[Tuple[int, int]] = []
    full_areas: List[int] = []
    if index % _CROWD_IMAGE_PERIOD == _CROWD_IMAGE_PERIOD // 2:
        class_id = int(rng.integers(len(SHAPES_CLASSES)))
        mask = _crowd_mask(rng, class_id, owner.shape[0])
        _paint(image, owner, mask, len(objects), rng)
        objects.append((class_id, 1))
        full_areas.append(int(mask.sum()))
    for _ in range(rng.integers(1, _MAX_OBJECTS + 1)):
        class_id = int(rng.integers(len(SHAPES_CLASSES)))
        placed = _place_shape(rng, class_id, owner, full_areas)
        if placed is not None:
            _paint(image, owner, placed, len(objects), rng)
            objects.append((class_id, 0))
            full_areas.append(int(placed.sum()))
    return objects


def _annotation(visible_mask: np.ndarray, class_id: int, iscrowd: int) -> Dict[str, Any]:
    """COCO annotation (without ids) of an object from its visible pixels: the tight box and the
    pixels themselves as compressed RLE (exact, holes included: a ring's, or an occluder's)."""
    area = int(visible_mask.sum())
    bbox = _tight_box(visible_mask) if area else [0, 0, 0, 0]
    rle = mask_util.encode(np.asfortranarray(visible_mask.astype(np.uint8)))
    segmentation = {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}
    return {"category_id": class_id + 1, "bbox": bbox, "area": area, "iscrowd": iscrowd, "segmentation": segmentation}


def _place_shape(
    rng: np.random.Generator, class_id: int, owner: np.ndarray, full_areas: List[int]
) -> Optional[np.ndarray]:
    """Mask of a randomly placed shape that occludes no earlier object too much, or None."""
    for _ in range(_PLACEMENT_TRIALS):
        mask = _shape_mask(rng, class_id, rng.uniform(*_OBJECT_SIZE_RANGE), owner.shape[0])
        if not _occludes_too_much(mask, owner, full_areas):
            return mask
    return None


def _paint(image: np.ndarray, owner: np.ndarray, mask: np.ndarray, index: int, rng: np.random.Generator) -> None:
    image[mask] = _hsv_colour(rng, (0.6, 1.0), (0.6, 1.0))
    owner[mask] = index


# ---- files ---------------------------------------------------------------------------------------


def _write_split(base: str, split: str, num_images: int, seed: int, image_size: int) -> None:
    """Renders a split into ``base/<split>/*.jpg`` and ``base/annotations/instances_<split>.json``."""
    import cv2

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(base, split))
    images: List[Dict[str, Any]] = []
    annotations: List[Dict[str, Any]] = []
    for image_id in range(1, num_images + 1):
        image, objects = _render_image(rng, image_id - 1, image_size)
        file_name = f"{image_id:06d}.jpg"
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY])
        if not ok:
            raise RuntimeError(f"Could not encode shapes image {file_name}")
        with open(os.path.join(base, split, file_name), "wb") as f:
            f.write(encoded.tobytes())
        images.append({"id": image_id, "file_name": file_name, "height": image_size, "width": image_size})
        for obj in objects:
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, **obj})
    coco = {
        "info": {"description": f"alrp_d2 synthetic shapes, split {split}, seed {seed}", "version": _FORMAT_VERSION},
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": name, "supercategory": "shape"} for i, name in enumerate(SHAPES_CLASSES)],
    }
    with open(os.path.join(base, "annotations", f"instances_{split}.json"), "w") as f:
        json.dump(coco, f)


def _is_complete(root: str, splits: Mapping[str, int]) -> bool:
    return all(os.path.isfile(shapes_paths(root, split)[0]) for split in splits)


def _is_current(root: str, splits: Mapping[str, int]) -> bool:
    """Whether every split's annotation file is of :data:`_FORMAT_VERSION`."""
    for split in splits:
        with open(shapes_paths(root, split)[0]) as f:
            if json.load(f).get("info", {}).get("version") != _FORMAT_VERSION:
                return False
    return True


def prepare_shapes_dataset(
    root: Optional[str] = None, num_images: Optional[Mapping[str, int]] = None, image_size: int = _IMAGE_SIZE
) -> str:
    """Generates the shapes dataset into ``<root>/shapes`` unless it exists; returns that directory.

    ``num_images`` maps split -> image count (default ``SHAPES_SPLIT_SIZES``); an existing complete
    dataset of the current format is reused as is, one of an older format (without masks) is
    regenerated. The files are written into a temporary directory next to the target and renamed
    into place, so concurrent processes never see (or leave) a partial dataset.
    """
    root = _resolve_root(root)
    num_images = dict(SHAPES_SPLIT_SIZES if num_images is None else num_images)
    unknown = set(num_images) - set(SHAPES_SPLIT_SEEDS)
    if unknown:
        raise ValueError(f"Unknown shapes splits {sorted(unknown)}: expected some of {sorted(SHAPES_SPLIT_SEEDS)}")
    if image_size < _MIN_IMAGE_SIZE:
        raise ValueError(f"Shapes image_size={image_size} is too small: must be >= {_MIN_IMAGE_SIZE}")
    target = os.path.join(root, "shapes")
    if os.path.isdir(target):
        if not _is_complete(root, num_images):
            raise RuntimeError(f"Incomplete shapes dataset at {target}: delete this directory to regenerate it")
        if _is_current(root, num_images):
            return target
        logger.info("The shapes dataset at %s has no instance masks: regenerating it", target)
    os.makedirs(root, exist_ok=True)
    logger.info(
        "Generating the synthetic shapes dataset (%s images) into %s: once, about 10 s for the full set",
        " + ".join(f"{count} {split}" for split, count in num_images.items()),
        target,
    )
    staging = tempfile.mkdtemp(prefix=".shapes-tmp-", dir=root)
    try:
        os.makedirs(os.path.join(staging, "annotations"))
        for split, count in num_images.items():
            _write_split(staging, split, count, SHAPES_SPLIT_SEEDS[split], image_size)
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("Shapes dataset ready at %s", target)
    return target


def _publish(staging: str, target: str) -> None:
    """Atomically renames ``staging`` to ``target`` (moving an outdated ``target`` aside first); if
    another process published first, keeps its copy."""
    if os.path.isdir(target):
        outdated = tempfile.mkdtemp(prefix=".shapes-outdated-", dir=os.path.dirname(target))
        try:
            os.replace(target, os.path.join(outdated, "shapes"))
        except OSError:
            pass  # another process moved it first
        finally:
            shutil.rmtree(outdated, ignore_errors=True)
    try:
        os.replace(staging, target)
    except OSError:
        if not os.path.isdir(target):
            raise


# ---- catalog registration ------------------------------------------------------------------------


def _load_split(root: str, split: str, dataset_name: str) -> List[Dict[str, Any]]:
    prepare_shapes_dataset(root)
    json_file, image_root = shapes_paths(root, split)
    return load_coco_json(json_file, image_root, dataset_name)


def _register_split(dataset_name: str, split: str, root: str) -> None:
    """Registers one split (no-op when registered with the same files; re-registered for another root)."""
    json_file, image_root = shapes_paths(root, split)
    if dataset_name in DatasetCatalog:
        if MetadataCatalog.get(dataset_name).get("json_file") == json_file:
            return
        DatasetCatalog.remove(dataset_name)
        MetadataCatalog.remove(dataset_name)
    DatasetCatalog.register(dataset_name, partial(_load_split, root, split, dataset_name))
    MetadataCatalog.get(dataset_name).set(
        json_file=json_file,
        image_root=image_root,
        evaluator_type="coco",
        thing_classes=list(SHAPES_CLASSES),
        thing_dataset_id_to_contiguous_id={i + 1: i for i in range(len(SHAPES_CLASSES))},
    )


def register_shapes_datasets(root: Optional[str] = None, *, eager: bool = True) -> None:
    """Registers ``shapes_train`` / ``shapes_val`` (idempotent). ``eager`` generates the files now
    (call it in the parent process before launching workers); otherwise they are generated on the
    first ``DatasetCatalog.get``. Registering again with another root re-points both names."""
    root = _resolve_root(root)
    if eager:
        prepare_shapes_dataset(root)
    for dataset_name, split in SHAPES_DATASETS.items():
        _register_split(dataset_name, split, root)
