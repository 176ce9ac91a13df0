"""The fields of a LazyConfig that the project reads outside detectron2's own: the project's keys of ``train`` with
their defaults, and the LazyCalls of a config subtree (the datasets of a dataloader). The trainer (``alrp_d2.engine``)
and the predictor (``alrp_d2.evaluation``) read a LazyConfig through them."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List

from detectron2.config.instantiate import _convert_target_to_string
from detectron2.data import get_detection_dataset_dicts
from omegaconf import DictConfig, ListConfig

__all__ = ["TRAIN_DEFAULTS", "lazy_calls", "lazy_dataset_names", "train_option"]

#: The project's keys of ``train`` and their values when a config (e.g. one of detectron2's) lacks them:
#: ``self_balance_period`` (iterations; 0: one epoch of the training set), ``allow_partial_weights`` (weights that do
#: not fit the model load as detectron2 loads them), ``skip_unreadable_images`` (skip training images that cannot be
#: read, with a warning per file), ``seed`` (< 0: drawn, shared by the workers and saved in the checkpoints) and
#: ``eval_max_images`` (evaluate the first N images of ``dataloader.test``'s datasets; 0 or None: all).
TRAIN_DEFAULTS: Dict[str, Any] = {
    "self_balance_period": 0,
    "allow_partial_weights": False,
    "skip_unreadable_images": False,
    "seed": -1,
    "eval_max_images": 0,
}


def train_option(cfg: DictConfig, key: str) -> Any:
    """``train.<key>``, or its :data:`TRAIN_DEFAULTS` value."""
    return cfg.train.get(key, TRAIN_DEFAULTS[key])


def lazy_calls(node: Any, target: Any) -> Iterator[DictConfig]:
    """Every LazyCall of ``target`` in a config subtree (its ``_target_`` the object, or its dotted name as a
    saved config holds it)."""
    if isinstance(node, DictConfig):
        if node.get("_target_") is target or node.get("_target_") == _convert_target_to_string(target):
            yield node
        for value in node.values():
            yield from lazy_calls(value, target)
    elif isinstance(node, ListConfig):
        for value in node:
            yield from lazy_calls(value, target)


def lazy_dataset_names(cfg: DictConfig, split: str) -> List[str]:
    """The dataset names of ``dataloader.<split>`` (those of its ``get_detection_dataset_dicts`` calls)."""
    names: List[str] = []
    for call in lazy_calls(cfg.dataloader.get(split), get_detection_dataset_dicts):
        value = call.get("names")
        names += [value] if isinstance(value, str) else list(value)
    return names
