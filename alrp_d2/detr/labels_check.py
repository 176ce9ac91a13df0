"""The check of the labels handed to a Hugging Face DETR switched to a ranking loss, before the model's matcher reads
them: per image ``{"class_labels": (T,), "boxes": (T, 4)}``, the classes in [0, C), the boxes finite, normalised
cxcywh of positive size with every coordinate in [0, 1]. Without it, pixel boxes make every ranking term 0 silently,
and a class equal to C, a NaN or a negative size end in the matcher's bare ``IndexError`` or assertion."""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import Tensor

from ..losses.input_checks import NonFiniteInputError
from .matched_queries import check_target

__all__ = ["check_labels"]


def check_labels(labels: Sequence[Mapping[str, Tensor]], num_classes: int) -> None:
    """Raises a ValueError (a :class:`~alrp_d2.losses.NonFiniteInputError` for a NaN or infinite box) naming the
    image and what is wrong; one host synchronisation for all images."""
    if not isinstance(labels, Sequence) or isinstance(labels, (str, bytes)):
        raise ValueError(f"labels must be a list of per-image dicts, got {type(labels).__name__}")
    for image, target in enumerate(labels):
        check_target(target, f"labels[{image}]")
    counts = [len(target["class_labels"]) for target in labels]
    if not sum(counts):
        return
    device = labels[0]["boxes"].device
    classes = torch.cat([target["class_labels"].to(device) for target in labels])
    boxes = torch.cat([target["boxes"].detach().to(device) for target in labels])
    failures = _failures(classes, boxes, num_classes).any(dim=0).tolist()  # the one host synchronisation
    if any(failures):
        check = failures.index(True)
        row = int(torch.nonzero(_failures(classes, boxes, num_classes)[:, check])[0, 0])
        image = next(i for i, end in enumerate(torch.tensor(counts).cumsum(0).tolist()) if row < end)
        _raise(image, check, labels[image], num_classes)


def _failures(classes: Tensor, boxes: Tensor, num_classes: int) -> Tensor:
    """(T, 4) per box whether its class is out of range, it is not finite, it has no positive size, a coordinate is
    outside [0, 1]."""
    finite = torch.isfinite(boxes)
    safe = boxes.where(finite, 0.5)
    return torch.stack(
        [
            (classes < 0) | (classes >= num_classes),
            ~finite.all(dim=1),
            (safe[:, 2:] <= 0).any(dim=1),
            ((safe < 0) | (safe > 1)).any(dim=1),
        ],
        dim=1,
    )


def _raise(image: int, check: int, target: Mapping[str, Tensor], num_classes: int) -> None:
    classes, boxes = target["class_labels"], target["boxes"]
    if check == 0:
        bad = int(classes[(classes < 0) | (classes >= num_classes)][0])
        raise ValueError(f'labels[{image}]["class_labels"] holds class {bad}, outside [0, num_labels = {num_classes})')
    if check == 1:
        raise NonFiniteInputError(f'labels[{image}]["boxes"] holds a NaN or infinite coordinate')
    if check == 2:
        raise ValueError(
            f'labels[{image}]["boxes"] holds a box of zero or negative width or height: normalised (cx, cy, w, h) of '
            "positive size expected"
        )
    largest = float(boxes.detach().abs().max())
    raise ValueError(
        f'labels[{image}]["boxes"] holds a coordinate outside [0, 1] (up to {largest:g}): the boxes must be '
        "normalised (cx, cy, w, h) by the image size, as Hugging Face's image processors give them (pixel boxes "
        "make every ranking term 0)"
    )
