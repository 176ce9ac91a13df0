"""SSD-style training augmentation (Liu et al., ECCV 2016) as detectron2 Augmentations.

The pipeline follows mmdetection 2.x's SSD training pipeline, which the official aLRP Loss code uses:
``PhotoMetricDistortion -> Expand -> MinIoURandomCrop -> Resize (no aspect ratio) -> RandomFlip``.

Precision: as mmdet (which loads the image with ``to_float32=True``), the image becomes float32 in
``PhotometricDistortion`` and stays float32, unrounded and unclipped (values may leave [0, 255]), through
expand, crop, resize (``cv2.INTER_LINEAR``, no antialiasing, as mmcv's ``imresize``) and flip; the model's
pixel normalisation is the first step that sees it again. ``dataset_dict["image"]`` is a float32 tensor.

OpenCV is imported where an image is transformed, as detectron2 does, so that importing the package (a model, a
benchmark) does not need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from detectron2.config import CfgNode
from detectron2.data import detection_utils as utils
from detectron2.data import transforms as T
from detectron2.data.transforms import ResizeTransform
from detectron2.structures import Boxes, pairwise_iou
from fvcore.transforms.transform import CropTransform, NoOpTransform, PadTransform, Transform
from PIL import Image

from ..checks.errors import require_config

__all__ = [
    "PhotometricDistortionParams",
    "PhotometricDistortion",
    "ExpandTransform",
    "RandomExpand",
    "CenterFilteredCropTransform",
    "RandomMinIoUCrop",
    "crop_accepted",
    "Cv2ResizeTransform",
    "Cv2Resize",
    "SSD_IMAGE_FORMATS",
    "validate_ssd_config",
    "build_ssd_augmentation",
]

SSD_IMAGE_FORMATS = ("BGR", "RGB")
_TO_HSV = {"BGR": "COLOR_BGR2HSV", "RGB": "COLOR_RGB2HSV"}  # OpenCV's conversion codes, by name
_FROM_HSV = {"BGR": "COLOR_HSV2BGR", "RGB": "COLOR_HSV2RGB"}


@dataclass(frozen=True)
class PhotometricDistortionParams:
    """One draw of mmdet's ``PhotoMetricDistortion``; ``None`` means "step not applied".

    Called on a uint8 or float image, it returns the distorted float32 image, neither rounded nor
    clipped (used as a ``ColorTransform`` op).
    """

    brightness_delta: Optional[float]
    contrast: Optional[float]
    contrast_first: bool
    saturation: Optional[float]
    hue_delta: Optional[float]
    channel_order: Optional[Tuple[int, ...]] = None
    image_format: str = "BGR"

    def __call__(self, image: np.ndarray) -> np.ndarray:
        img = image.astype(np.float32)
        if self.brightness_delta is not None:
            img += self.brightness_delta
        if self.contrast_first:
            img = self._apply_contrast(img)
        img = self._distort_hsv(img)
        if not self.contrast_first:
            img = self._apply_contrast(img)
        if self.channel_order is not None:
            img = img[..., list(self.channel_order)]
        return img

    def _apply_contrast(self, img: np.ndarray) -> np.ndarray:
        return img if self.contrast is None else img * self.contrast

    def _distort_hsv(self, img: np.ndarray) -> np.ndarray:
        """Saturation scaling and hue shift (degrees) in float32 HSV. As mmdet, the image always
        makes the round trip through OpenCV's HSV (which is not the identity on negative values)."""
        import cv2

        hsv = cv2.cvtColor(img, getattr(cv2, _TO_HSV[self.image_format]))
        if self.saturation is not None:
            hsv[..., 1] = hsv[..., 1] * self.saturation
        if self.hue_delta is not None:
            hsv[..., 0] = np.mod(hsv[..., 0] + self.hue_delta, 360.0)
        return cv2.cvtColor(hsv, getattr(cv2, _FROM_HSV[self.image_format]))


class PhotometricDistortion(T.Augmentation):
    """mmdet ``PhotoMetricDistortion``: brightness, contrast (before or after the colour-space part,
    random order), saturation, hue and a random permutation of the colour channels, each applied with
    probability 0.5, drawn from ``np.random`` in mmdet's order. Pixel values only; output float32."""

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
        channel_order = tuple(int(c) for c in np.random.permutation(3)) if np.random.randint(2) else None
        params = PhotometricDistortionParams(
            brightness, contrast, contrast_first, saturation, hue, channel_order, self.image_format
        )
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
        low, high = self.ratio_range
        ratio = np.random.uniform(low, high)
        canvas_h, canvas_w = int(h * ratio), int(w * ratio)
        left = int(np.random.uniform(0, w * ratio - w))  # <= canvas_w - w, drawn as mmdet draws it
        top = int(np.random.uniform(0, h * ratio - h))
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

    A mode is drawn uniformly from ``min_ious`` (mmdet's ``sample_mode``: 1 = no crop, 0 = any crop
    that keeps at least one box centre). For another mode, up to ``crop_trials`` crops with w, h uniform
    in [min_crop_size * W, W] x [min_crop_size * H, H] and 0.5 <= h / w <= 2 are tried; a crop is
    accepted when every box has IoU >= the mode with it and at least one box centre is strictly inside
    it (``crop_accepted``). The boxes are all boxes of the image, crowd ones included, as mmdet's
    ``gt_bboxes`` + ``gt_bboxes_ignore``; an image without (non-empty) boxes takes the first crop of
    valid shape, as in mmdet. When no trial succeeds a new mode is drawn; after ``max_mode_trials``
    draws the image is left uncropped, so the loop always ends (mmdet loops until it succeeds). The
    crop's left / top are uniform in [0, W - w] / [0, H - h]; mmdet's one-argument ``uniform(W - w)``
    draws them between 1 and W - w (a one-pixel difference, not copied).
    """

    def __init__(
        self,
        min_ious: Sequence[float] = (1.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.0),
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
        h, w = image.shape[:2]
        for _ in range(self.max_mode_trials):
            min_iou = self.min_ious[np.random.randint(len(self.min_ious))]
            if min_iou == 1:
                return NoOpTransform()
            patch = self._sample_patch(h, w, boxes, min_iou)
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
        valid &= crop_accepted(patches, boxes, min_iou)
        accepted = np.flatnonzero(valid)
        return tuple(int(v) for v in patches[accepted[0]]) if len(accepted) else None


def crop_accepted(patches: np.ndarray, boxes: np.ndarray, min_iou: float) -> np.ndarray:
    """(P,) mask of the XYXY ``patches`` that mmdet's ``MinIoURandomCrop`` accepts for the XYXY
    ``boxes`` (all of the image, crowd included): every box has IoU >= ``min_iou`` with the patch and
    at least one box centre is strictly inside it; with ``min_iou`` 0 only the centre rule remains.
    Without boxes every patch is accepted."""
    patches = np.asarray(patches, dtype=np.float64).reshape(-1, 4)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if len(boxes) == 0:
        return np.ones(len(patches), dtype=bool)
    ious = pairwise_iou(Boxes(torch.from_numpy(patches)), Boxes(torch.from_numpy(boxes))).numpy()
    return (ious.min(axis=1) >= min_iou) & _centers_inside(boxes, patches).any(axis=1)


class Cv2ResizeTransform(ResizeTransform):
    """detectron2's ``ResizeTransform`` whose bilinear image resize is ``cv2.resize(...,
    cv2.INTER_LINEAR)`` for uint8 and float images alike (mmcv's ``imresize``: no antialiasing, float
    kept float); other interpolations (segmentation's nearest) are detectron2's."""

    def apply_image(self, img: np.ndarray, interp: Optional[int] = None) -> np.ndarray:
        if (interp if interp is not None else self.interp) != Image.Resampling.BILINEAR:
            return super().apply_image(img, interp)
        if img.shape[:2] != (self.h, self.w):
            raise ValueError(f"Cv2ResizeTransform expects an image of {(self.h, self.w)} (h, w), got {img.shape}")
        import cv2

        resized = cv2.resize(img, (self.new_w, self.new_h), interpolation=cv2.INTER_LINEAR)
        return resized.reshape(resized.shape[:2] + img.shape[2:])


class Cv2Resize(T.Resize):
    """``T.Resize`` to a fixed (h, w) with ``Cv2ResizeTransform`` (mmdet ``Resize``, ``keep_ratio=False``)."""

    def get_transform(self, image: np.ndarray) -> Transform:
        return Cv2ResizeTransform(image.shape[0], image.shape[1], self.shape[0], self.shape[1], self.interp)


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
        "must be a non-empty list of values in [0, 1] (1 = no crop, 0 = any crop keeping a box centre)",
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
    SIZE x SIZE cv2 bilinear resize -> horizontal flip, float32 from the distortion on); at test time
    detectron2's ``ResizeShortestEdge``."""
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
        Cv2Resize((ssd.SIZE, ssd.SIZE)),
        T.RandomFlip(0.5, horizontal=True),
    ]
