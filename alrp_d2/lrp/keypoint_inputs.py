"""The inputs of keypoint LRP checked and turned into arrays: the per-class OKS sigmas and the per-image dicts of
:class:`~alrp_d2.lrp.LRP` (torchvision's Keypoint R-CNN format); COCO's keypoint annotations and results, checked by
:mod:`.coco_entries`, read. Every error names what is wrong: the argument, or the list, the image index and the key."""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from .keypoint_similarity import COCO_PERSON_SIGMAS, keypoint_extent

#: OKS sigmas: one sequence (every class), or one per class (label or category id); None: COCO's person sigmas.
KeypointSigmas = Union[None, Sequence[float], Mapping[int, Sequence[float]]]
CheckedSigmas = Union[np.ndarray, Dict[int, np.ndarray]]


def _sigma_row(values: Any, what: str) -> np.ndarray:
    row = np.asarray(values, dtype=np.float64)
    if row.ndim != 1 or len(row) == 0 or not np.all(np.isfinite(row) & (row > 0)):
        raise ValueError(f"{what} must be a non-empty sequence of positive finite sigmas, got {values!r:.200}")
    return row


def checked_sigmas(keypoint_sigmas: KeypointSigmas, iou_type: str) -> Optional[CheckedSigmas]:
    """``keypoint_sigmas`` checked: positive and finite, every class with as many keypoints; None, and none may be
    given, unless ``iou_type`` is "keypoints"."""
    if iou_type != "keypoints":
        if keypoint_sigmas is not None:
            raise ValueError(f"keypoint_sigmas are for iou_type='keypoints', not {iou_type!r}")
        return None
    if keypoint_sigmas is None:
        return COCO_PERSON_SIGMAS
    if not isinstance(keypoint_sigmas, Mapping):
        return _sigma_row(keypoint_sigmas, "keypoint_sigmas")
    rows = {int(c): _sigma_row(values, f"keypoint_sigmas[{c!r}]") for c, values in keypoint_sigmas.items()}
    if not rows or len({len(row) for row in rows.values()}) != 1:
        raise ValueError(
            "keypoint_sigmas must give every class the same number of keypoints, got "
            f"{ {c: len(row) for c, row in rows.items()} }"
        )
    return rows


def keypoint_count(sigmas: CheckedSigmas) -> int:
    """K, the number of keypoints of every class."""
    return len(sigmas) if isinstance(sigmas, np.ndarray) else len(next(iter(sigmas.values())))


def keypoints_of(keypoint_sigmas: KeypointSigmas, iou_type: str) -> int:
    """K, the keypoints of every object with ``iou_type`` "keypoints" (``keypoint_sigmas`` checked); 0 otherwise."""
    checked = checked_sigmas(keypoint_sigmas, iou_type)
    return 0 if checked is None else keypoint_count(checked)


def sigmas_of_classes(sigmas: CheckedSigmas, class_ids: Sequence[int]) -> np.ndarray:
    """The sigmas of each class (C x K), in the order of ``class_ids``."""
    if isinstance(sigmas, np.ndarray):
        return np.tile(sigmas, (len(class_ids), 1))
    missing = [c for c in class_ids if int(c) not in sigmas]
    if missing:
        raise ValueError(f"keypoint_sigmas has no sigmas for the classes {missing} (it has {sorted(sigmas)})")
    return np.stack([sigmas[int(c)] for c in class_ids]) if class_ids else np.zeros((0, keypoint_count(sigmas)))


def coco_keypoints(records: List[Dict[str, Any]], count: int) -> np.ndarray:
    """The ``keypoints`` of checked COCO annotations or results (:mod:`.coco_entries`) as an N x K x 3 array."""
    values = chain.from_iterable(map(itemgetter("keypoints"), records))
    return np.fromiter(values, dtype=np.float64, count=3 * count * len(records)).reshape(len(records), count, 3)


def _keypoints_key(entry: Mapping[str, Any], where: str, rows: int, count: int, columns: Sequence[int]) -> np.ndarray:
    if "keypoints" not in entry:
        raise ValueError(f"{where} has no 'keypoints' (keys: {sorted(entry)})")
    value = entry["keypoints"]
    keypoints = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value, dtype=np.float64)
    if keypoints.ndim != 3 or keypoints.shape[:2] != (rows, count) or keypoints.shape[2] not in columns:
        raise ValueError(
            f"{where}['keypoints'] must have shape ({rows}, {count}, {' or '.join(map(str, columns))}) for {rows} "
            f"labels and {count} sigmas, got {tuple(keypoints.shape)}"
        )
    if not np.all(np.isfinite(keypoints)):
        raise ValueError(f"{where}['keypoints'] holds NaN or infinite values")
    return keypoints


def prediction_keypoints(entry: Mapping[str, Any], where: str, rows: int, count: int) -> Dict[str, Any]:
    """Predicted ``keypoints`` (N x K x 2, or 3 with a score column, unused), with the box and area they span (as
    pycocotools' ``loadRes`` gives keypoint results)."""
    keypoints = _keypoints_key(entry, where, rows, count, (2, 3))[:, :, :2]
    box = keypoint_extent(keypoints)
    return {"box": box, "area": box[:, 2] * box[:, 3], "masks": None, "keypoints": keypoints}


def target_keypoints(
    entry: Mapping[str, Any], where: str, rows: int, count: int, boxes: np.ndarray, area: Optional[np.ndarray]
) -> Dict[str, Any]:
    """Ground-truth ``keypoints`` (M x K x 3: x, y, COCO's visibility, 0 for unlabelled) with their XYWH ``boxes``
    and the objects' areas (the boxes' when ``area`` is None); ``num_keypoints`` counts the labelled ones."""
    keypoints = _keypoints_key(entry, where, rows, count, (3,))
    if area is None:
        area = boxes[:, 2] * boxes[:, 3]
    return {
        "box": boxes,
        "area": area,
        "masks": None,
        "keypoints": keypoints,
        "num_keypoints": np.count_nonzero(keypoints[:, :, 2] > 0, axis=1),
    }
