"""Training engine: the one trainer of YAML and LazyConfig runs, self-balance and the collapse check."""

from .collapse_check import CollapseCheckHook, TrainingCollapsedError
from .self_balance import SelfBalanceHook, find_ranking_losses, self_balance_period
from .trainer import AlrpTrainer, RunTrainer, TrainingRun

__all__ = [
    "AlrpTrainer",
    "RunTrainer",
    "TrainingRun",
    "CollapseCheckHook",
    "TrainingCollapsedError",
    "SelfBalanceHook",
    "find_ranking_losses",
    "self_balance_period",
]
