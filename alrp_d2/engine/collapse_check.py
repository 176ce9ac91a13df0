"""A training run that stops learning says so: the hook that reads what the trainer and the heads already logged
this step (detectron2's ``EventStorage``: the loss values, the heads' sample counts, the ranking losses' statistics
of :class:`~alrp_d2.engine.SelfBalanceHook`, the batch's number of objects of :class:`ObjectCountingLoader`) and
reports a collapse within ``patience`` iterations of batches that have objects to rank."""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, Iterator, List, Set, Tuple

from detectron2.engine import HookBase
from detectron2.utils.events import get_event_storage
from torch.nn.parallel import DistributedDataParallel

from ..modeling.huggingface_detr import HuggingFaceDETR

__all__ = [
    "COUNT_KEYS",
    "OBJECTS_KEY",
    "SATURATED_LOGIT",
    "CollapseCheckHook",
    "ObjectCountingLoader",
    "TrainingCollapsedError",
]

logger = logging.getLogger(__name__)

#: Sample counts the heads log every step (detectron2's RPN and ROI heads, the dense detectors); 0 for
#: ``patience`` iterations in a row is reported.
COUNT_KEYS: Tuple[str, ...] = (
    "rpn/num_pos_anchors",
    "roi_head/num_fg_samples",
    "roi_head/num_bg_samples",
    "num_pos_anchors",
)


#: A logit from which float32's sigmoid rounds to exactly 1 (its negative: a score below 5e-8, under any test score
#: threshold). A head whose every logit of a step is above it (below its negative) has saturated scores.
SATURATED_LOGIT = 17.0


#: The number of ground-truth objects of the step's batch (this process's images), which :class:`ObjectCountingLoader`
#: logs: a batch without any object has nothing to rank, its losses are 0 by definition, and it is no collapse.
OBJECTS_KEY = "batch/num_objects"


class ObjectCountingLoader:
    """The training loader whose every batch logs its number of ground-truth objects (:data:`OBJECTS_KEY`, the
    ``instances`` of its images) in the trainer's ``EventStorage`` when the trainer takes it. Its iterator is made
    when the trainer asks for it (the loader's own ``iter``: the draw of its workers' seed happens where it did)."""

    def __init__(self, loader: Iterable[List[Dict[str, Any]]]):
        self.loader = loader

    def __iter__(self) -> Iterator[List[Dict[str, Any]]]:
        batches = iter(self.loader)
        return (self._counted(batch) for batch in batches)

    @staticmethod
    def _counted(batch: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The batch, its objects logged when its images carry ``instances`` (a loader whose images carry none, e.g.
        a user's, logs nothing: its steps are all checked)."""
        if any("instances" in image for image in batch):
            count = sum(len(image["instances"]) for image in batch if "instances" in image)
            get_event_storage().put_scalar(OBJECTS_KEY, float(count), smoothing_hint=False)
        return batch


class TrainingCollapsedError(FloatingPointError):
    """Every loss of the run has been exactly 0 for several iterations: no parameter gets a gradient. A
    ``FloatingPointError`` as detectron2's error for a non-finite loss, so that code catching that one catches both."""


def collapse_advice(lazy: bool, detr: bool = False) -> str:
    """What to change, in the keys of the config system of the run (``lazy``: a LazyConfig's fields, else YAML keys)
    and of its model (``detr``: a :class:`HuggingFaceDETR`, whose backbone and weights are its HF config's)."""
    if detr:
        weights = "model.pretrained or train.init_checkpoint" if lazy else "MODEL.DETR.PRETRAINED or MODEL.WEIGHTS"
        norm = "model.hf_config's backbone" if lazy else "MODEL.DETR.HF_CONFIG's backbone"
    elif lazy:
        weights = "train.init_checkpoint"
        norm = (
            "model.backbone.bottom_up.stem.norm and model.backbone.bottom_up.stages.norm 'BN' (or 'SyncBN') and "
            "model.backbone.norm 'GN'"
        )
    else:
        weights = "MODEL.WEIGHTS"
        norm = "MODEL.RESNETS.NORM 'BN' (or 'SyncBN') and MODEL.FPN.NORM 'GN'"
    if lazy:
        warmup = "lr_multiplier.warmup_length (a fraction of train.max_iter: a shortened run shrinks the warm-up)"
        lr = "optimizer.lr"
    else:
        warmup = "SOLVER.WARMUP_ITERS"
        lr = "SOLVER.BASE_LR"
    return (
        "A ranking loss is exactly 0 when its head ranks no positive: Rank & Sort Loss ranks a positive by the IoU "
        "of its predicted box, and a randomly initialised network without normalisation (detectron2's FrozenBN "
        f"recipes, made for ImageNet weights) predicts boxes of IoU 0. Start from weights ({weights}), or from "
        f"scratch with normalisation ({norm}); a longer warm-up ({warmup}) or a lower learning rate ({lr}) "
        "(docs/getting_started.md, 'A run that stops learning')."
    )


class CollapseCheckHook(HookBase):
    """After every step whose batch has objects (a step whose :data:`OBJECTS_KEY` is 0 is skipped: nothing to rank,
    its losses are 0 by definition), reads the values this step put in the trainer's ``EventStorage`` (no tensor, no
    host synchronisation) and reports a run that stops learning:

    - every ``loss_*`` value exactly 0 for ``patience`` iterations in a row: :class:`TrainingCollapsedError` (only
      the main process has the loss values; detectron2's launcher ends the others);
    - a head's ranking loss (``sb/<head>/cls``) exactly 0, i.e. no positive ranked, a sample count of
      :data:`COUNT_KEYS` at 0 (no positive anchor, no foreground or no background proposal), or a head's logits all
      saturated (``sb/<head>/logit_min`` >= :data:`SATURATED_LOGIT`: every score rounds to 1, or
      ``sb/<head>/logit_max`` <= -:data:`SATURATED_LOGIT`: no score passes a test threshold), for ``patience``
      iterations in a row: one warning until it recovers, and ``collapse/<key>`` = 1 in the metrics while it lasts.

    It must come after :class:`SelfBalanceHook`, whose ranking statistics it reads, and before the checkpointer,
    which saves its counts (:meth:`state_dict`).
    """

    def __init__(self, patience: int = 2, lazy: bool = False):
        if patience < 1:
            raise ValueError(f"patience must be >= 1 iteration, got {patience}")
        self.patience = patience
        self.lazy = lazy
        self.detr = False  # whether the trained model is a HuggingFaceDETR (its advice), set before training
        self._zero_runs: Dict[str, int] = {}  # watched key -> iterations in a row at exactly 0
        self._warned: Set[str] = set()

    def before_train(self) -> None:
        model = self.trainer.model
        model = model.module if isinstance(model, DistributedDataParallel) else model
        self.detr = isinstance(model, HuggingFaceDETR)

    def after_step(self) -> None:
        storage = self.trainer.storage
        iteration = self.trainer.iter
        step = {name: value for name, (value, logged) in storage.latest().items() if logged == iteration}
        if step.get(OBJECTS_KEY) == 0.0:
            return
        losses = [value for name, value in step.items() if name.startswith("loss_")]
        if losses:
            self._count("all losses", all(value == 0.0 for value in losses))
            if self._zero_runs["all losses"] >= self.patience:
                raise TrainingCollapsedError(
                    f"every loss ({', '.join(sorted(n for n in step if n.startswith('loss_')))}) has been exactly 0 "
                    f"for {self._zero_runs['all losses']} iterations up to iteration {iteration}: no parameter gets "
                    f"a gradient, the run has collapsed. {collapse_advice(self.lazy, self.detr)}"
                )
        flagged: List[str] = []
        for key in self._watched(step):
            self._count(key, self._stalled(key, step[key]))
            if self._zero_runs[key] >= self.patience:
                flagged.append(key)
                storage.put_scalar(f"collapse/{key}", 1.0, smoothing_hint=False)
            else:
                self._warned.discard(key)
        new = [key for key in flagged if key not in self._warned]
        if new:
            self._warned.update(new)
            logger.warning(
                "Iteration %d: %s for %d iterations in a row (metrics: collapse/<key>). %s",
                iteration,
                ", ".join(self._describe(key) for key in new),
                self.patience,
                collapse_advice(self.lazy, self.detr),
            )

    def state_dict(self) -> Dict[str, Dict]:
        """The runs of zeros so far, saved in the trainer's checkpoints: a resumed run reports as the uninterrupted."""
        return {"zero_runs": dict(self._zero_runs), "warned": {key: True for key in self._warned}}

    def load_state_dict(self, state_dict: Dict[str, Dict]) -> None:
        self._zero_runs = dict(state_dict["zero_runs"])
        self._warned = set(state_dict["warned"])

    @staticmethod
    def _watched(step: Dict[str, float]) -> Iterable[str]:
        for name in step:
            if name in COUNT_KEYS or (name.startswith("sb/") and name.endswith(("/cls", "/logit_min", "/logit_max"))):
                yield name

    @staticmethod
    def _stalled(key: str, value: float) -> bool:
        if key.endswith("/logit_min"):
            return value >= SATURATED_LOGIT
        if key.endswith("/logit_max"):
            return value <= -SATURATED_LOGIT
        return value == 0.0

    @staticmethod
    def _describe(key: str) -> str:
        head = key.split("/")[1] if key.startswith("sb/") else ""
        if key.endswith("/logit_min"):
            return f"every logit of head {head!r} >= {SATURATED_LOGIT:g} ({key}: every score rounds to 1, no ranking)"
        if key.endswith("/logit_max"):
            return f"every logit of head {head!r} <= -{SATURATED_LOGIT:g} ({key}: no score passes a test threshold)"
        if key.startswith("sb/"):
            return f"the ranking loss of head {head!r} exactly 0 ({key}: no positive ranked)"
        return f"{key} exactly 0"

    def _count(self, key: str, zero: bool) -> None:
        self._zero_runs[key] = self._zero_runs.get(key, 0) + 1 if zero else 0
