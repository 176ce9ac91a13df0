"""Images whose aspect ratio is too extreme for the configured resize: with the long side capped at
``max_size``, the short side of a 4000 x 3 image scales to a fraction of a pixel and rounds to 0, and
PIL or cv2 fails deep inside the resize. :func:`resize_problem` says so, naming the sizes, for the
test-time resize of the predictors and, when a data mapper fails, for its resizes."""

from __future__ import annotations

from typing import Any, Iterable, Optional, Tuple

from detectron2.data import transforms as T

from .inference_resize import MmcvRescale, mmcv_rescale_size

__all__ = ["ImageSizeError", "resize_problem"]


class ImageSizeError(ValueError):
    """The image cannot be resized as configured (a side would become 0 pixels)."""


def _smallest_output(augmentation: Any, height: int, width: int) -> Optional[Tuple[int, int, str]]:
    """(new height, new width, the resize's sizes) of ``augmentation`` at its smallest short edge, or None when it is
    not a resize this module knows (detectron2's ``ResizeShortestEdge``, :class:`MmcvRescale`)."""
    if isinstance(augmentation, T.ResizeShortestEdge):
        sizes = [size for size in augmentation.short_edge_length if size > 0]  # 0: no resize
        if not sizes:
            return None
        short = min(sizes)
        new_height, new_width = T.ResizeShortestEdge.get_output_shape(height, width, short, augmentation.max_size)
        return new_height, new_width, f"short edge {short}, long edge at most {augmentation.max_size}"
    if isinstance(augmentation, MmcvRescale):
        new_height, new_width = mmcv_rescale_size(height, width, augmentation.short_edge, augmentation.long_edge)
        return (
            new_height,
            new_width,
            f"short edge {augmentation.short_edge}, long edge at most {augmentation.long_edge}",
        )
    return None


def resize_problem(augmentations: Iterable[Any], height: int, width: int) -> str:
    """Why an image of ``height`` x ``width`` pixels cannot go through the resizes among ``augmentations`` (a side
    of 0 pixels), or ""."""
    for augmentation in augmentations:
        output = _smallest_output(augmentation, height, width)
        if output is None or min(output[:2]) >= 1:
            continue
        new_height, new_width, sizes = output
        ratio = max(height, width) / min(height, width)
        return (
            f"an image of {width} x {height} pixels (aspect ratio {ratio:.0f}:1) would be resized to {new_width} x "
            f"{new_height} pixels ({sizes}): crop or pad it to a less extreme aspect ratio, or leave it out"
        )
    return ""
