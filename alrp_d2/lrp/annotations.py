"""Detections and ground truths of a whole evaluation as flat arrays (one row per box, mask or keypoint set, all
images), the input of :mod:`.matching`. Boxes are COCO ``[x, y, width, height]``; masks are COCO RLEs (pycocotools);
keypoints are N x K x 3 (x, y and, for ground truths, COCO's visibility: 0 unlabelled)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

import numpy as np

#: COCO's area range 'all' (pycocotools ``Params.areaRng[0]``): a ground truth outside it is ignored.
AREA_ALL = (0.0, 1e5**2)


@dataclass(frozen=True)
class Detections:
    """``image`` (index), ``label`` (class index), ``score``, ``box`` (N x 4 XYWH), ``area`` (the box's or the
    mask's) and, for segmentation, ``masks`` (one RLE per row), for keypoint detection ``keypoints``."""

    image: np.ndarray
    label: np.ndarray
    score: np.ndarray
    box: np.ndarray
    area: np.ndarray
    masks: Optional[List[Any]] = None
    keypoints: Optional[np.ndarray] = None


@dataclass(frozen=True)
class GroundTruths:
    """As :class:`Detections`, with ``crowd`` (COCO ``iscrowd``: a region that detections may hit without being
    false positives) instead of a score, and for keypoint detection COCO's ``num_keypoints`` (the labelled ones)."""

    image: np.ndarray
    label: np.ndarray
    crowd: np.ndarray
    box: np.ndarray
    area: np.ndarray
    masks: Optional[List[Any]] = None
    keypoints: Optional[np.ndarray] = None
    num_keypoints: Optional[np.ndarray] = None

    @property
    def ignored(self) -> np.ndarray:
        """COCOeval's ignore flag: a crowd, an area outside the range 'all' or, with keypoints, no labelled one."""
        ignored = self.crowd | (self.area < AREA_ALL[0]) | (self.area > AREA_ALL[1])
        return ignored if self.num_keypoints is None else ignored | (self.num_keypoints == 0)


def xyxy_to_xywh(boxes: np.ndarray) -> np.ndarray:
    """``[x1, y1, x2, y2]`` rows to COCO's ``[x, y, width, height]``."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
