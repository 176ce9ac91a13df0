"""Self-balance of the localisation component (paper Sec. 4.2, App. F.3): the weight of each
head's L_loc, the rule that updates it, the period and the hook that applies it."""

from __future__ import annotations

import logging
import math
from typing import Dict, List, Tuple

from detectron2.config import CfgNode
from detectron2.data import get_detection_dataset_dicts
from detectron2.engine import HookBase
from detectron2.utils import comm
from torch import nn

__all__ = [
    "LocalisationWeight",
    "SelfBalanceHook",
    "find_localisation_weights",
    "iterations_per_epoch",
    "self_balance_period",
    "self_balanced_weight",
]

logger = logging.getLogger(__name__)


class LocalisationWeight:
    """The weight w_r of a head's localisation component.

    Constant (``self_balanced=False``, paper Table 3) or maintained by
    :class:`alrp_d2.engine.SelfBalanceHook` as mean(L) / mean(L_loc) of the previous period
    (Sec. 4.2, App. F.3). Weighting the loss value of ``L_loc`` only scales the gradient with
    respect to the boxes, because ``L_loc`` carries no score gradient (App. F.3).
    """

    def __init__(self, name: str, value: float, self_balanced: bool):
        self.name = name
        self.value = float(value)
        self.self_balanced = self_balanced

    def __repr__(self) -> str:
        kind = "self-balanced" if self.self_balanced else "constant"
        return f"LocalisationWeight({self.name!r}, {self.value:.4g}, {kind})"


def find_localisation_weights(model: nn.Module) -> Dict[str, LocalisationWeight]:
    """All localisation weights of a model's heads, by name (a DDP wrapper is looked through)."""
    weights: Dict[str, LocalisationWeight] = {}
    for module in model.modules():
        weight = getattr(getattr(module, "ranking_loss", None), "loc_weight", None)
        if isinstance(weight, LocalisationWeight):
            if weight.name in weights and weights[weight.name] is not weight:
                raise ValueError(f"two heads share the ranking-loss name {weight.name!r}")
            weights[weight.name] = weight
    return weights


def iterations_per_epoch(cfg: CfgNode) -> int:
    """ceil(training images / SOLVER.IMS_PER_BATCH), counting the images the loader keeps."""
    dataset = get_detection_dataset_dicts(cfg.DATASETS.TRAIN, filter_empty=cfg.DATALOADER.FILTER_EMPTY_ANNOTATIONS)
    return max(1, math.ceil(len(dataset) / cfg.SOLVER.IMS_PER_BATCH))


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
    """Keeps every self-balanced localisation weight of the model (one per head:
    RetinaNet's, or the RPN's and the box head's) equal to mean(L) / mean(L_loc) of the
    previous period, L = L_cls + L_loc the head's unweighted aLRP Loss.

    The heads write ``sb/<name>/cls`` and ``sb/<name>/loc`` into EventStorage every iteration.
    After each step the hook adds the mean of those values over the workers to the period's
    sums (one all-gather of a few floats), so every worker holds the same sums and computes the
    same weight, whichever MODEL.ALRP.RANKING; the weight is logged as ``sb/<name>/weight``. A period closes after every
    ``period`` iterations counted from iteration 0. The weights and the partial sums are the
    hook's ``state_dict``, which detectron2 saves in the trainer's checkpoints: resuming
    reproduces an uninterrupted run. The hook must come before the checkpointer in the hook
    list, so that a checkpoint includes the step it is written after.
    """

    def __init__(self, period: int):
        if period < 1:
            raise ValueError(f"self-balance period must be >= 1 iteration, got {period}")
        self.period = period
        self._weights: Dict[str, LocalisationWeight] = {}
        self._state: Dict[str, Dict[str, float]] = {}

    def before_train(self) -> None:
        self._weights = {
            name: weight
            for name, weight in find_localisation_weights(self.trainer.model).items()
            if weight.self_balanced
        }
        for name, weight in self._weights.items():
            state = self._state.setdefault(name, {"weight": weight.value, "sum_cls": 0.0, "sum_loc": 0.0})
            weight.value = state["weight"]
        for name in set(self._state) - set(self._weights):
            logger.warning("Self-balance state for %r has no matching head in the model; ignored.", name)

    def after_step(self) -> None:
        names = sorted(self._weights)
        for name, (step_cls, step_loc) in zip(names, self._gather_step_values(names)):
            self._state[name]["sum_cls"] += step_cls
            self._state[name]["sum_loc"] += step_loc
        if (self.trainer.iter + 1) % self.period == 0:
            self._close_period()
        storage = self.trainer.storage
        for name in names:
            storage.put_scalar(f"sb/{name}/weight", self._state[name]["weight"], smoothing_hint=False)

    def _gather_step_values(self, names: List[str]) -> List[Tuple[float, float]]:
        """This step's (L_cls, L_loc) of each head, averaged over the workers whose head wrote
        them this step ((0, 0) when none did). The average, not the sum, keeps the period sums
        independent of the number of workers: with MODEL.ALRP.RANKING = "global" every worker
        writes the loss of the whole batch, which then enters once, as with one worker."""
        storage = self.trainer.storage
        latest = storage.latest()
        local = []
        for name in names:
            cls_value, cls_iter = latest.get(f"sb/{name}/cls", (0.0, -1))
            loc_value, _ = latest.get(f"sb/{name}/loc", (0.0, -1))
            local.append((cls_value, loc_value, 1) if cls_iter == storage.iter else (0.0, 0.0, 0))
        workers = comm.all_gather(local) if comm.get_world_size() > 1 else [local]
        step_values = []
        for per_head in zip(*workers):
            sum_cls, sum_loc, writers = (sum(values) for values in zip(*per_head))
            step_values.append((sum_cls / writers, sum_loc / writers) if writers else (0.0, 0.0))
        return step_values

    def _close_period(self) -> None:
        for name, state in self._state.items():
            if name not in self._weights:
                continue
            state["weight"] = self_balanced_weight(state["sum_cls"], state["sum_loc"], state["weight"])
            state.update(sum_cls=0.0, sum_loc=0.0)
            self._weights[name].value = state["weight"]

    def state_dict(self) -> Dict:
        return {"period": self.period, "heads": {name: dict(state) for name, state in self._state.items()}}

    def load_state_dict(self, state_dict: Dict) -> None:
        if state_dict["period"] != self.period:
            logger.warning(
                "Resuming self-balance with period %d; the checkpoint used %d.", self.period, state_dict["period"]
            )
        self._state = {name: dict(state) for name, state in state_dict["heads"].items()}
        for name, weight in self._weights.items():
            if name in self._state:
                weight.value = self._state[name]["weight"]
