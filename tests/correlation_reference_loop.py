"""Loop references for the Correlation Loss tests: the official heads' per-level rule as a loop over
levels, and the soft rank by the pool-adjacent-violators algorithm (a Python loop over entries)."""

from __future__ import annotations

import torch
from torch import Tensor

from alrp_d2.losses import correlation_loss


def per_level_loop(scores: Tensor, ious: Tensor, levels: Tensor, num_levels: int, kind: str) -> Tensor:
    """The official ``use_loss_single=1`` rule: one loss per level, summed, divided by the number of
    levels with at least two positives (a level whose loss is 0 because its IoUs are constant counts)."""
    total = scores.sum() * 0
    active = 0
    for level in range(num_levels):
        mask = levels == level
        total = total + correlation_loss(scores[mask], ious[mask], kind)
        active += int(mask.sum()) >= 2
    return total / max(active, 1)


def soft_rank_pav(values: Tensor, regularization_strength: float = 1.0) -> Tensor:
    """l2 soft rank of 1-D ``values`` (float64): PAV on ``y = s - w``, merging equal neighbours."""
    theta = values.double() / regularization_strength
    ordered, order = torch.sort(theta, descending=True)
    count = ordered.numel()
    blocks: list[list[float]] = []  # [sum, size] of every block
    for value in (ordered - torch.arange(count, 0, -1, dtype=torch.float64)).tolist():
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] <= blocks[-1][0] / blocks[-1][1]:
            total, size = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += size
    solution = torch.tensor([total / size for total, size in blocks for _ in range(int(size))], dtype=torch.float64)
    ranks = torch.empty_like(theta)
    ranks[order] = ordered - solution
    return ranks
