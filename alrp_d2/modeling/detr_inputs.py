"""detectron2's dataset dicts as a Hugging Face DETR takes them: the normalised, padded batch of ``pixel_values``, its
``pixel_mask``, and per image the labels ``{"class_labels", "boxes"}`` with normalised (cx, cy, w, h) boxes.

The boxes are normalised by the region the model sees as its image: the image itself (before padding) for a model that
takes a pixel mask (Deformable-DETR: its position embeddings and reference points are relative to the valid region, as
in Zhu et al.'s data pipeline), the padded batch for one that does not (RT-DETR, which sees the padding as part of the
image). :func:`box_scales` gives that region per image; the predictions are scaled back by the same factors."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Sequence

import torch
from detectron2.structures import ImageList, Instances
from torch import Tensor

__all__ = ["DetrBatch", "box_scales", "detr_batch", "hf_labels"]


class DetrBatch(NamedTuple):
    """One batch in the model's input form.

    Attributes:
        pixel_values: (B, 3, H, W) normalised RGB images, zero-padded to a common size.
        pixel_mask: (B, H, W) 1 on every image's own pixels, 0 on the padding.
        image_sizes: (height, width) of every image before padding.
        scales: (B, 4) the (width, height, width, height) of the region the boxes are normalised by.
    """

    pixel_values: Tensor
    pixel_mask: Tensor
    image_sizes: List[tuple]
    scales: Tensor


def box_scales(image_sizes: Sequence[tuple], padded_size: Sequence[int], masked: bool, device: torch.device) -> Tensor:
    """(B, 4) the (w, h, w, h) each image's boxes are normalised by: its own size when the model takes a pixel mask
    (``masked``), else the padded size."""
    sizes = [tuple(size) for size in image_sizes] if masked else [tuple(padded_size)] * len(image_sizes)
    heights_widths = torch.tensor(sizes, dtype=torch.float32, device=device).reshape(-1, 2)
    return heights_widths.flip(1).repeat(1, 2)


def detr_batch(
    batched_inputs: Sequence[Dict[str, Any]],
    pixel_mean: Tensor,
    pixel_std: Tensor,
    bgr: bool,
    size_divisibility: int,
    masked: bool,
) -> DetrBatch:
    """The images of ``batched_inputs`` (detectron2's (C, H, W) tensors in the input format) normalised by
    ``pixel_mean`` / ``pixel_std`` (in the input format's channel order), in RGB (``bgr``: reversed), padded with 0
    to a common size divisible by ``size_divisibility``, with their pixel mask and box scales."""
    device = pixel_mean.device
    images = [(x["image"].to(device) - pixel_mean) / pixel_std for x in batched_inputs]
    if bgr:
        images = [image.flip(0) for image in images]
    padded = ImageList.from_tensors(images, size_divisibility)
    ones = [torch.ones(image.shape[-2:], dtype=torch.long, device=device) for image in images]
    pixel_mask = ImageList.from_tensors(ones, size_divisibility).tensor
    scales = box_scales(padded.image_sizes, padded.tensor.shape[-2:], masked, device)
    return DetrBatch(padded.tensor, pixel_mask, padded.image_sizes, scales)


def hf_labels(instances: Sequence[Instances], scales: Tensor) -> List[Dict[str, Tensor]]:
    """HF's labels of the ground truth ``instances`` (detectron2's ``gt_boxes`` in XYXY pixels, ``gt_classes``):
    per image ``class_labels`` (T,) and ``boxes`` (T, 4) in (cx, cy, w, h) divided by its row of ``scales``."""
    labels = []
    for objects, scale in zip(instances, scales):
        boxes = objects.gt_boxes.tensor.to(scale.device)
        centre_size = torch.cat([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]], dim=1)
        labels.append({"class_labels": objects.gt_classes.to(scale.device), "boxes": centre_size / scale})
    return labels
