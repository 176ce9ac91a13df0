"""The test-time resize of the config (INPUT.TEST_RESIZE): detectron2's ``ResizeShortestEdge`` or mmcv's
``imrescale``, which the official models were evaluated with (docs/paper_notes.md, "Test-time resize")."""

from __future__ import annotations

from typing import Tuple

import numpy as np
from detectron2.config import CfgNode
from detectron2.data import transforms as T
from detectron2.data.detection_utils import build_augmentation
from fvcore.transforms.transform import Transform
from PIL import Image

from .augmentation import Cv2ResizeTransform

__all__ = ["MmcvRescale", "build_test_resize", "mmcv_rescale_size"]


def mmcv_rescale_size(height: int, width: int, short_edge: int, long_edge: int) -> Tuple[int, int]:
    """(new height, new width) of mmcv's ``rescale_size`` (mmdetection's ``Resize(keep_ratio=True)``): the
    largest scale that keeps the short side <= ``short_edge`` and the long side <= ``long_edge``, each side
    rounded half up."""
    scale = min(long_edge / max(height, width), short_edge / min(height, width))
    return int(height * scale + 0.5), int(width * scale + 0.5)


class MmcvRescale(T.Augmentation):
    """Resize keeping the aspect ratio to :func:`mmcv_rescale_size`, with ``cv2.resize(..., INTER_LINEAR)``
    (mmcv's ``imrescale``: no antialiasing). detectron2's ``ResizeShortestEdge`` computes the size in another
    order and resizes with PIL, which antialiases when it shrinks."""

    def __init__(self, short_edge: int, long_edge: int):
        super().__init__()
        self.short_edge = short_edge
        self.long_edge = long_edge

    def get_transform(self, image: np.ndarray) -> Transform:
        height, width = image.shape[:2]
        new_height, new_width = mmcv_rescale_size(height, width, self.short_edge, self.long_edge)
        return Cv2ResizeTransform(height, width, new_height, new_width, Image.Resampling.BILINEAR)


def build_test_resize(cfg: CfgNode) -> T.Augmentation:
    """The test-time resize of INPUT.TEST_RESIZE to INPUT.MIN_SIZE_TEST / MAX_SIZE_TEST: "detectron2" is
    detectron2's ``ResizeShortestEdge`` (its ``build_augmentation`` at test time), "mmcv" :class:`MmcvRescale`."""
    if cfg.INPUT.TEST_RESIZE == "mmcv":
        return MmcvRescale(cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST)
    return build_augmentation(cfg, is_train=False)[0]
