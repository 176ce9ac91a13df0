"""Checkpoints that cannot silently mean nothing or be lost: the checkpointer (:mod:`.checkpointer`), the weights it
reads (:mod:`.weights`), atomic writing (:mod:`.atomic_write`), safe ``.pkl`` reading (:mod:`.safe_pickle`) and the
size check of ``.pth`` archives (:mod:`.archive`)."""

from .checkpointer import BACKBONE_INITIALISATION, LAST_CHECKPOINT, AlrpCheckpointer
from .weights import (
    IncompatibleWeightsError,
    NonFiniteWeightsError,
    UnreadableCheckpointError,
    check_weights_classes,
    weights_fingerprint,
)

__all__ = [
    "BACKBONE_INITIALISATION",
    "LAST_CHECKPOINT",
    "AlrpCheckpointer",
    "IncompatibleWeightsError",
    "NonFiniteWeightsError",
    "UnreadableCheckpointError",
    "check_weights_classes",
    "weights_fingerprint",
]
