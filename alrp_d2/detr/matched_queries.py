"""The matched (query, target) pairs of one decoder layer, from Hugging Face's per-image matcher output, and the
boxes of the layer's queries as the ranking criteria read them.

A DETR-family matcher (Hungarian, or the fixed assignment of the denoising groups) returns for every image a pair
``(query indices, target indices)``; the targets are HF's per-image dicts ``{"class_labels": (T,), "boxes": (T, 4)}``
with normalised cxcywh boxes. :func:`matched_sets` validates them against each layer's ``logits`` (B, Q, C) and
``pred_boxes`` (B, Q, 4) and flattens them once for all layers of a step (one ``torch.cat`` per list, one host
synchronisation for all value checks); a row of a layer is the query ``b * Q + q``.
"""

from __future__ import annotations

from typing import List, Mapping, NamedTuple, Sequence, Tuple

import torch
from torch import Tensor

from ..criteria import PositiveTargets
from ..losses.input_checks import NonFiniteInputError
from ..losses.serial_indexing import take_rows

__all__ = [
    "BOX_EPS",
    "MatchedQueries",
    "QueryBoxes",
    "check_target",
    "cxcywh_to_xyxy",
    "matched_sets",
    "pair_box_losses",
    "pair_ious",
]

#: The smallest union and enclosing area of the IoU and GIoU (a floor, as mmdetection's, not an added term: the IoU of
#: identical boxes is exactly 1). Normalised boxes have areas down to ~1e-6 of the image, where the pixel-scale 1e-7
#: of :func:`~alrp_d2.losses.localisation_error.paired_iou_giou` would move the IoU by ~10% relative.
BOX_EPS = 1e-12

Indices = Sequence[Tuple[Tensor, Tensor]]
Targets = Sequence[Mapping[str, Tensor]]
#: One set as :func:`matched_sets` takes it: (B, Q, C) logits, (B, Q, 4) predicted boxes, its indices.
SetInputs = Tuple[Tensor, Tensor, Indices]


def cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """(..., 4) centre-size boxes to corner boxes."""
    centre, size = boxes[..., :2], boxes[..., 2:]
    return torch.cat([centre - size / 2, centre + size / 2], dim=-1)


class MatchedQueries(NamedTuple):
    """The matched pairs of a layer, flattened over the images in the order of ``indices``.

    Attributes:
        row: (P,) the query of each pair as a row of the layer, ``b * Q + q``.
        label: (P,) the class of its target.
        target_boxes: (P, 4) its target box, normalised cxcywh.
        num_rows: ``B * Q``.
        num_classes: C.
    """

    row: Tensor
    label: Tensor
    target_boxes: Tensor
    num_rows: int
    num_classes: int

    def row_labels(self) -> Tensor:
        """(B * Q,) the class of every row; C for a row no target is matched to (detectron2's background)."""
        labels = torch.full((self.num_rows,), self.num_classes, dtype=torch.long, device=self.row.device)
        return labels.index_copy_(0, self.row, self.label)


def matched_sets(sets: Sequence[SetInputs], targets: Targets) -> List[MatchedQueries]:
    """The validated, flattened matched pairs of every set of a step (module docstring), in the order of ``sets``:
    the targets concatenated once and the pairs of all sets checked together (one host synchronisation).

    Args:
        sets: per set, its (B, Q, C) logits, (B, Q, 4) predicted boxes and per image (query indices, target indices).
        targets: per image, ``{"class_labels": (T,), "boxes": (T, 4)}`` (normalised cxcywh).

    Raises:
        ValueError: naming the argument, the image and the shapes, for wrong shapes or types, an index out of range,
            a query matched twice in one image, a class label outside [0, C) or a target box of negative size (the
            first set that fails).
        NonFiniteInputError: for a NaN or infinite logit, predicted box or target box.
    """
    for logits, pred_boxes, indices in sets:
        _check_structure(logits, pred_boxes, indices, targets)
    if not sets:
        return []
    pairs = _flat_pairs(sets, targets)
    if any(pairs.failed):
        for one in sets:  # every check fails for the step iff it fails for a set: the first such set raises
            failing = _flat_pairs([one], targets)
            if any(failing.failed):
                _raise_first_failure(failing, one[0].shape)
    target_index = pairs.target + take_rows(torch.cumsum(pairs.counts, 0) - pairs.counts, pairs.image)
    sizes = [sum(len(pair[0]) for pair in indices) for _, _, indices in sets]
    parts = zip(
        pairs.row.split(sizes),
        take_rows(pairs.labels, target_index).split(sizes),
        take_rows(pairs.boxes, target_index).split(sizes),
        sets,
    )
    return [
        MatchedQueries(row, label, boxes.to(pred_boxes.dtype), logits.shape[0] * logits.shape[1], logits.shape[2])
        for row, label, boxes, (logits, pred_boxes, _) in parts
    ]


class _Pairs(NamedTuple):
    """The matched pairs of a step's sets, flattened, and which of the checks of :func:`matched_sets` fail."""

    image: Tensor
    query: Tensor
    target: Tensor
    row: Tensor
    sorted_rows: Tensor
    labels: Tensor
    boxes: Tensor
    counts: Tensor
    target_counts: List[int]
    failed: List[bool]


def _flat_pairs(sets: Sequence[SetInputs], targets: Targets) -> _Pairs:
    """All sets' pairs in one tensor per field: a pair's row ``b * Q + q`` in its set and, for the duplicate check,
    in the step (its set's rows after those of the sets before); the checks read in one host synchronisation."""
    device = sets[0][0].device
    blocks = []  # per (set, image): its first row in the step, its first row in the set, Q, the image
    base = 0
    for logits, _, _ in sets:
        batch, queries = logits.shape[:2]
        blocks += [[base + image * queries, image * queries, queries, image] for image in range(batch)]
        base += batch * queries
    pair_counts = [len(pair[0]) for _, _, indices in sets for pair in indices]
    target_counts = [len(target["class_labels"]) for target in targets]
    # HF's matchers return CPU index tensors, its denoising indices are on the logits' device: concatenated where they
    # are, moved once.
    query = _cat_indices([pair[0] for _, _, indices in sets for pair in indices]).to(device)
    target = _cat_indices([pair[1] for _, _, indices in sets for pair in indices]).to(device)
    step_start, set_start, limit, image = (
        torch.tensor(blocks, dtype=torch.long, device=device)
        .reshape(-1, 4)
        .repeat_interleave(torch.tensor(pair_counts, dtype=torch.long, device=device), 0, output_size=len(query))
        .unbind(1)
    )
    labels = torch.cat(
        [torch.zeros(0, dtype=torch.long, device=device)] + [t["class_labels"].to(device) for t in targets]
    )
    box_dtype = sets[0][1].dtype
    boxes = torch.cat(
        [torch.zeros(0, 4, dtype=box_dtype, device=device)] + [t["boxes"].to(device, box_dtype) for t in targets]
    )
    counts = torch.tensor(target_counts, dtype=torch.long, device=device)
    sorted_rows = torch.sort(step_start + query).values
    num_classes = min(logits.shape[2] for logits, _, _ in sets)
    failed = torch.stack(
        [
            ((query < 0) | (query >= limit)).any(),
            ((target < 0) | (target >= take_rows(counts, image))).any(),
            (sorted_rows[1:] == sorted_rows[:-1]).any(),
            ((labels < 0) | (labels >= num_classes)).any(),
            (boxes[:, 2:] < 0).any(),
            ~torch.stack([_all_finite(logits) for logits, _, _ in sets]).all(),
            ~torch.stack([_all_finite(pred_boxes) for _, pred_boxes, _ in sets]).all(),
            ~_all_finite(boxes),
        ]
    ).tolist()  # the one host synchronisation of the checks
    row = set_start + query
    return _Pairs(image, query, target, row, sorted_rows, labels, boxes, counts, target_counts, failed)


def _all_finite(values: Tensor) -> Tensor:
    """Whether no entry is NaN or infinite (the smallest and the largest entry carry any NaN or inf; no sum that a
    half-precision tensor could overflow)."""
    if values.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=values.device)
    return torch.isfinite(torch.stack(torch.aminmax(values.detach().reshape(-1)))).all()


def _cat_indices(parts: List[Tensor]) -> Tensor:
    """The index tensors concatenated on the device of the first (moving any other there)."""
    device = parts[0].device if parts else torch.device("cpu")
    empty = torch.zeros(0, dtype=torch.long, device=device)
    return torch.cat([empty] + [part.to(device, torch.long) for part in parts])


def _shape(value: object) -> object:
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


def _check_structure(logits: Tensor, pred_boxes: Tensor, indices: Indices, targets: Targets) -> None:
    """Shapes, dtypes and lengths, without reading a value."""
    if not isinstance(logits, Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating-point [B, Q, C] tensor, got {_shape(logits)}")
    batch, queries, classes = logits.shape
    if classes == 0:
        raise ValueError(
            f"logits {tuple(logits.shape)} have no class (C = 0): a set-prediction ranking needs C >= 1 (a model's "
            "num_labels)"
        )
    if not isinstance(pred_boxes, Tensor) or tuple(pred_boxes.shape) != (batch, queries, 4):
        raise ValueError(
            f"pred_boxes must be [B, Q, 4] = [{batch}, {queries}, 4] as logits {tuple(logits.shape)}, "
            f"got {_shape(pred_boxes)}"
        )
    if not pred_boxes.is_floating_point():
        raise ValueError(f"pred_boxes must be floating-point, got {pred_boxes.dtype}")
    if len(indices) != batch or len(targets) != batch:
        raise ValueError(
            f"indices and targets must have one entry per image of logits {tuple(logits.shape)}, "
            f"got {len(indices)} and {len(targets)}"
        )
    for image, (pair, target) in enumerate(zip(indices, targets)):
        if len(pair) != 2:
            raise ValueError(f"indices[{image}] must be a pair (query indices, target indices), got {len(pair)} items")
        for name, index in zip(("query", "target"), pair):
            if not isinstance(index, Tensor) or index.dim() != 1 or index.is_floating_point() or index.is_complex():
                raise ValueError(
                    f"indices[{image}]: the {name} indices must be a 1-D integer tensor, got {_shape(index)}"
                )
        if len(pair[0]) != len(pair[1]):
            raise ValueError(f"indices[{image}]: {len(pair[0])} query indices but {len(pair[1])} target indices")
        check_target(target, f"targets[{image}]")


def check_target(target: object, name: str) -> None:
    """A ValueError naming ``name`` unless ``target`` is a mapping of a 1-D integer ``"class_labels"`` (T,) and
    floating-point ``"boxes"`` (T, 4)."""
    if not isinstance(target, Mapping) or "class_labels" not in target or "boxes" not in target:
        keys = sorted(target) if isinstance(target, Mapping) else type(target).__name__
        raise ValueError(f"{name} must be a mapping with 'class_labels' and 'boxes', got {keys}")
    labels, boxes = target["class_labels"], target["boxes"]
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.is_floating_point():
        raise ValueError(f'{name}["class_labels"] must be a 1-D integer tensor, got {_shape(labels)}')
    if not isinstance(boxes, Tensor) or tuple(boxes.shape) != (len(labels), 4) or not boxes.is_floating_point():
        raise ValueError(
            f'{name}["boxes"] must be floating-point [T, 4] = [{len(labels)}, 4] as its "class_labels", '
            f"got {_shape(boxes)}"
        )


def _raise_first_failure(pairs: _Pairs, shape: torch.Size) -> None:
    """The error of the first failed check of the ``pairs`` of one set (:func:`matched_sets`), naming the image (a
    few more host synchronisations, on this path only)."""
    image, query, target, sorted_rows, labels, target_counts = (
        pairs.image,
        pairs.query,
        pairs.target,
        pairs.sorted_rows,
        pairs.labels,
        pairs.target_counts,
    )
    query_range, target_range, repeated, label_range, negative_size, bad_logits, bad_pred, _ = pairs.failed
    queries, num_classes = shape[1], shape[2]
    if query_range or target_range:
        bad = (
            (query < 0) | (query >= queries)
            if query_range
            else (target < 0) | (target >= torch.tensor(target_counts, device=image.device)[image])
        )
        first = int(torch.nonzero(bad)[0, 0])
        number = int(image[first])
        if query_range:
            raise ValueError(
                f"indices[{number}]: query index {int(query[first])} out of range [0, Q = {queries}) of logits "
                f"{tuple(shape)}"
            )
        raise ValueError(
            f"indices[{number}]: target index {int(target[first])} out of range [0, {target_counts[number]}) of "
            f'targets[{number}]["class_labels"] {(target_counts[number],)}'
        )
    if repeated:
        row = int(sorted_rows[1:][sorted_rows[1:] == sorted_rows[:-1]][0])
        raise ValueError(f"indices[{row // queries}]: query {row % queries} is matched more than once")
    if label_range:
        position = int(torch.nonzero((labels < 0) | (labels >= num_classes))[0, 0])
        number = next(i for i, end in enumerate(torch.tensor(target_counts).cumsum(0).tolist()) if position < end)
        raise ValueError(
            f'targets[{number}]["class_labels"] holds class {int(labels[position])}, outside [0, C = {num_classes}) '
            f"of logits {tuple(shape)}"
        )
    if negative_size:
        raise ValueError('targets[...]["boxes"] holds a box of negative width or height (normalised cxcywh expected)')
    name = "logits" if bad_logits else "pred_boxes" if bad_pred else 'targets[...]["boxes"]'
    raise NonFiniteInputError(f"the set-prediction loss received a NaN or infinite value in {name}")


class QueryBoxes:
    """The boxes of a layer's queries as the criteria and the additive terms read them (a
    :class:`~alrp_d2.criteria.PositiveSource`): the predicted box of every row (query) and the target box matched
    to it; one pyramid level."""

    num_levels = 1

    def __init__(self, pred_boxes: Tensor, matched: MatchedQueries, pair_ious: Tensor):
        """
        Args:
            pred_boxes: (B, Q, 4) the layer's predicted boxes, normalised cxcywh.
            matched: the layer's matched pairs.
            pair_ious: (P,) the IoU of each matched pair (detached).
        """
        self.pred_boxes = pred_boxes.reshape(-1, 4)
        self.matched_boxes = pred_boxes.new_zeros(matched.num_rows, 4).index_copy_(0, matched.row, matched.target_boxes)
        self.overlaps = pair_ious.new_zeros(matched.num_rows).index_copy_(0, matched.row, pair_ious.detach())

    def decoded_boxes(self, positives: PositiveTargets) -> Tuple[Tensor, Tensor]:
        rows = positives.row
        return cxcywh_to_xyxy(take_rows(self.pred_boxes, rows)), cxcywh_to_xyxy(take_rows(self.matched_boxes, rows))

    def encoded_box_loss(self, positives: PositiveTargets) -> Tensor:
        """(P,) the L1 distance of the normalised cxcywh boxes, averaged over the four."""
        rows = positives.row
        return (take_rows(self.pred_boxes, rows) - take_rows(self.matched_boxes, rows)).abs().mean(dim=-1)

    def row_overlaps(self) -> Tensor:
        return self.overlaps

    def levels(self, positives: PositiveTargets) -> Tensor:
        return torch.zeros_like(positives.row)


def pair_box_losses(
    pred_boxes: Sequence[Tensor], matched: Sequence[MatchedQueries]
) -> Tuple[List[Tensor], List[Tensor]]:
    """Per set of ``matched`` (its (B, Q, 4) ``pred_boxes``), (P, 2) each matched pair's L1 distance (summed over the
    four normalised cxcywh coordinates) and 1 - GIoU, and (P,) its IoU (detached); the pairs of all sets in one
    call."""
    predicted, target_boxes = _pair_boxes(pred_boxes, matched)
    l1 = (predicted - target_boxes).abs().sum(dim=-1)
    iou, giou = floored_iou_giou(cxcywh_to_xyxy(predicted), cxcywh_to_xyxy(target_boxes))
    sizes = [len(pairs.row) for pairs in matched]
    return list(torch.stack([l1, 1.0 - giou], dim=1).split(sizes)), list(iou.detach().split(sizes))


def pair_ious(pred_boxes: Sequence[Tensor], matched: Sequence[MatchedQueries]) -> List[Tensor]:
    """Per set, (P,) the IoU of each matched pair, outside the graph (what the ranking reads when the box terms are
    the model's); the pairs of all sets in one call."""
    with torch.no_grad():
        predicted, target_boxes = _pair_boxes(pred_boxes, matched)
        iou, _ = floored_iou_giou(cxcywh_to_xyxy(predicted), cxcywh_to_xyxy(target_boxes))
    return list(iou.split([len(pairs.row) for pairs in matched]))


def _pair_boxes(pred_boxes: Sequence[Tensor], matched: Sequence[MatchedQueries]) -> Tuple[Tensor, Tensor]:
    """(P, 4) the predicted and the target box of every matched pair of all sets, normalised cxcywh."""
    predicted = [take_rows(boxes.reshape(-1, 4), pairs.row) for boxes, pairs in zip(pred_boxes, matched)]
    return torch.cat(predicted), torch.cat([pairs.target_boxes for pairs in matched])


def floored_iou_giou(boxes: Tensor, targets: Tensor) -> Tuple[Tensor, Tensor]:
    """(P,) IoU and GIoU of the (P, 4) xyxy ``boxes`` with their ``targets``, the union and the enclosing area floored
    at :data:`BOX_EPS`: 1 and 1 for identical boxes of positive size (the union of a box with itself is its area)."""
    low, high, target_low, target_high = boxes[:, :2], boxes[:, 2:], targets[:, :2], targets[:, 2:]
    intersection = (torch.minimum(high, target_high) - torch.maximum(low, target_low)).clamp_min(0).prod(-1)
    union = (high - low).prod(-1) + (target_high - target_low).prod(-1) - intersection
    enclosing = (torch.maximum(high, target_high) - torch.minimum(low, target_low)).prod(-1).clamp_min(BOX_EPS)
    iou = intersection / union.clamp_min(BOX_EPS)
    return iou, iou - (enclosing - union) / enclosing
