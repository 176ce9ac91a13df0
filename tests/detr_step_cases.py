"""The sets of one DETR training step for the one-call ranking's tests: decoder layers, a denoising set, a set
without a matched pair and an empty set (no query), all of the same images and targets; and the criteria ranked set
by set (one call of the criterion a set, each set one ranking: no segmented ranking)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from alrp_d2.criteria import CriterionOutput, CriterionSet, RankingCriterion
from alrp_d2.detr import MatchedSet, SetRankingLoss, set_prediction_criterion

from .detr_cases import Layer, make_layer

#: The registered criteria, by name.
CRITERIA = ("RankSortCriterion", "AlrpCriterion", "APCriterion", "InterpolatedAPCriterion")


def per_set(criterion: RankingCriterion) -> RankingCriterion:
    """``criterion`` as an instance of a subclass that ranks set by set: its ``__call__`` calls the criterion's own
    once a set, with a list of one."""
    parent = type(criterion)

    def one_by_one(self: RankingCriterion, sets: Sequence[CriterionSet], group: Any) -> List[CriterionOutput]:
        return [output for ranking_set in sets for output in parent.__call__(self, [ranking_set], group)]

    per_set_class = type(f"PerSet{parent.__name__}", (parent,), {"__call__": one_by_one})
    ranked = per_set_class.__new__(per_set_class)
    ranked.__dict__.update(vars(criterion))
    return ranked


def per_set_criterion(name: str) -> RankingCriterion:
    """:func:`per_set` of the registered criterion ``name`` with its set-prediction defaults."""
    return per_set(set_prediction_criterion(name))


def _queries(count: int, gen: torch.Generator, num_classes: int) -> Tuple[Tensor, Tensor]:
    """(count, C) float64 logits and (count, 4) normalised cxcywh boxes of ``count`` queries."""
    logits = torch.randn(count, num_classes, generator=gen, dtype=torch.float64) * 1.5 - 1.0
    centres = torch.rand(count, 2, generator=gen, dtype=torch.float64) * 0.6 + 0.2
    sizes = torch.rand(count, 2, generator=gen, dtype=torch.float64) * 0.3 + 0.05
    boxes = torch.cat([centres, sizes], dim=1)
    return logits, boxes


def step_sets(
    seed: int, num_targets: Sequence[int], num_layers: int = 2, dn_groups: int = 2
) -> Tuple[List[MatchedSet], Layer]:
    """The sets of one step of ``len(num_targets)`` images: ``num_layers`` decoder layers of 12 queries (each its own
    random one-to-one matching, its matched boxes near their targets), a set of 12 queries without a matched pair, a
    set without a query and a denoising set of ``dn_groups`` groups laid out as :func:`~tests.detr_cases.make_layer`
    lays them out; and the first layer (whose ``targets`` are every set's)."""
    first = make_layer(seed, num_targets)
    gen = torch.Generator().manual_seed(seed + 1000)
    batch, queries, num_classes = first.logits.shape
    sets = [MatchedSet(first.logits, first.pred_boxes, first.indices)]
    for _ in range(num_layers - 1):
        logits, boxes = _queries(batch * queries, gen, num_classes)
        logits, boxes = logits.reshape(batch, queries, -1), boxes.reshape(batch, queries, 4)
        indices = []
        for image, target in enumerate(first.targets):
            count = min(len(target["boxes"]), queries)
            query = torch.randperm(queries, generator=gen)[:count]
            matched = torch.randperm(len(target["boxes"]), generator=gen)[:count]
            boxes[image, query] = target["boxes"][matched] + 0.01 * torch.rand(
                count, 4, generator=gen, dtype=torch.float64
            )
            indices.append((query, matched))
        sets.append(MatchedSet(logits, boxes, indices))
    nothing = [(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)) for _ in num_targets]
    logits, boxes = _queries(batch * queries, gen, num_classes)
    sets.append(MatchedSet(logits.reshape(batch, queries, -1), boxes.reshape(batch, queries, 4), nothing))
    sets.append(MatchedSet(logits.new_zeros(batch, 0, num_classes), boxes.new_zeros(batch, 0, 4), nothing))
    slot = 2 * max(max(num_targets), 1)
    logits, boxes = _queries(batch * dn_groups * slot, gen, num_classes)
    logits, boxes = logits.reshape(batch, dn_groups * slot, -1), boxes.reshape(batch, dn_groups * slot, 4)
    dn_indices = []
    for image, count in enumerate(num_targets):
        query = torch.cat([group * slot + torch.arange(count) for group in range(dn_groups)])
        target = torch.arange(count).repeat(dn_groups)
        boxes[image, query] = first.targets[image]["boxes"][target] + 0.01
        dn_indices.append((query, target))
    sets.append(MatchedSet(logits, boxes, dn_indices))
    return sets, first


def step_part(sets: Sequence[MatchedSet], targets: Sequence[Dict[str, Tensor]], images: slice):
    """The sets and targets of some of the step's images (a worker's share of the batch)."""
    shares = [MatchedSet(s.logits[images], s.pred_boxes[images], list(s.indices)[images]) for s in sets]
    return shares, list(targets)[images]


def ranked_step(sets: Sequence[MatchedSet], targets, criterion: RankingCriterion, **options) -> List[Dict[str, Tensor]]:
    """Per set, its terms of ``SetRankingLoss(criterion, **options)(sets, targets)`` and the gradients of the sum of all
    terms with respect to its ``logits`` and ``pred_boxes`` (keys ``logits``, ``boxes``), detached; the last set's
    also the values of :meth:`SetRankingLoss.take_statistics` (keys ``statistics.<name>``)."""
    loss = SetRankingLoss(criterion, **options)
    leaves = [
        s._replace(logits=s.logits.clone().requires_grad_(True), pred_boxes=s.pred_boxes.clone().requires_grad_(True))
        for s in sets
    ]
    terms = loss(leaves, targets)
    inputs = [tensor for s in leaves for tensor in (s.logits, s.pred_boxes)]
    total = sum(value for set_terms in terms for value in set_terms.values())
    grads = torch.autograd.grad(total, inputs, materialize_grads=True)
    results = [
        {**{k: v.detach() for k, v in set_terms.items()}, "logits": grads[2 * i], "boxes": grads[2 * i + 1]}
        for i, set_terms in enumerate(terms)
    ]
    statistics = loss.take_statistics()
    assert statistics is not None
    results[-1].update((f"statistics.{name}", value) for name, value in statistics.values.items())
    return results
