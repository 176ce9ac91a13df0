"""alrp-d2: aLRP Loss (Oksuz et al., NeurIPS 2020) for detectron2.

``alrp_d2.losses`` (the ranking losses) and ``alrp_d2.criteria`` (the ranking criteria and their registry) are pure
torch: importing them, or this package, imports no detectron2. The detectron2 components register themselves in
detectron2's registries when their subpackages are imported: ``alrp_d2.config`` (the config entry point of
``train_net.py``, ``demo.py`` and the tools) imports ``alrp_d2.modeling``; the LazyConfigs import the classes they
name. ``from alrp_d2 import add_alrp_config`` imports ``alrp_d2.config``, and so registers them, on first access.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["add_alrp_config"]


def __getattr__(name: str) -> Any:
    """``add_alrp_config`` from ``alrp_d2.config`` (detectron2), imported on first access."""
    if name == "add_alrp_config":
        from .config import add_alrp_config

        return add_alrp_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
