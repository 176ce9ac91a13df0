"""Ranking losses for DETR-family detectors (pure torch and the ranking criteria; no detectron2, no transformers
import): the per-decoder-layer set-prediction ranking loss and its criteria built by name, and
:func:`use_ranking_loss` / :func:`restore_loss`, which put it on a Hugging Face DETR and take it off again (they
import ``transformers``, the ``detr`` extra, on first use). docs/detr.md."""

from typing import Any

from .set_prediction_criterion import SET_PREDICTION_ARGUMENTS, set_prediction_criterion, set_ranking_loss
from .set_ranking_loss import BOX_TERMS, MatchedSet, SetRankingLoss

__all__ = [
    "BOX_TERMS",
    "MatchedSet",
    "SET_PREDICTION_ARGUMENTS",
    "SetRankingLoss",
    "set_prediction_criterion",
    "set_ranking_loss",
]

#: The functions of :mod:`.hf_loss_function`, imported (with ``transformers``) when first asked for.
HF_FUNCTIONS = ("attach_ranking_loss", "restore_loss", "use_ranking_loss")


def __getattr__(name: str) -> Any:
    """The functions of :data:`HF_FUNCTIONS` from :mod:`.hf_loss_function`, imported when first asked for."""
    if name in HF_FUNCTIONS:
        try:
            from . import hf_loss_function
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] != "transformers":
                raise
            raise ModuleNotFoundError(
                f"alrp_d2.detr.{name} needs transformers, the 'detr' extra of alrp_d2: pip install '.[detr]' in the "
                "alrp_d2 checkout (transformers, scipy, accelerate)",
                name=error.name,
            ) from error
        return getattr(hf_loss_function, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
