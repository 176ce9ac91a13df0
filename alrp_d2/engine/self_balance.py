"""Self-balance of the localisation component (paper Sec. 4.2, App. F.3): the rule that updates each
head's localisation weight, the period, and the hook that reads the heads' ranking-loss statistics
after every step, logs them and applies the rule."""

from __future__ import annotations

import logging
import math
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
from detectron2.config import CfgNode
from detectron2.engine import HookBase
from detectron2.utils import comm
from torch import nn

from ..data.training_filter import training_dataset_dicts
from ..modeling.head_ranking_loss import HeadRankingLoss

__all__ = [
    "SelfBalanceHook",
    "find_ranking_losses",
    "iterations_per_epoch",
    "self_balance_period",
    "self_balanced_weight",
]

logger = logging.getLogger(__name__)

#: The gradient magnitudes of a :class:`~alrp_d2.losses.RankingStatistics`, after its named values in a table row.
MAGNITUDES = ("positive_gradient_magnitude", "negative_gradient_magnitude")


def find_ranking_losses(model: nn.Module) -> Dict[str, HeadRankingLoss]:
    """The ranking loss of every head of a model, by name (a DDP wrapper is looked through)."""
    losses: Dict[str, HeadRankingLoss] = {}
    for module in model.modules():
        if isinstance(module, HeadRankingLoss):
            if module.name in losses:
                raise ValueError(f"two heads share the ranking-loss name {module.name!r}")
            losses[module.name] = module
    return losses


def iterations_per_epoch(cfg: CfgNode) -> int:
    """ceil(training images / SOLVER.IMS_PER_BATCH), counting the images the loader keeps."""
    return max(1, math.ceil(len(training_dataset_dicts(cfg)) / cfg.SOLVER.IMS_PER_BATCH))


def self_balance_period(cfg: CfgNode) -> int:
    """MODEL.ALRP.SB_PERIOD, or one epoch when it is 0."""
    return cfg.MODEL.ALRP.SB_PERIOD or iterations_per_epoch(cfg)


def self_balanced_weight(sum_cls: float, sum_loc: float, previous: float) -> float:
    """mean(L_cls + L_loc) / mean(L_loc) over a period, from the period's sums (docs/paper_notes.md,
    "Self-balance ratio").

    A period without any localisation loss (no positive anywhere) keeps the previous weight.
    """
    if sum_loc <= 0.0:
        return previous
    return (sum_cls + sum_loc) / sum_loc


class SelfBalanceHook(HookBase):
    """After every step, reads the unweighted statistics of every head's ranking loss
    (:meth:`HeadRankingLoss.take_statistics`: L_cls, L_loc and the summed score-gradient
    magnitudes), averages them over the workers with one all-reduce of a few floats and reads
    them on the host once: the losses themselves never wait for the host to log. It logs
    ``sb/<name>/cls``, ``sb/<name>/loc`` and ``<name>/grad_ratio`` (the negatives' over the
    positives' summed magnitudes, paper Fig. 3), and the head's further components
    (:attr:`HeadRankingLoss.component_names`; with Rank & Sort Loss ``sb/<name>/rank``, ``sort``, the
    step's box-loss ``weight`` and those of balanced tasks such as ``mask``).

    With a ``period``, it keeps every self-balanced localisation weight (one per head:
    RetinaNet's, or the RPN's and the box head's) equal to mean(L) / mean(L_loc) of the previous
    period, L = L_cls + L_loc the head's unweighted loss, and logs it as ``sb/<name>/weight``.
    The sums use the workers' average, so every worker computes the same weight whichever
    MODEL.ALRP.RANKING (with "global" every worker has the loss of the whole batch, which then
    enters once). A period closes after every ``period`` iterations counted from iteration 0.
    The weights are buffers of the model; the period's partial sums are the hook's
    ``state_dict``, which detectron2 saves in the trainer's checkpoints: resuming reproduces an
    uninterrupted run. The hook must come before the checkpointer in the hook list, so that a
    checkpoint includes the step it is written after.
    """

    def __init__(self, period: Optional[int]):
        if period is not None and period < 1:
            raise ValueError(f"self-balance period must be >= 1 iteration, got {period}")
        self.period = period
        self._losses: Dict[str, HeadRankingLoss] = {}
        self._sums: Dict[str, List[float]] = {}
        self._weights: Dict[str, float] = {}  # the self-balanced heads' loc_weight, read when it changes

    @property
    def _balanced(self) -> List[str]:
        return [name for name, loss in self._losses.items() if loss.self_balanced and self.period is not None]

    def before_train(self) -> None:
        self._losses = dict(sorted(find_ranking_losses(self.trainer.model).items()))
        for name in self._balanced:
            self._sums.setdefault(name, [0.0, 0.0])
        for name in set(self._sums) - set(self._balanced):
            logger.warning("Self-balance state for %r has no matching self-balanced head in the model; ignored.", name)
            del self._sums[name]
        self._weights = {name: self._losses[name].loc_weight.item() for name in self._balanced}

    def after_step(self) -> None:
        storage = self.trainer.storage
        for name, values in self._step_statistics().items():
            positive, negative = values.pop("positive_gradient_magnitude"), values.pop("negative_gradient_magnitude")
            storage.put_scalars(**{f"sb/{name}/{component}": value for component, value in values.items()})
            if positive > 0:
                storage.put_scalar(f"{name}/grad_ratio", negative / positive)
            if name in self._sums:
                self._sums[name][0] += values["cls"]
                self._sums[name][1] += values["loc"]
        if self.period is not None and (self.trainer.iter + 1) % self.period == 0:
            self._close_period()
        for name, weight in self._weights.items():
            storage.put_scalar(f"sb/{name}/weight", weight, smoothing_hint=False)

    def _step_statistics(self) -> Dict[str, Dict[str, float]]:
        """Every head's :class:`~alrp_d2.losses.RankingStatistics` of this step by name (its values, in the order of
        the head's ``component_names``, and the two gradient magnitudes), averaged over the workers whose head ran
        this step (heads that ran nowhere are left out)."""
        if not self._losses:
            return {}
        rows, names = [], []
        for loss in self._losses.values():
            statistics = loss.take_statistics()
            names.append(loss.component_names + MAGNITUDES)
            if statistics is None:
                rows.append(loss.loc_weight.new_zeros(len(names[-1]) + 1, dtype=torch.float64))
            else:
                values = [statistics.values[component] for component in loss.component_names]
                values += [statistics.positive_gradient_magnitude, statistics.negative_gradient_magnitude]
                row = torch.stack([value.double() for value in values])
                rows.append(torch.cat([row, row.new_ones(1)]))
        table = torch.cat(rows)
        if comm.get_world_size() > 1:
            dist.all_reduce(table)
        flat: List[float] = table.tolist()
        step: Dict[str, Dict[str, float]] = {}
        for name, row, row_names in zip(self._losses, rows, names):
            (*sums, writers), flat = flat[: len(row)], flat[len(row) :]
            if writers:
                step[name] = {component: value / writers for component, value in zip(row_names, sums)}
        return step

    def _close_period(self) -> None:
        for name, sums in self._sums.items():
            loss = self._losses[name]
            loss.set_loc_weight(self_balanced_weight(sums[0], sums[1], self._weights[name]))
            self._weights[name] = loss.loc_weight.item()
            sums[:] = [0.0, 0.0]

    def state_dict(self) -> Dict:
        return {"period": self.period, "sums": {name: list(sums) for name, sums in self._sums.items()}}

    def load_state_dict(self, state_dict: Dict) -> None:
        if state_dict["period"] != self.period:
            logger.warning(
                "Resuming self-balance with period %s; the checkpoint used %s.", self.period, state_dict["period"]
            )
        self._sums = {name: list(sums) for name, sums in state_dict["sums"].items()}
