"""A training run that stops learning says so: the hook that reads what the trainer and the heads already logged
this step (detectron2's ``EventStorage``: the loss values, the heads' sample counts, the ranking losses' statistics
of :class:`~alrp_d2.engine.SelfBalanceHook`) and reports a collapse within ``patience`` iterations."""

from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Set, Tuple

from detectron2.engine import HookBase

__all__ = ["COUNT_KEYS", "SATURATED_LOGIT", "CollapseCheckHook", "TrainingCollapsedError"]

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


class TrainingCollapsedError(FloatingPointError):
    """Every loss of the run has been exactly 0 for several iterations: no parameter gets a gradient. A
    ``FloatingPointError`` as detectron2's error for a non-finite loss, so that code catching that one catches both."""


def collapse_advice(lazy: bool) -> str:
    """What to change, in the keys of the config system of the run."""
    if lazy:
        weights = "train.init_checkpoint"
        norm = (
            "model.backbone.bottom_up.stem.norm and model.backbone.bottom_up.stages.norm 'BN' (or 'SyncBN') and "
            "model.backbone.norm 'GN'"
        )
        warmup = "lr_multiplier.warmup_length (a fraction of train.max_iter: a shortened run shrinks the warm-up)"
        lr = "optimizer.lr"
    else:
        weights = "MODEL.WEIGHTS"
        norm = "MODEL.RESNETS.NORM 'BN' (or 'SyncBN') and MODEL.FPN.NORM 'GN'"
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
    """After every step, reads the values this step put in the trainer's ``EventStorage`` (no tensor, no host
    synchronisation) and reports a run that stops learning:

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
        self._zero_runs: Dict[str, int] = {}  # watched key -> iterations in a row at exactly 0
        self._warned: Set[str] = set()

    def after_step(self) -> None:
        storage = self.trainer.storage
        iteration = self.trainer.iter
        step = {name: value for name, (value, logged) in storage.latest().items() if logged == iteration}
        losses = [value for name, value in step.items() if name.startswith("loss_")]
        if losses:
            self._count("all losses", all(value == 0.0 for value in losses))
            if self._zero_runs["all losses"] >= self.patience:
                raise TrainingCollapsedError(
                    f"every loss ({', '.join(sorted(n for n in step if n.startswith('loss_')))}) has been exactly 0 "
                    f"for {self._zero_runs['all losses']} iterations up to iteration {iteration}: no parameter gets "
                    f"a gradient, the run has collapsed. {collapse_advice(self.lazy)}"
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
                collapse_advice(self.lazy),
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
