"""detectron2's ``DefaultPredictor`` with checked weights, checked input images and the config's
test-time resize."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Dict, Iterator

import numpy as np
from detectron2.config import CfgNode
from detectron2.engine import DefaultPredictor

from ..checkpoint import AlrpCheckpointer, check_weights_classes
from ..data.dataset_classes import dataset_classes
from ..data.image_size import ImageSizeError, resize_problem
from ..data.inference_resize import build_test_resize

__all__ = ["AlrpPredictor", "ImageInputError", "check_image"]

logger = logging.getLogger(__name__)


class ImageInputError(ValueError):
    """The predictor was given something that is not an image of the model's input format."""


def _expected(input_format: str) -> str:
    channels = 1 if input_format == "L" else 3
    return f"a non-empty uint8 numpy array of shape (H, W, {channels}) in {input_format} order (INPUT.FORMAT)"


def _shape_hint(shape: tuple, channels: int) -> str:
    if len(shape) == 2:
        return " (a grayscale image: stack it into 3 channels, np.repeat(image[:, :, None], 3, axis=2))"
    if len(shape) == 3 and shape[0] == channels and shape[2] != channels:
        return " (channels first: transpose it, image.transpose(1, 2, 0))"
    if len(shape) == 3 and shape[2] == 4 and channels == 3:
        return " (4 channels, e.g. RGBA: drop the alpha channel, image[:, :, :3])"
    return ""


def check_image(image: Any, input_format: str) -> None:
    """Raises :class:`ImageInputError` unless ``image`` is a non-empty uint8 array (H, W, 3) (or
    (H, W, 1) for INPUT.FORMAT "L"), saying what it is instead and how to convert it: None, a path,
    a tensor or PIL image, float pixels (a float image in [0, 1] would be read as almost black),
    grayscale, RGBA or channels-first arrays, an empty image."""
    expected = _expected(input_format)
    if image is None:
        raise ImageInputError(f"the predictor takes {expected}, got None")
    if isinstance(image, (str, bytes, os.PathLike)):
        raise ImageInputError(
            f"the predictor takes {expected}, got the path {os.fsdecode(image)!r}: read it first, e.g. "
            f"detectron2.data.detection_utils.read_image(path, format={input_format!r})"
        )
    if not isinstance(image, np.ndarray):
        raise ImageInputError(f"the predictor takes {expected}, got a {type(image).__module__}.{type(image).__name__}")
    channels = 1 if input_format == "L" else 3
    if image.ndim != 3 or image.shape[2] != channels:
        raise ImageInputError(
            f"the predictor takes {expected}, got shape {image.shape}{_shape_hint(image.shape, channels)}"
        )
    if image.dtype != np.uint8:
        hint = " (floats in [0, 1]: (image * 255).round().astype(np.uint8))" if image.dtype.kind == "f" else ""
        raise ImageInputError(f"the predictor takes {expected}, got {image.dtype} pixels{hint}")
    if image.size == 0:
        raise ImageInputError(f"the predictor takes {expected}, got an empty image of shape {image.shape}")


@contextlib.contextmanager
def _without_line(log: logging.Logger, text: str) -> Iterator[None]:
    """Drops the records of ``log`` that contain ``text`` while the block runs."""

    def keep(record: logging.LogRecord) -> bool:
        return text not in record.getMessage()

    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)


class AlrpPredictor(DefaultPredictor):
    """detectron2's ``DefaultPredictor`` loading MODEL.WEIGHTS with :class:`AlrpCheckpointer`
    (the parent builds the model without weights; they are loaded once, checked) and resizing as
    INPUT.TEST_RESIZE says. An empty MODEL.WEIGHTS gives a randomly initialised model, with a warning.
    Calling it with anything but an image of INPUT.FORMAT raises :class:`ImageInputError`
    (:func:`check_image`). The classes the checkpoint records must be those of DATASETS.TEST[0]
    when it names a dataset with classes (the names the predictions are drawn with), else
    :class:`~alrp_d2.data.dataset_classes.ClassesMismatchError` shows both lists."""

    def __init__(self, cfg: CfgNode):
        without_weights = cfg.clone()
        without_weights.defrost()
        without_weights.MODEL.WEIGHTS = ""
        with _without_line(logging.getLogger("fvcore.common.checkpoint"), "No checkpoint found"):
            super().__init__(without_weights)  # its "Initializing model from scratch" would be false: loaded below
        self.cfg = cfg.clone()
        if cfg.INPUT.get("TEST_RESIZE", "detectron2") != "detectron2":  # a config without add_alrp_config
            self.aug = build_test_resize(cfg)
        if not cfg.MODEL.WEIGHTS:
            logger.warning("MODEL.WEIGHTS is empty: the predictor uses a randomly initialised model")
        allow_partial = cfg.MODEL.get("ALLOW_PARTIAL_WEIGHTS", False)  # a config without add_alrp_config: False
        checkpoint = AlrpCheckpointer(self.model, allow_partial=allow_partial).load(cfg.MODEL.WEIGHTS)
        if cfg.MODEL.WEIGHTS and len(cfg.DATASETS.TEST):
            check_weights_classes(checkpoint, cfg.MODEL.WEIGHTS, [dataset_classes(cfg.DATASETS.TEST[0])])

    def __call__(self, original_image: np.ndarray) -> Dict[str, Any]:
        """detectron2's prediction of one image, after :func:`check_image`; an image of so extreme an aspect
        ratio that the test-time resize would make a side 0 pixels raises
        :class:`~alrp_d2.data.image_size.ImageSizeError` saying so."""
        check_image(original_image, self.input_format)
        problem = resize_problem([self.aug], *original_image.shape[:2])
        if problem:
            raise ImageSizeError(f"the predictor cannot take {problem}")
        return super().__call__(original_image)
