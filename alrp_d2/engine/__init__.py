"""Training engine: the trainer and the self-balance hook."""
from .self_balance import SelfBalanceHook, self_balanced_weight
from .trainer import AlrpTrainer, iterations_per_epoch, self_balance_period

__all__ = ["AlrpTrainer", "SelfBalanceHook", "iterations_per_epoch", "self_balance_period", "self_balanced_weight"]
