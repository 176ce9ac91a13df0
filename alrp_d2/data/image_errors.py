"""Image read errors that name the file, and an opt-in skip of unreadable training images
(DATALOADER.SKIP_UNREADABLE_IMAGES)."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional, Set

from detectron2.data.detection_utils import SizeMismatchError
from PIL import Image

__all__ = ["UnreadableImageError", "ImageErrorGuard", "image_read_error"]

logger = logging.getLogger(__name__)

Mapper = Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]


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


class ImageErrorGuard:
    """Wraps a dataset mapper. When the mapper fails on a dict whose image cannot be decoded, raises
    :class:`UnreadableImageError` naming the file, or with ``skip`` returns None (detectron2's and
    alrp_d2's loaders then take another sample), warning once per file with the running count.
    Other errors, including detectron2's image-size mismatch with the JSON, propagate unchanged."""

    def __init__(self, mapper: Mapper, skip: bool = False):
        self.mapper = mapper
        self.skip = skip
        self.skipped: Set[str] = set()

    def __call__(self, dataset_dict: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        try:
            return self.mapper(dataset_dict)
        except SizeMismatchError:
            raise
        except Exception as error:
            file_name = dataset_dict.get("file_name", "")
            reason = image_read_error(file_name) if file_name else None
            if reason is None:
                raise
            if not self.skip:
                raise UnreadableImageError(
                    f"cannot read the image {file_name} ({reason}); set DATALOADER.SKIP_UNREADABLE_IMAGES True "
                    "to skip unreadable training images"
                ) from error
        if file_name not in self.skipped:
            self.skipped.add(file_name)
            logger.warning(
                "Skipped the unreadable image %s (%s); %d unreadable image(s) skipped so far in this process",
                file_name,
                reason,
                len(self.skipped),
            )
        return None
