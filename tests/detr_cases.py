"""Seeded decoder layers of a DETR-family detector for the set-prediction loss's tests: logits, predicted boxes,
HF-style targets and matcher indices, with or without denoising groups; and 2-worker gloo runs on loopback."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence, Tuple

import torch
from torch import Tensor

from alrp_d2.detr import SetRankingLoss, set_prediction_criterion


class Layer(NamedTuple):
    logits: Tensor
    pred_boxes: Tensor
    indices: List[Tuple[Tensor, Tensor]]
    targets: List[Dict[str, Tensor]]
    image_sizes: List[Tuple[int, int]]


def _boxes(count: int, gen: torch.Generator) -> Tensor:
    centres = torch.rand(count, 2, generator=gen, dtype=torch.float64) * 0.6 + 0.2
    sizes = torch.rand(count, 2, generator=gen, dtype=torch.float64) * 0.3 + 0.05
    return torch.cat([centres, sizes], dim=1)


def make_layer(
    seed: int,
    num_targets: Sequence[int],
    queries: int = 12,
    num_classes: int = 5,
    dn_groups: int = 0,
    tied: bool = False,
) -> Layer:
    """One layer of ``len(num_targets)`` images with these numbers of targets.

    Without ``dn_groups``: a one-to-one matching of ``min(T, Q)`` random queries to the targets, in random order.
    With ``dn_groups`` G: the denoising part of the layer as HF's RT-DETR lays it out, ``Q = G * 2 * max(T)``
    queries; group g's query ``g * 2 * max(T) + j`` is matched to target j (j < T), the image's padding slots
    (T <= j < max(T)) and the contrastive half (the second max(T) of each group) are unmatched. The matched
    predicted boxes are noisy copies of their targets (IoU > 0), except one far away (IoU 0) on seeds divisible by 3;
    ``tied`` puts the logits on a grid of 0.5 (many exact ties).
    """
    gen = torch.Generator().manual_seed(seed)
    batch = len(num_targets)
    if dn_groups:
        queries = dn_groups * 2 * max(max(num_targets), 1)
    logits = torch.randn(batch, queries, num_classes, generator=gen, dtype=torch.float64) * 1.5 - 1.0
    if tied:
        logits = torch.round(logits * 2) / 2
    pred_boxes = _boxes(batch * queries, gen).reshape(batch, queries, 4)
    targets, indices = [], []
    for image, count in enumerate(num_targets):
        boxes = _boxes(count, gen)
        labels = torch.randint(0, num_classes, (count,), generator=gen)
        targets.append({"class_labels": labels, "boxes": boxes})
        if dn_groups:
            slot = 2 * max(max(num_targets), 1)
            query = torch.cat([g * slot + torch.arange(count) for g in range(dn_groups)])
            target = torch.arange(count).repeat(dn_groups)
        else:
            matched = min(count, queries)
            query = torch.randperm(queries, generator=gen)[:matched]
            target = torch.randperm(count, generator=gen)[:matched]
        noise = torch.randn(len(query), 4, generator=gen, dtype=torch.float64) * 0.02
        pred_boxes[image, query] = boxes[target] + noise
        pred_boxes[image, query, 2:] = pred_boxes[image, query, 2:].abs().clamp_min(0.01)
        if seed % 3 == 0 and len(query):
            pred_boxes[image, query[0]] = torch.tensor([0.95, 0.95, 0.02, 0.02], dtype=torch.float64)
            boxes[target[0]] = torch.tensor([0.1, 0.1, 0.05, 0.05], dtype=torch.float64)
        indices.append((query, target))
    sizes = [(480 + 32 * image, 640 - 16 * image) for image in range(batch)]
    return Layer(logits, pred_boxes, indices, targets, sizes)


def part(layer: Layer, images: slice) -> Layer:
    """The layer of some of its images (a worker's share of the batch)."""
    return Layer(
        layer.logits[images],
        layer.pred_boxes[images],
        layer.indices[images],
        layer.targets[images],
        layer.image_sizes[images],
    )


def rank_sort_loss(**options: object) -> SetRankingLoss:
    """The set-prediction loss of Rank & Sort Loss with its set-prediction arguments and ``options``."""
    return SetRankingLoss(set_prediction_criterion("RankSortCriterion"), **options)  # type: ignore[arg-type]
