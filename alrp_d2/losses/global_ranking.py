"""One ranking over the (example, class) pairs of all workers of a process group.

Per worker, every worker ranks the pairs of its own images, as the paper trains; the loss and
its gradients then depend on how many workers share the batch. With a :class:`RankingGroup`,
the ranking losses rank the union of all workers' pairs exactly, without moving a negative:

1. the workers all-gather their numbers of positives (a few integers);
2. they all-gather the positives' scores (and, for aLRP Loss, their E_loc; for Rank & Sort Loss,
   their targets): O(P) floats, P the number of positives of the whole batch;
3. every worker builds the same band edges of the global positives and buckets its own
   negatives into the 2P + 1 gaps between them; the per-gap counts and score sums are
   all-reduced (O(P) floats). From them every worker has the global N_FP(i) and rank(i) of
   every positive (App. E Alg. 2, lines 18-25), hence every positive's error and update;
4. each worker computes the gradient of its own negatives (line 30) and positives locally.

Every worker returns the global loss value. DistributedDataParallel averages the parameter
gradients over the workers, whereas the global loss's gradient is their sum; the losses
therefore multiply the gradients of their logits and localisation errors by the world size,
so that DDP's average is the gradient of the global loss.

Pure ``torch.distributed``: it works in any training loop whose workers call the loss in the
same order. Without an initialised process group, or with one worker, no group is used and
the losses are exactly the per-worker ones.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from .input_checks import NonFiniteInputError

__all__ = [
    "RANKINGS",
    "PositiveExchange",
    "RankingGroup",
    "check_ranking",
    "exchange_checked",
    "global_mean",
    "global_set_means",
    "global_weighted_mean",
    "ranking_group",
]

RANKINGS = ("per_worker", "global")


class _ScaleGradient(torch.autograd.Function):
    """The identity whose backward multiplies the gradient by ``scale``."""

    @staticmethod
    def forward(ctx: Any, values: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return values.view_as(values)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, None]:
        return grad * ctx.scale, None


class RankingGroup:
    """The workers of a process group (``None``: the default group) that share one ranking."""

    def __init__(self, group: Optional[dist.ProcessGroup] = None):
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def exchange(self, num_positives: int, failed: bool, device: torch.device) -> PositiveExchange:
        """All-gathers every worker's number of positives and whether its inputs were invalid."""
        local = torch.tensor([num_positives, int(failed)], dtype=torch.int64, device=device)
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(gathered, local, group=self.group)
        table = torch.stack(gathered).tolist()
        return PositiveExchange(self, [count for count, _ in table], [rank for rank, row in enumerate(table) if row[1]])


class PositiveExchange:
    """The communication of one loss call: the workers' numbers of positives, the gather of
    per-positive values and the all-reduce of per-gap sums.

    Attributes:
        counts: the number of positives of every worker; this worker's positives are
            ``[local_start, local_start + num_local)`` of the concatenation in worker order.
        failed: the workers whose inputs were invalid.
    """

    def __init__(self, group: RankingGroup, counts: List[int], failed: List[int]):
        self.group = group
        self.counts = counts
        self.failed = failed
        self.total = sum(counts)
        self.num_local = counts[group.rank]
        self.local_start = sum(counts[: group.rank])

    @property
    def world_size(self) -> int:
        return self.group.world_size

    def gather(self, values: Tensor) -> Tensor:
        """(P_global, C) the (num_local, C) values of every worker's positives, concatenated in
        worker order: one all-gather padded to the largest count."""
        padded = values.new_zeros(max(self.counts), values.shape[1])
        padded[: len(values)] = values
        gathered = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(gathered, padded, group=self.group.group)
        return torch.cat([rows[:count] for rows, count in zip(gathered, self.counts)])

    def all_reduce_sum(self, values: Tensor) -> Tensor:
        """The sum over the workers (in place)."""
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=self.group.group)
        return values

    def with_local(self, gathered: Tensor, local: Tensor) -> Tensor:
        """``gathered`` (P_global,) with this worker's slice replaced by the differentiable
        ``local`` values, whose gradient is multiplied by the world size (see module docstring)."""
        end = self.local_start + self.num_local
        scaled = _ScaleGradient.apply(local.to(gathered.dtype), float(self.world_size))
        return torch.cat([gathered[: self.local_start], scaled, gathered[end:]])


def check_ranking(ranking: str) -> None:
    """A ValueError unless ``ranking`` is one of :data:`RANKINGS`; the former spelling ``"local"`` is named by its
    new one, ``"per_worker"``."""
    if ranking == "local":
        raise ValueError('ranking "local" is now called "per_worker" (one ranking per worker)')
    if ranking not in RANKINGS:
        raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")


def ranking_group(ranking: str, group: Optional[dist.ProcessGroup] = None) -> Optional[RankingGroup]:
    """The group a ranking loss ranks over: ``None`` for ``"per_worker"`` and whenever there is
    no initialised process group or a single worker (the per-worker loss is then the global one)."""
    check_ranking(ranking)
    if ranking == "per_worker" or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size(group) == 1:
        return None
    return RankingGroup(group)


def exchange_checked(
    check: Callable[[], int], device: torch.device, group: Optional[RankingGroup]
) -> Tuple[int, Optional[PositiveExchange]]:
    """Runs ``check`` (it validates this worker's inputs and returns its number of positives)
    and, with a group, exchanges the numbers of positives.

    Returns:
        The number of positives of the ranking (of all workers with a group) and the exchange
        (``None`` without a group). Invalid inputs on any worker raise on every worker, so that
        no worker waits for the others in a collective.
    """
    if group is None:
        return check(), None
    error: Optional[Exception] = None
    try:
        num_positives = check()
    except (NonFiniteInputError, ValueError, TypeError) as caught:
        error, num_positives = caught, 0
    exchange = group.exchange(num_positives, error is not None, device)
    if error is not None:
        raise error
    if exchange.failed:
        raise NonFiniteInputError(f"ranking loss inputs of worker(s) {exchange.failed} are invalid")
    return exchange.total, exchange


def global_mean(values: Tensor, group: Optional[RankingGroup]) -> Tensor:
    """The mean of ``values`` (1-D) over all workers (:func:`global_weighted_mean` with unit weights: one
    all-reduce of two floats, no host synchronisation, the local gradient multiplied by the world size); a zero
    connected to ``values`` when no worker has one. Without a group, the local mean."""
    return global_weighted_mean(values, torch.ones_like(values), group)


def global_weighted_mean(values: Tensor, weights: Tensor, group: Optional[RankingGroup], eps: float = 1e-10) -> Tensor:
    """``sum_i w_i v_i / sum_i w_i`` over the 1-D ``values`` of all workers with the (detached) ``weights``,
    dividing by 1 when the total weight is below ``eps`` (Rank & Sort Loss's score-weighted box loss, whose
    official heads do the same). No host synchronisation: with a group, one all-reduce of two floats and the
    local gradient multiplied by the world size (see the module docstring); without one, the local mean. No
    value anywhere gives a zero connected to ``values``."""
    weights = weights.detach().to(values.dtype)
    weighted = (weights * values).sum()
    total = weights.sum()
    if group is not None:
        sums = torch.stack([weighted.detach(), total]).double()
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group.group)
        local = _ScaleGradient.apply(weighted.double(), float(group.world_size))
        weighted = local + (sums[0] - weighted.detach().double())
        total = sums[1]
    normaliser = torch.where(total < eps, torch.ones_like(total), total)
    return (weighted / normaliser).to(values.dtype)


def global_set_means(
    values: Sequence[Tensor], weights: Sequence[Tensor], group: Optional[RankingGroup], eps: float = 1e-10
) -> Tensor:
    """(S,) :func:`global_weighted_mean` of every set's 1-D ``values`` with its (detached) ``weights``, all sets
    at once: one scatter of all values and, with a group, one all-reduce of 2 S floats for all sets (the local
    gradients times the world size); one set: its :func:`global_weighted_mean`. A set without a value on any worker
    gives a zero connected to ``values``."""
    if len(values) == 1:
        return global_weighted_mean(values[0], weights[0], group, eps).reshape(1)
    flat = torch.cat(list(values))
    counts = torch.tensor([len(value) for value in values], dtype=torch.long, device=flat.device)
    set_of = torch.repeat_interleave(torch.arange(len(values), device=flat.device), counts, output_size=len(flat))
    flat_weights = torch.cat([weight.detach() for weight in weights]).to(flat.dtype)
    sums = flat.new_zeros(2, len(values)).index_add(1, set_of, torch.stack([flat_weights * flat, flat_weights]))
    weighted, total = sums[0], sums[1].detach()
    if group is not None:
        reduced = sums.detach().double()
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM, group=group.group)
        local = _ScaleGradient.apply(weighted.double(), float(group.world_size))
        weighted, total = local + (reduced[0] - local.detach()), reduced[1]
    return (weighted / torch.where(total < eps, torch.ones_like(total), total)).to(flat.dtype)
