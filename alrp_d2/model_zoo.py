"""The project's configs by their path under ``configs/``, as detectron2's ``model_zoo.get_config_file`` /
``get_config`` give its own: ``get_config("quickstart/alrp_retinanet_shapes.yaml")``. They are looked up in the
installed package (``alrp_d2/configs``, package data) and then in the checkout the package runs from."""

from __future__ import annotations

from pathlib import Path
from typing import List, Union

from detectron2.config import CfgNode, LazyConfig
from omegaconf import DictConfig

from .config import setup_cfg

__all__ = ["config_roots", "get_config", "get_config_file"]


def config_roots() -> List[Path]:
    """Where configs are looked up, in this order: the package's ``configs`` (an installed package), the checkout's."""
    package = Path(__file__).resolve().parent
    return [package / "configs", package.parent / "configs"]


def get_config_file(config_path: str) -> str:
    """The absolute path of ``configs/<config_path>``; a FileNotFoundError naming the places looked in otherwise."""
    for root in config_roots():
        candidate = root / config_path
        if candidate.is_file():
            return str(candidate)
    looked = ", ".join(str(root) for root in config_roots())
    raise FileNotFoundError(f"config {config_path!r} not found in {looked}")


def get_config(config_path: str) -> Union[CfgNode, DictConfig]:
    """A YAML config as :func:`~alrp_d2.config.setup_cfg` builds it (detectron2's defaults, the aLRP keys, the file),
    a ``.py`` config as detectron2's ``LazyConfig.load``."""
    path = get_config_file(config_path)
    if path.endswith(".py"):
        return LazyConfig.load(path)
    return setup_cfg(path)
