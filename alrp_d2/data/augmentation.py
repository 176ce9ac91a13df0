"""SSD-style training augmentation (Liu et al., ECCV 2016) as detectron2 Augmentations.

The pipeline follows mmdetection's SSD training pipeline, which the aLRP Loss paper uses:
``PhotoMetricDistortion -> Expand -> MinIoURandomCrop -> Resize (no aspect ratio) -> RandomFlip``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch
from detectron2.config import CfgNode
from detectron2.data import detection_utils as utils
from detectron2.data import transforms as T
from detectron2.structures import Boxes, pairwise_iou
from fvcore.transforms.transform import CropTransform, NoOpTransform, PadTransform, Transform

from ..config import require_config

__all__ = [
    "PhotometricDistortionParams",
    "PhotometricDistortion",
    "ExpandTransform",
    "RandomExpand",
    "CenterFilteredCropTransform",
    "RandomMinIoUCrop",
    "SSD_IMAGE_FORMATS",
    "validate_ssd_config",
    "build_ssd_augmentation",
]

SSD_IMAGE_FORMATS = ("BGR", "RGB")
_TO_HSV = {"BGR": cv2.COLOR_BGR2HSV, "RGB": cv2.COLOR_RGB2HSV}
_FROM_HSV = {"BGR": cv2.COLOR_HSV2BGR, "RGB": cv2.COLOR_HSV2RGB}


@dataclass(frozen=True)
class PhotometricDistortionParams:
    """One draw of mmdet's ``PhotoMetricDistortion``; ``None`` means "step not applied".

    Called on a uint8 image, it returns the distorted uint8 image (used as a ``ColorTransform`` op).
    """

    brightness_delta: Optional[float]
    contrast: Optional[float]
    contrast_first: bool
    saturation: Optional[float]
    hue_delta: Optional[float]
    image_format: str = "BGR"

    def __call__(self, image: np.ndarray) -> np.ndarray:
        img = image.astype(np.float32)
        if self.brightness_delta is not None:
            img += self.brightness_delta
        if self.contrast_first:
            img = self._apply_contrast(img)
        if self.saturation is not None or self.hue_delta is not None:
            img = self._distort_hsv(img)
        if not self.contrast_first:
            img = self._apply_contrast(img)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    def _apply_contrast(self, img: np.ndarray) -> np.ndarray:
        return img if self.contrast is None else img * self.contrast

    def _distort_hsv(self, img: np.ndarray) -> np.ndarray:
        """Saturation scaling and hue shift (degrees) in float HSV; values are clipped to [0, 255]
        first because the HSV conversion is only defined for non-negative intensities."""
        hsv = cv2.cvtColor(np.clip(img, 0, 255), _TO_HSV[self.image_format])
        if self.saturation is not None:
            hsv[..., 1] *= self.saturation
        if self.hue_delta is not None:
            hsv[..., 0] = np.mod(hsv[..., 0] + self.hue_delta, 360.0)
        return cv2.cvtColor(hsv, _FROM_HSV[self.image_format])


class PhotometricDistortion(T.Augmentation):
    """mmdet ``PhotoMetricDistortion``: brightness, contrast (before or after the colour-space part,
    random order), saturation and hue, each applied with probability 0.5. Pixel values only."""

    def __init__(
        self,
        brightness_delta: float = 32,
        contrast_range: Tuple[float, float] = (0.5, 1.5),
        saturation_range: Tuple[float, float] = (0.5, 1.5),
        hue_delta: float = 18,
        image_format: str = "BGR",
    ):
        super().__init__()
        if image_format not in SSD_IMAGE_FORMATS:
            raise ValueError(f"PhotometricDistortion supports image formats {SSD_IMAGE_FORMATS}, got {image_format!r}")
        self._init(locals())

    def _maybe_uniform(self, low: float, high: float) -> Optional[float]:
        return float(np.random.uniform(low, high)) if np.random.randint(2) else None

    def get_transform(self, image: np.ndarray) -> Transform:
        brightness = self._maybe_uniform(-self.brightness_delta, self.brightness_delta)
        contrast_first = bool(np.random.randint(2))
        contrast = self._maybe_uniform(*self.contrast_range) if contrast_first else None
        saturation = self._maybe_uniform(*self.saturation_range)
        hue = self._maybe_uniform(-self.hue_delta, self.hue_delta)
        if not contrast_first:
            contrast = self._maybe_uniform(*self.contrast_range)
        params = PhotometricDistortionParams(brightness, contrast, contrast_first, saturation, hue, self.image_format)
        return T.ColorTransform(params)


class ExpandTransform(PadTransform):
    """Zoom-out: pads the image to a bigger canvas filled with a per-channel value (``pad_value``,
    one number per channel); segmentation is padded with ``seg_pad_value``. Boxes shift by (x0, y0)."""

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        h, w = img.shape[:2]
        fill = np.asarray(self.pad_value, dtype=np.float64)
        if np.issubdtype(img.dtype, np.integer):
            fill = np.rint(fill)
        canvas = np.empty((self.y0 + h + self.y1, self.x0 + w + self.x1) + img.shape[2:], dtype=img.dtype)
        canvas[...] = fill.astype(img.dtype)
        canvas[self.y0 : self.y0 + h, self.x0 : self.x0 + w] = img
        return canvas


class RandomExpand(T.Augmentation):
    """mmdet ``Expand``: with probability ``prob`` places the image at a random position of a canvas
    ``ratio`` times bigger (ratio uniform in ``ratio_range``) filled with ``fill`` (the pixel mean)."""

    def __init__(self, fill: Sequence[float], ratio_range: Tuple[float, float] = (1.0, 4.0), prob: float = 0.5):
        super().__init__()
        self.fill = tuple(float(v) for v in fill)
        self.ratio_range = tuple(ratio_range)
        self.prob = prob

    def get_transform(self, image: np.ndarray) -> Transform:
        if self._rand_range() >= self.prob:
            return NoOpTransform()
        h, w = image.shape[:2]
        ratio = np.random.uniform(self.ratio_range[0], self.ratio_range[1])
        canvas_h, canvas_w = int(h * ratio), int(w * ratio)
        left = int(np.random.uniform(0, canvas_w - w))
        top = int(np.random.uniform(0, canvas_h - h))
        return ExpandTransform(
            left, top, canvas_w - w - left, canvas_h - h - top, orig_w=w, orig_h=h, pad_value=self.fill
        )


def _centers_inside(boxes: np.ndarray, patches: np.ndarray) -> np.ndarray:
    """(P, N) mask: whether the centre of XYXY box n lies strictly inside XYXY patch p (mmdet's rule)."""
    centers = (boxes[None, :, :2] + boxes[None, :, 2:]) / 2
    patches = patches[:, None, :]
    return ((centers > patches[..., :2]) & (centers < patches[..., 2:])).all(axis=2)


class CenterFilteredCropTransform(CropTransform):
    """Crop of SSD / mmdet ``MinIoURandomCrop``: boxes are clipped to the crop, and boxes whose centre
    is not inside the crop become zero-area boxes ``(0, 0, 0, 0)``, which
    ``detectron2.data.detection_utils.filter_empty_instances`` removes (with their masks)."""

    def apply_box(self, box: np.ndarray) -> np.ndarray:
        box = np.asarray(box, dtype=np.float64).reshape(-1, 4)
        keep = _centers_inside(box, np.array([[self.x0, self.y0, self.x0 + self.w, self.y0 + self.h]]))[0]
        cropped = super().apply_box(box)
        cropped[:, 0::2] = cropped[:, 0::2].clip(0, self.w)
        cropped[:, 1::2] = cropped[:, 1::2].clip(0, self.h)
        cropped[~keep] = 0
        return cropped


class RandomMinIoUCrop(T.Augmentation):
    """SSD / mmdet ``MinIoURandomCrop``.

    A mode is drawn from (no crop, *min_ious); up to ``crop_trials`` crops with w, h uniform in
    [min_crop_size * W, W] x [min_crop_size * H, H] and 0.5 <= h / w <= 2 are tried; a crop is accepted
    when every box has IoU >= min_iou with it and at least one box centre is inside it. When no trial
    succeeds a new mode is drawn (as SSD); after ``max_mode_trials`` draws the image is left uncropped,
    so the loop always ends. Images without (non-empty) boxes are left uncropped.
    """

    def __init__(
        self,
        min_ious: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9),
        min_crop_size: float = 0.3,
        crop_trials: int = 50,
        max_mode_trials: int = 100,
    ):
        super().__init__()
        self.min_ious = tuple(float(v) for v in min_ious)
        self.min_crop_size = min_crop_size
        self.crop_trials = crop_trials
        self.max_mode_trials = max_mode_trials

    def get_transform(self, image: np.ndarray, boxes: Optional[np.ndarray]) -> Transform:
        if boxes is None:
            raise ValueError(
                "RandomMinIoUCrop needs the ground-truth boxes: use T.AugInput(image, boxes=...) "
                "(alrp_d2.data.AlrpDatasetMapper does it)"
            )
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        boxes = boxes[(boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])]
        if len(boxes) == 0:
            return NoOpTransform()
        h, w = image.shape[:2]
        for _ in range(self.max_mode_trials):
            mode = np.random.randint(len(self.min_ious) + 1)
            if mode == 0:
                return NoOpTransform()
            patch = self._sample_patch(h, w, boxes, self.min_ious[mode - 1])
            if patch is not None:
                x0, y0, x1, y1 = patch
                return CenterFilteredCropTransform(x0, y0, x1 - x0, y1 - y0, orig_w=w, orig_h=h)
        return NoOpTransform()

    def _sample_patch(self, h: int, w: int, boxes: np.ndarray, min_iou: float) -> Optional[Tuple[int, ...]]:
        """The first of ``crop_trials`` random patches (x0, y0, x1, y1) meeting the SSD constraints."""
        new_w = np.random.uniform(self.min_crop_size * w, w, size=self.crop_trials)
        new_h = np.random.uniform(self.min_crop_size * h, h, size=self.crop_trials)
        left = np.random.uniform(0, w - new_w)
        top = np.random.uniform(0, h - new_h)
        patches = np.stack([left, top, left + new_w, top + new_h], axis=1).astype(np.int64)
        aspect = new_h / new_w
        valid = (aspect >= 0.5) & (aspect <= 2) & (patches[:, 2] > patches[:, 0]) & (patches[:, 3] > patches[:, 1])
        ious = pairwise_iou(Boxes(torch.from_numpy(patches).double()), Boxes(torch.from_numpy(boxes))).numpy()
        valid &= ious.min(axis=1) >= min_iou
        valid &= _centers_inside(boxes, patches).any(axis=1)
        accepted = np.flatnonzero(valid)
        return tuple(int(v) for v in patches[accepted[0]]) if len(accepted) else None


def _is_range(value, low: float) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and low <= value[0] <= value[1]


def validate_ssd_config(cfg: CfgNode) -> None:
    """Raises ValueError naming the first invalid ``INPUT.SSD`` key (or INPUT.FORMAT / MODEL.PIXEL_MEAN)."""
    ssd = cfg.INPUT.SSD
    require_config(isinstance(ssd.SIZE, int) and ssd.SIZE > 0, "INPUT.SSD.SIZE", ssd.SIZE, "must be an integer > 0")
    require_config(
        0 <= ssd.BRIGHTNESS_DELTA <= 255, "INPUT.SSD.BRIGHTNESS_DELTA", ssd.BRIGHTNESS_DELTA, "must be in [0, 255]"
    )
    require_config(
        _is_range(ssd.CONTRAST_RANGE, 0),
        "INPUT.SSD.CONTRAST_RANGE",
        ssd.CONTRAST_RANGE,
        "must be (low, high) with 0 <= low <= high",
    )
    require_config(
        _is_range(ssd.SATURATION_RANGE, 0),
        "INPUT.SSD.SATURATION_RANGE",
        ssd.SATURATION_RANGE,
        "must be (low, high) with 0 <= low <= high",
    )
    require_config(0 <= ssd.HUE_DELTA <= 180, "INPUT.SSD.HUE_DELTA", ssd.HUE_DELTA, "must be in [0, 180] (degrees)")
    require_config(0 <= ssd.EXPAND_PROB <= 1, "INPUT.SSD.EXPAND_PROB", ssd.EXPAND_PROB, "must be in [0, 1]")
    require_config(
        _is_range(ssd.EXPAND_RATIO_RANGE, 1),
        "INPUT.SSD.EXPAND_RATIO_RANGE",
        ssd.EXPAND_RATIO_RANGE,
        "must be (low, high) with 1 <= low <= high",
    )
    require_config(
        isinstance(ssd.MIN_IOUS, (list, tuple)) and len(ssd.MIN_IOUS) > 0 and all(0 <= v <= 1 for v in ssd.MIN_IOUS),
        "INPUT.SSD.MIN_IOUS",
        ssd.MIN_IOUS,
        "must be a non-empty list of values in [0, 1]",
    )
    require_config(0 < ssd.MIN_CROP_SIZE <= 1, "INPUT.SSD.MIN_CROP_SIZE", ssd.MIN_CROP_SIZE, "must be in (0, 1]")
    require_config(
        cfg.INPUT.FORMAT in SSD_IMAGE_FORMATS,
        "INPUT.FORMAT",
        cfg.INPUT.FORMAT,
        f"must be one of {SSD_IMAGE_FORMATS} with INPUT.SSD.ENABLED",
    )
    require_config(
        len(cfg.MODEL.PIXEL_MEAN) == 3, "MODEL.PIXEL_MEAN", cfg.MODEL.PIXEL_MEAN, "must have 3 values (the Expand fill)"
    )


def build_ssd_augmentation(cfg: CfgNode, is_train: bool) -> List[T.Augmentation]:
    """SSD training pipeline from ``cfg.INPUT.SSD`` (photometric distortion -> expand -> min-IoU crop ->
    SIZE x SIZE resize -> horizontal flip); at test time detectron2's ``ResizeShortestEdge``."""
    validate_ssd_config(cfg)
    if not is_train:
        return utils.build_augmentation(cfg, is_train)
    ssd = cfg.INPUT.SSD
    return [
        PhotometricDistortion(
            brightness_delta=ssd.BRIGHTNESS_DELTA,
            contrast_range=tuple(ssd.CONTRAST_RANGE),
            saturation_range=tuple(ssd.SATURATION_RANGE),
            hue_delta=ssd.HUE_DELTA,
            image_format=cfg.INPUT.FORMAT,
        ),
        RandomExpand(cfg.MODEL.PIXEL_MEAN, tuple(ssd.EXPAND_RATIO_RANGE), ssd.EXPAND_PROB),
        RandomMinIoUCrop(ssd.MIN_IOUS, ssd.MIN_CROP_SIZE),
        T.Resize((ssd.SIZE, ssd.SIZE)),
        T.RandomFlip(0.5, horizontal=True),
    ]
