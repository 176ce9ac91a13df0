"""The losses a run trains with, recorded in its checkpoints (the trainer's hook state): ``--resume`` with another
loss or criterion than the checkpoint's is an error naming both, since resuming continues the run exactly
(docs/robustness.md, "Resuming with another loss")."""

from __future__ import annotations

from typing import Dict

from detectron2.engine import HookBase
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..detr.set_ranking_loss import SetRankingLoss
from ..modeling.head_ranking_loss import HeadRankingLoss

__all__ = ["LossChangedError", "LossRecordHook", "describe_losses"]


class LossChangedError(ValueError):
    """A resumed run whose losses differ from those its checkpoint was trained with."""


def describe_losses(model: nn.Module) -> Dict[str, str]:
    """{module name: its settings} of every ranking loss of ``model``: a head's :class:`HeadRankingLoss` (its
    criterion and hyperparameters, weight, ranking, additive terms; not the trained self-balance weight) and a
    DETR's :class:`SetRankingLoss`. Empty for a model trained by its own losses (e.g. ``criterion=None``)."""
    module = model.module if isinstance(model, DistributedDataParallel) else model
    losses: Dict[str, str] = {}
    for name, child in module.named_modules():
        if isinstance(child, HeadRankingLoss):
            losses[name] = (
                f"{child.criterion!r}, loss_weight={child.loss_weight}, self_balanced={child.self_balanced}, "
                f"ranking={child.ranking!r}, balanced_tasks={child.balanced_tasks}, terms={child.terms}"
            )
        elif isinstance(child, SetRankingLoss):
            losses[name] = child.extra_repr()
    return losses


def _describe(losses: Dict[str, str]) -> str:
    if not losses:
        return "no ranking loss of alrp_d2 (the model's own losses)"
    return "; ".join(f"{name}: {settings}" for name, settings in sorted(losses.items()))


class LossRecordHook(HookBase):
    """Saves :func:`describe_losses` of the trained model in every checkpoint and, when a run resumes from one,
    raises :class:`LossChangedError` if the model's losses are not those recorded (a checkpoint of an earlier
    version records none and is not checked). ``lazy``: the advice names LazyConfig fields, else YAML keys."""

    def __init__(self, lazy: bool = False):
        self.lazy = lazy

    def state_dict(self) -> Dict[str, Dict[str, str]]:
        return {"losses": describe_losses(self.trainer.model)}

    def load_state_dict(self, state_dict: Dict[str, Dict[str, str]]) -> None:
        recorded, current = dict(state_dict["losses"]), describe_losses(self.trainer.model)
        if recorded == current:
            return
        checkpoint = getattr(self.trainer.checkpointer, "loaded_path", "the checkpoint")
        weights = "train.init_checkpoint=" if self.lazy else "MODEL.WEIGHTS "
        raise LossChangedError(
            f"--resume: {checkpoint} was trained with {_describe(recorded)}, but this run's config gives "
            f"{_describe(current)}. Resuming continues a run exactly, with its loss: resume with the config of that "
            f"run, or train these weights with the new loss in a new run, without --resume ({weights}{checkpoint} "
            "and another output directory)."
        )
