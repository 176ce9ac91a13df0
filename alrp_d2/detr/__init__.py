"""Ranking losses for DETR-family detectors (pure torch and the ranking criteria; no detectron2, no transformers
import): the per-decoder-layer set-prediction ranking loss, and :func:`use_ranking_loss`, which puts it on a Hugging
Face RT-DETR or Deformable-DETR (it imports ``transformers``, the ``detr`` extra, on first use). docs/detr.md."""

from typing import Any

from .set_ranking_loss import BOX_TERMS, RANKINGS, SetRankingLoss

__all__ = ["BOX_TERMS", "RANKINGS", "SetRankingLoss"]


def __getattr__(name: str) -> Any:
    """``use_ranking_loss`` from :mod:`.hf_loss_function`, imported (with ``transformers``) when first asked for."""
    if name == "use_ranking_loss":
        from .hf_loss_function import use_ranking_loss

        return use_ranking_loss
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
