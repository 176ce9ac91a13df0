"""The learning-rate schedule of the yacs configs (SOLVER.STEPS, GAMMA, WARMUP_*) as one LazyCall-able function, so
that a LazyConfig's schedule follows ``train.max_iter`` (``max_iter="${train.max_iter}"``)."""

from __future__ import annotations

from typing import Sequence

from detectron2.solver import WarmupParamScheduler
from fvcore.common.param_scheduler import MultiStepParamScheduler

__all__ = ["warmup_multistep_schedule"]


def warmup_multistep_schedule(
    max_iter: int,
    steps: Sequence[int],
    warmup_iters: int = 500,
    warmup_factor: float = 0.001,
    gamma: float = 0.1,
    warmup_method: str = "linear",
) -> WarmupParamScheduler:
    """The multiplier of detectron2's ``build_lr_scheduler`` for "WarmupMultiStepLR": ``gamma**k`` after the k-th of
    ``steps`` (those after ``max_iter`` ignored), after a warmup of ``warmup_iters`` from ``warmup_factor``."""
    kept = [step for step in steps if step <= max_iter]
    return WarmupParamScheduler(
        MultiStepParamScheduler(values=[gamma**k for k in range(len(kept) + 1)], milestones=kept, num_updates=max_iter),
        warmup_factor,
        min(warmup_iters / max_iter, 1.0),
        warmup_method,
    )
