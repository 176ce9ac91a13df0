"""Image read errors that name the file, and an opt-in skip of unreadable training images
(DATALOADER.SKIP_UNREADABLE_IMAGES). Images of more than 8 bits per channel (16-bit PNG or TIFF,
PIL modes I;16, I, F) count as unreadable: detectron2's ``read_image`` would clip them to white."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional, Set

from detectron2.data.detection_utils import SizeMismatchError
from PIL import Image

from .image_size import ImageSizeError, resize_problem

__all__ = [
    "UnreadableImageError",
    "ImageErrorGuard",
    "exif_rotation_hint",
    "high_bit_depth_error",
    "image_read_error",
]

logger = logging.getLogger(__name__)

Mapper = Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]

HIGH_BIT_DEPTH_MODES = ("I", "F")  # and every "I;16..." mode
TRAINING_HINT = "set DATALOADER.SKIP_UNREADABLE_IMAGES True to skip unreadable training images"
EVALUATION_HINT = (
    "evaluation reads every image (DATALOADER.SKIP_UNREADABLE_IMAGES applies to training only): "
    "repair the file or remove it from the test set"
)


class UnreadableImageError(OSError):
    """An image of the dataset is missing, corrupt or truncated; the message names the file."""


def image_read_error(file_name: str) -> Optional[str]:
    """Why ``file_name`` cannot be decoded completely (missing, not an image, truncated), or None
    when PIL reads every pixel of it."""
    try:
        with Image.open(file_name) as image:
            image.load()
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError, ...
        return f"{type(error).__name__}: {error}"
    return None


def high_bit_depth_error(file_name: str) -> Optional[str]:
    """Why ``file_name`` cannot be used as an 8-bit image (its PIL mode has more bits per channel),
    or None (also when it cannot be opened: :func:`image_read_error` says why)."""
    try:
        with Image.open(file_name) as image:
            mode = image.mode
    except Exception:  # opening errors are reported by the read itself
        return None
    if mode in HIGH_BIT_DEPTH_MODES or mode.startswith("I;16"):
        return (
            f"PIL mode {mode}: more than 8 bits per channel, which detectron2's read_image would clip to white; "
            "convert the image to 8 bits per channel"
        )
    return None


#: EXIF orientations that transpose the image (rotations by 90 or 270 degrees, with or without a mirror).
TRANSPOSING_ORIENTATIONS = (5, 6, 7, 8)
EXIF_ORIENTATION_TAG = 0x0112


def exif_rotation_hint(file_name: str) -> str:
    """For an image whose EXIF orientation turns it by 90 or 270 degrees (which detectron2's ``read_image``
    applies), how its annotation's width and height must be given; "" otherwise."""
    try:
        with Image.open(file_name) as image:
            orientation = image.getexif().get(EXIF_ORIENTATION_TAG)
            width, height = image.size
    except Exception:  # an unreadable file has no hint to give
        return ""
    if orientation not in TRANSPOSING_ORIENTATIONS:
        return ""
    return (
        f"{file_name} is stored as {width} x {height} pixels with EXIF orientation {orientation}, which detectron2 "
        f"applies when it reads the image (rotating it to {height} x {width}): give width {height} and height "
        f"{width} in the annotation file, or rotate the pixels and remove the orientation tag."
    )


class ImageErrorGuard:
    """Wraps a dataset mapper. When the image of a dict has more than 8 bits per channel, or the
    mapper fails on a dict whose image cannot be decoded, raises :class:`UnreadableImageError`
    naming the file, or with ``skip`` returns None (detectron2's and alrp_d2's loaders then take
    another sample), warning once per file with the running count. detectron2's image-size mismatch
    with the JSON gets a hint when the image's EXIF orientation rotates it (:func:`exif_rotation_hint`); a
    failure on an image whose aspect ratio the mapper's resize cannot take (a side of 0 pixels) raises
    :class:`~alrp_d2.data.image_size.ImageSizeError` naming the file and the sizes; other errors propagate
    unchanged. ``training`` picks the
    hint of the error (evaluation never skips)."""

    def __init__(self, mapper: Mapper, skip: bool = False, training: bool = True):
        if skip and not training:
            raise ValueError("ImageErrorGuard: evaluation never skips images (skip=True needs training=True)")
        self.mapper = mapper
        self.skip = skip
        self.hint = TRAINING_HINT if training else EVALUATION_HINT
        self.skipped: Set[str] = set()
        self.eight_bit: Set[str] = set()  # files whose header was read once: not opened again for it

    def _resize_problem(self, dataset_dict: Dict[str, Any]) -> str:
        """Why the mapper's resizes cannot take the image of ``dataset_dict`` (its size from the annotations), or
        "" (:func:`~alrp_d2.data.image_size.resize_problem`)."""
        augmentations = getattr(getattr(self.mapper, "augmentations", None), "augs", ())
        height, width = dataset_dict.get("height"), dataset_dict.get("width")
        if not (isinstance(height, int) and isinstance(width, int) and height > 0 and width > 0):
            return ""
        return resize_problem(augmentations, height, width)

    def __call__(self, dataset_dict: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        file_name = dataset_dict.get("file_name", "")
        reason = high_bit_depth_error(file_name) if file_name and file_name not in self.eight_bit else None
        cause: Optional[BaseException] = None
        if reason is None:
            try:
                mapped = self.mapper(dataset_dict)
                if file_name:
                    self.eight_bit.add(file_name)
                return mapped
            except SizeMismatchError as error:
                hint = exif_rotation_hint(file_name)
                if hint:
                    raise SizeMismatchError(f"{error} {hint}") from error
                raise
            except Exception as error:
                reason = image_read_error(file_name) if file_name else None
                if reason is None:
                    size_problem = self._resize_problem(dataset_dict)
                    if size_problem:
                        raise ImageSizeError(f"{file_name or 'an image'}: {size_problem}") from error
                    raise
                cause = error
        if not self.skip:
            raise UnreadableImageError(f"cannot read the image {file_name} ({reason}); {self.hint}") from cause
        if file_name not in self.skipped:
            self.skipped.add(file_name)
            logger.warning(
                "Skipped the unreadable image %s (%s); %d unreadable image(s) skipped so far in this process",
                file_name,
                reason,
                len(self.skipped),
            )
        return None
