"""Ranking losses for DETR-family detectors (pure torch and the ranking criteria; no detectron2, no transformers
import): the per-decoder-layer set-prediction ranking loss. docs/detr.md."""

from .set_ranking_loss import BOX_TERMS, RANKINGS, SetRankingLoss

__all__ = ["BOX_TERMS", "RANKINGS", "SetRankingLoss"]
