"""Training engine: the trainer and self-balance."""

from .self_balance import SelfBalanceHook, find_ranking_losses, self_balance_period
from .trainer import AlrpTrainer

__all__ = ["AlrpTrainer", "SelfBalanceHook", "find_ranking_losses", "self_balance_period"]
