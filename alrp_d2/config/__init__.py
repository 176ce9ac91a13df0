"""The config of alrp-d2 (detectron2's config system, extended as detectron2 projects do): its keys
(``add_alrp_config``, :mod:`.keys`), the validation of the keys no constructor reads (:mod:`.validation`), the one
entry point ``setup_cfg`` (:mod:`.setup`) and the fields of a LazyConfig the project reads (:mod:`.lazy_fields`).

This floor stands above ``alrp_d2.modeling`` and ``alrp_d2.data``: the keys register the project's components and
datasets, the validation reads the backbones' constants. The rules the floors below check (the errors naming a key or
an argument, the hyperparameters' ranges) live on the ground floor, :mod:`alrp_d2.checks`. This package imports its
modules on first access of their names (``from alrp_d2.config import setup_cfg``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .keys import add_alrp_config
    from .setup import UnsafeConfigError, setup_cfg
    from .validation import validate_alrp_config

__all__ = ["UnsafeConfigError", "add_alrp_config", "setup_cfg", "validate_alrp_config"]

_MODULE_OF = {
    "UnsafeConfigError": "setup",
    "add_alrp_config": "keys",
    "setup_cfg": "setup",
    "validate_alrp_config": "validation",
}


def __getattr__(name: str) -> Any:
    """The names of :data:`__all__` from their modules (detectron2), imported on first access."""
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
