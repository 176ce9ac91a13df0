"""Shared by the tests of the segmented ranking: the sets of a DETR-like step (different sizes, as denoising sets
have, an empty set, a set without positives) and the per-set calls the one call must equal."""

from __future__ import annotations

from typing import Dict, List, Sequence

import torch

from alrp_d2.losses import RankingSet, alrp_loss, ap_loss, rank_sort_loss

from .ranking_cases import only_set

#: (queries, positives) of every set of a step with 2 images: main sets, a denoising set (more positives), an empty
#: set and a set without positives.
SHAPES = [(6, 4), (4, 7), (0, 0), (5, 0), (6, 3)]
#: name -> (the loss, its differentiated components, keyword arguments).
LOSSES: Dict[str, tuple] = {
    "alrp": (alrp_loss, ("loss_cls", "loss_loc"), {"delta": 0.5}),
    "ap": (ap_loss, ("loss",), {"delta": 1.0}),
    "ap_interpolated": (ap_loss, ("loss",), {"delta": 1.0, "eps": None, "interpolated": True}),
    "rank_sort": (rank_sort_loss, ("ranking_loss",), {"delta": 0.5}),
    "rank_sort_unit_step": (rank_sort_loss, ("ranking_loss",), {"delta": 0.0}),
}


def step_sets(seed: int, images: int = 2, classes: int = 3) -> List[RankingSet]:
    """Float64 sets of :data:`SHAPES`: logits on a coarse grid on even seeds (ties within and across sets),
    ignored queries on every third seed, IoU-like positive values (E_loc for aLRP Loss, targets for Rank & Sort)."""
    gen = torch.Generator().manual_seed(seed)
    sets = []
    for queries, num_positives in SHAPES:
        logits = torch.randn(images, queries, classes, generator=gen, dtype=torch.float64) * 2
        if seed % 2 == 0:
            logits = torch.round(logits * 2) / 2
        positives = torch.randperm(logits.numel(), generator=gen)[:num_positives]
        values = 1.0 - torch.rand(num_positives, generator=gen, dtype=torch.float64) * 0.9
        if seed % 2 == 0:
            values = (torch.round(values * 4) / 4).clamp_min(0.25)
        valid = torch.rand(images, queries, 1, generator=gen) > 0.2 if seed % 3 == 1 else None
        sets.append(RankingSet(logits, positives, values, valid))
    return sets


def leaves(sets: Sequence[RankingSet]) -> List[RankingSet]:
    """The sets with logits and positive values that require gradients."""
    return [
        ranking_set._replace(
            logits=ranking_set.logits.detach().clone().requires_grad_(True),
            positive_values=ranking_set.positive_values.detach().clone().requires_grad_(True),
        )
        for ranking_set in sets
    ]


def single_call(name: str, ranking_set: RankingSet, **options) -> tuple:
    """The loss ``name`` of one set (a list of one: one ranking), its values as scalars."""
    loss, _, kwargs = LOSSES[name]
    return only_set(loss([ranking_set], **kwargs, **options))


def one_call(name: str, sets: Sequence[RankingSet], **options) -> tuple:
    """The loss ``name`` of all ``sets`` in one call (the segmented ranking)."""
    loss, _, kwargs = LOSSES[name]
    return loss(sets, **kwargs, **options)


def weighted_backward(terms: tuple, components: Sequence[str], weights: torch.Tensor) -> None:
    """Backpropagates ``sum_s w_s (sum of the components)_s`` (a DETR step's weighted loss keys)."""
    sum((getattr(terms, name) * weights).sum() for name in components).backward()
