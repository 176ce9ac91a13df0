"""Validation of instance segmentations (COCO's ``segmentation``: polygons or RLE) before anything
rasterises them: pycocotools' polygon rasteriser allocates without bound on a NaN coordinate, and
its RLE decoder writes past the mask when the counts exceed ``height * width``.

A segmentation is usable when it is

- a non-empty list of polygons, each a list of finite numbers ``[x1, y1, x2, y2, ...]`` of even
  length >= 6 (three points), within one image size of the image (:func:`coordinate_bounds`:
  pycocotools' rasteriser overflows and crashes on a coordinate of 1e9), whose extent overlaps the
  image and the annotation's box (a polygon that misses either would train on an empty mask); or
- an RLE ``{"size": [height, width], "counts": ...}`` of the image's size whose counts (a list of
  integers >= 0, or COCO's compressed string) add up to ``height * width``.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

__all__ = ["compressed_rle_counts", "coordinate_bounds", "segmentation_problem"]

MASK_NEEDED = "a mask model (MODEL.MASK_ON, a LazyConfig's model.roi_heads.mask_head) needs a mask for every annotation"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def coordinate_bounds(width: int, height: int) -> Tuple[float, float, float, float]:
    """(x low, y low, x high, y high): the region, one image size around a ``width`` x ``height`` image, where
    annotations' coordinates may lie (a little outside the image is common; far outside is an error of the data)."""
    return -width, -height, 2 * width, 2 * height


def compressed_rle_counts(text: str, limit: int) -> Optional[List[int]]:
    """The run lengths of COCO's compressed RLE string (pycocotools' ``rleFrString``: 6-bit groups
    offset by 48, each count after the second one stored as the difference to the count two
    places before), or None when the string is malformed, a count is negative or their sum
    exceeds ``limit``."""
    counts: List[int] = []
    total = 0
    position = 0
    while position < len(text):
        value, shift, more = 0, 0, True
        while more:
            if position >= len(text):
                return None
            code = ord(text[position]) - 48
            if not 0 <= code < 64:
                return None
            value |= (code & 0x1F) << shift
            more = bool(code & 0x20)
            position += 1
            shift += 5
            if not more and code & 0x10:
                value -= 1 << shift
        if len(counts) > 2:
            value += counts[-2]
        if value < 0:
            return None
        total += value
        if total > limit:
            return None
        counts.append(value)
    return counts


def _rle_problem(rle: dict, width: int, height: int) -> Optional[str]:
    if not {"size", "counts"} <= set(rle):
        return f"an RLE segmentation needs 'size' and 'counts', got the keys {sorted(map(str, rle))}"
    size = list(rle["size"]) if isinstance(rle["size"], (list, tuple)) else rle["size"]
    if size != [height, width]:
        return f"RLE size {size!r} is not the image's [height, width] [{height}, {width}]"
    counts = rle["counts"]
    pixels = height * width
    if isinstance(counts, bytes):
        try:
            counts = counts.decode("ascii")
        except UnicodeDecodeError:
            return "RLE counts are bytes that are not ASCII (not COCO's compressed RLE)"
    if isinstance(counts, str):
        decoded = compressed_rle_counts(counts, pixels)
        if decoded is None or sum(decoded) != pixels:
            return f"RLE counts {counts[:40]!r} are not a compressed RLE of {height} x {width} = {pixels} pixels"
        return None
    if not isinstance(counts, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return f"RLE counts must be a list of integers or a compressed string, got {type(counts).__name__}"
    if any(c < 0 for c in counts) or sum(counts) != pixels:
        return f"RLE counts add up to {sum(counts)} (or are negative): the image has {height} x {width} = {pixels}"
    return None


def _overlaps(low: Sequence[float], high: Sequence[float], box: Sequence[float]) -> bool:
    """Whether the extent [low, high] (x, y) overlaps ``box`` (x1, y1, x2, y2) with a positive area."""
    return min(high[0], box[2]) > max(low[0], box[0]) and min(high[1], box[3]) > max(low[1], box[1])


def _polygons_problem(
    polygons: list, width: int, height: int, bbox: Optional[Sequence[float]], required: bool
) -> Optional[str]:
    if not polygons:
        return f"the segmentation is empty ({MASK_NEEDED})" if required else None
    if all(_is_number(v) for v in polygons):
        return "the segmentation is a flat list of numbers: polygons are lists inside a list, [[x1, y1, x2, y2, ...]]"
    xs: List[float] = []
    ys: List[float] = []
    for index, polygon in enumerate(polygons):
        where = f"polygon {index}"
        if not isinstance(polygon, list) or not all(_is_number(v) for v in polygon):
            shown = repr(polygon)[:60]
            return f"{where} must be a list of numbers [x1, y1, x2, y2, ...], got {shown}"
        if not all(math.isfinite(v) for v in polygon):
            return f"{where} has a coordinate that is not finite (nan or inf)"
        if len(polygon) % 2 or len(polygon) < 6:
            return f"{where} has {len(polygon)} coordinates: a polygon needs an even number, at least 6 (3 points)"
        x_low, y_low, x_high, y_high = coordinate_bounds(width, height)
        far = [
            (x, y) for x, y in zip(polygon[0::2], polygon[1::2]) if not (x_low <= x <= x_high and y_low <= y <= y_high)
        ]
        if far:
            return (
                f"{where} has {len(far)} point(s) more than one image size outside its {width} x {height} image "
                f"(x in [{x_low}, {x_high}], y in [{y_low}, {y_high}]), e.g. ({far[0][0]:g}, {far[0][1]:g})"
            )
        xs.extend(polygon[0::2])
        ys.extend(polygon[1::2])
    low, high = (min(xs), min(ys)), (max(xs), max(ys))
    extent = f"the polygons' extent x {low[0]:g}..{high[0]:g}, y {low[1]:g}..{high[1]:g}"
    if not _overlaps(low, high, (0, 0, width, height)):
        return f"{extent} lies outside its {width} x {height} image (the mask would be empty)"
    if bbox is not None and not _overlaps(low, high, (bbox[0], bbox[1], bbox[0] + bbox[2], bbox[1] + bbox[3])):
        return f"{extent} does not overlap its bbox {list(bbox)} (the mask would be empty)"
    return None


def segmentation_problem(
    segmentation: Any, width: int, height: int, bbox: Optional[Sequence[float]] = None, required: bool = False
) -> Optional[str]:
    """Why ``segmentation`` of an annotation of a ``width`` x ``height`` image with the box ``bbox``
    ([x, y, width, height], absolute; None: not checked against it) cannot be used (module
    docstring), or None. ``required``: the model trains or evaluates masks, so that a missing or
    empty segmentation is a problem too (otherwise detectron2 ignores it)."""
    if segmentation is None:
        return f"no segmentation ({MASK_NEEDED})" if required else None
    if isinstance(segmentation, dict):
        if not segmentation:
            return f"the segmentation is empty ({MASK_NEEDED})" if required else None
        return _rle_problem(segmentation, width, height)
    if isinstance(segmentation, list):
        return _polygons_problem(segmentation, width, height, bbox, required)
    return (
        "segmentation must be a list of polygons [[x1, y1, ...], ...] or an RLE {'size', 'counts'}, got "
        f"{type(segmentation).__name__}"
    )
