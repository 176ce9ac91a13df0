"""The own-box-term modes' matching (:mod:`alrp_d2.detr.set_matching`: each image's queries against its own targets,
every set's costs moved to the host at once) gives the indices of HF's matcher of the same config on the same inputs:
RT-DETR's (focal and softmax class costs) and Deformable-DETR's, with images without targets, duplicate queries and
duplicate targets (ties)."""

from __future__ import annotations

from typing import Dict, List

import pytest
import torch
from transformers import DeformableDetrConfig, RTDetrConfig
from transformers.loss.loss_deformable_detr import DeformableDetrHungarianMatcher
from transformers.loss.loss_rt_detr import RTDetrHungarianMatcher

from alrp_d2.detr.set_matching import deformable_detr_cost, match_sets, rt_detr_cost

NUM_CLASSES = 5
QUERIES = 9


def family_matchers():
    """(our cost, HF's matcher) of each matcher the own-box-term modes use."""
    rt_detr, softmax = RTDetrConfig(num_labels=NUM_CLASSES), RTDetrConfig(num_labels=NUM_CLASSES, use_focal_loss=False)
    deformable = DeformableDetrConfig(num_labels=NUM_CLASSES)
    return {
        "rt_detr": (rt_detr_cost(rt_detr), RTDetrHungarianMatcher(rt_detr)),
        "rt_detr_softmax": (rt_detr_cost(softmax), RTDetrHungarianMatcher(softmax)),
        "deformable_detr": (
            deformable_detr_cost(deformable),
            DeformableDetrHungarianMatcher(deformable.class_cost, deformable.bbox_cost, deformable.giou_cost),
        ),
    }


def boxes(count: int, generator: torch.Generator) -> torch.Tensor:
    centres = torch.rand(count, 2, generator=generator) * 0.6 + 0.2
    return torch.cat([centres, torch.rand(count, 2, generator=generator) * 0.3 + 0.05], 1)


def targets_with_ties(generator: torch.Generator) -> List[Dict[str, torch.Tensor]]:
    """Four images: 3 targets, none, 6 targets (two pairs identical), 1 target."""
    targets = []
    for count in (3, 0, 6, 1):
        labels, target_boxes = torch.randint(0, NUM_CLASSES, (count,), generator=generator), boxes(count, generator)
        if count == 6:
            labels[3:5], target_boxes[3:5] = labels[0], target_boxes[0]
        targets.append({"class_labels": labels, "boxes": target_boxes})
    return targets


def set_with_ties(batch: int, generator: torch.Generator):
    """(logits [B, Q, C], boxes [B, Q, 4]) with queries 1, 2 and 3 of every image copies of query 0."""
    logits = torch.randn(batch, QUERIES, NUM_CLASSES, generator=generator)
    pred_boxes = boxes(batch * QUERIES, generator).reshape(batch, QUERIES, 4)
    logits[:, 1:4], pred_boxes[:, 1:4] = logits[:, :1], pred_boxes[:, :1]
    return logits, pred_boxes


@pytest.mark.parametrize("family", list(family_matchers()))
def test_the_step_matching_gives_hf_matchers_indices(family):
    cost, matcher = family_matchers()[family]
    generator = torch.Generator().manual_seed(0)
    targets = targets_with_ties(generator)
    sets = [set_with_ties(len(targets), generator) for _ in range(3)]
    ours = match_sets(cost, sets, targets)
    for (logits, pred_boxes), set_indices in zip(sets, ours):
        theirs = matcher({"logits": logits, "pred_boxes": pred_boxes}, targets)
        for (queries, matched), (hf_queries, hf_matched) in zip(set_indices, theirs):
            assert queries.dtype == hf_queries.dtype == torch.int64
            assert torch.equal(queries, hf_queries) and torch.equal(matched, hf_matched)
