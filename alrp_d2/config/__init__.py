"""The config of alrp-d2 (detectron2's config system, extended as detectron2 projects do): its keys
(``add_alrp_config``, :mod:`.keys`), the validation of the keys no constructor reads (:mod:`.validation`) and the one
entry point ``setup_cfg`` (:mod:`.setup`); the errors naming a key or an argument (:mod:`.checks`), the ranges of the
losses' hyperparameters (:mod:`.hyperparameter_ranges`) and the command-line argument types
(:mod:`.argument_types`).

``checks`` and ``hyperparameter_ranges`` are pure Python: the detectron2-free criteria import them. The keys,
the validation and ``setup_cfg`` import detectron2 and register the project's components, so this package imports
them on first access of their names (``from alrp_d2.config import setup_cfg``).
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
