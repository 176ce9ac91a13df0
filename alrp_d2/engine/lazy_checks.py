"""The start-up checks of the YAML path (train_net.py, :class:`~alrp_d2.engine.AlrpTrainer`) for a LazyConfig run:
every process has the same config and ``--dataset`` files (:func:`lazy_run_description`, compared by
:func:`~alrp_d2.engine.machine_agreement.check_machines_agree`), and a mask model's datasets have a usable
segmentation for every annotation (:func:`check_lazy_segmentations`), and the model takes the channel order its
mappers give (:func:`check_image_formats`: YAML's one INPUT.FORMAT cannot differ)."""

from __future__ import annotations

import argparse
import inspect
import re
from datetime import timedelta
from typing import Any, Dict, Sequence

from detectron2.config import CfgNode
from detectron2.config.instantiate import _convert_target_to_string
from omegaconf import DictConfig, OmegaConf

from ..checks.errors import ConfigError
from ..data.dataset_segmentations import check_segmentations
from .machine_agreement import check_machines_agree, run_description

__all__ = [
    "check_image_formats",
    "check_lazy_machines_agree",
    "check_lazy_segmentations",
    "has_mask_head",
    "lazy_run_description",
]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _value(value: Any) -> str:
    """A config value as every machine writes it: a class or function by its dotted name, an object's repr without
    its memory address."""
    if inspect.isclass(value) or inspect.isroutine(value):
        return _convert_target_to_string(value)
    return _ADDRESS.sub("", repr(value))


def _flatten(node: Any, prefix: str, entries: Dict[str, str]) -> None:
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        entries[prefix] = _value(node)
        return
    if not items:
        entries[prefix] = repr(node)
    for name, value in items:
        _flatten(value, f"{prefix}.{name}" if prefix else str(name), entries)


def lazy_run_description(cfg: DictConfig, dataset_specs: Sequence[Sequence[str]] = ()) -> Dict[str, str]:
    """{key: value} of every key of a LazyConfig (interpolations as written, ``${..x}``) and of each ``--dataset
    NAME JSON IMAGE_DIR`` (the SHA-256 of its annotation file), as
    :func:`~alrp_d2.engine.machine_agreement.run_description` describes a YAML run."""
    entries: Dict[str, str] = {}
    _flatten(OmegaConf.to_container(cfg, resolve=False), "", entries)
    entries.update(run_description(CfgNode(), dataset_specs))
    return entries


def check_lazy_machines_agree(cfg: DictConfig, args: argparse.Namespace) -> None:
    """:func:`~alrp_d2.engine.machine_agreement.check_machines_agree` of the :func:`lazy_run_description` of the
    config and of ``args.dataset``, within ``args.dist_timeout`` seconds (train_net.py's --dist-timeout)."""
    timeout = getattr(args, "dist_timeout", None)
    description = lazy_run_description(cfg, getattr(args, "dataset", None) or [])
    check_machines_agree(description, None if timeout is None else timedelta(seconds=timeout))


def has_mask_head(cfg: DictConfig) -> bool:
    """Whether the LazyConfig model has a mask head (``model.roi_heads.mask_head``), as MODEL.MASK_ON."""
    return OmegaConf.select(cfg, "model.roi_heads.mask_head", default=None) is not None


def check_lazy_segmentations(cfg: DictConfig, dataset_names: Sequence[str]) -> None:
    """For a model with a mask head, every annotation of the registered datasets ``dataset_names`` needs a usable
    segmentation (:func:`~alrp_d2.data.dataset_segmentations.check_segmentations`, naming the dataset, the image
    and the annotation), as the YAML path checks them with MODEL.MASK_ON."""
    if has_mask_head(cfg):
        check_segmentations(dataset_names)


def check_image_formats(cfg: DictConfig, path: str) -> None:
    """Raises :class:`ConfigError` naming both keys when ``model.input_format`` (the channel order the model takes)
    differs from the ``image_format`` of ``dataloader.train.mapper`` or ``dataloader.test.mapper`` (the order the
    mapper gives): the model would read every image's channels reversed."""
    model_format = cfg.model.get("input_format") if isinstance(cfg.model, DictConfig) else None
    for split in ("train", "test"):
        mapper = OmegaConf.select(cfg, f"dataloader.{split}.mapper")
        mapper_format = mapper.get("image_format") if isinstance(mapper, DictConfig) else None
        if model_format is not None and mapper_format is not None and mapper_format != model_format:
            raise ConfigError(
                f"{path}: model.input_format={model_format!r} but dataloader.{split}.mapper.image_format="
                f"{mapper_format!r}: the model would read the images' channels in the other order; set both to the "
                "same value"
            )
