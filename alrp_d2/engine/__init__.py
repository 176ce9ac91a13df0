"""Training engine: the trainer and self-balance."""

from .collapse_check import CollapseCheckHook, TrainingCollapsedError
from .self_balance import SelfBalanceHook, find_ranking_losses, self_balance_period
from .trainer import AlrpTrainer

__all__ = [
    "AlrpTrainer",
    "CollapseCheckHook",
    "TrainingCollapsedError",
    "SelfBalanceHook",
    "find_ranking_losses",
    "self_balance_period",
]
