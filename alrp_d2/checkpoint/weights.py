"""The weights a checkpoint holds: the errors of weights that cannot be used, the layouts of ``.pkl`` weights, the
check of finite values, the fingerprint of a model's state and the classes a checkpoint records."""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from ..data.dataset_classes import DatasetClasses, check_same_classes, classes_from_record

__all__ = [
    "CLASSES_KEY",
    "IncompatibleWeightsError",
    "NonFiniteWeightsError",
    "UnreadableCheckpointError",
    "check_weights_classes",
    "listed",
    "non_finite_names",
    "weights_fingerprint",
    "weights_from_pickle",
]

logger = logging.getLogger(__name__)

CLASSES_KEY = "classes"


class IncompatibleWeightsError(ValueError):
    """The weights do not belong to the model built from the config: parameters with other shapes,
    parameters the weights lack or parameters the model lacks."""


class NonFiniteWeightsError(ValueError):
    """Weights with NaN or infinite values (e.g. saved by a diverged training run); the message
    names the file and the parameters."""


class UnreadableCheckpointError(OSError):
    """A checkpoint file is missing, truncated or corrupt; the message names it and the reason."""


def listed(names: List[str], limit: int = 40) -> str:
    shown = [f"  {name}" for name in sorted(names)[:limit]]
    if len(names) > limit:
        shown.append(f"  ... and {len(names) - limit} more")
    return "\n".join(shown)


def non_finite_names(weights: Dict[str, Any]) -> List[str]:
    """The names of the floating-point tensors or arrays of ``weights`` with a NaN or an infinity."""
    names = []
    for name, value in weights.items():
        if isinstance(value, np.ndarray):
            finite = value.dtype.kind != "f" or bool(np.isfinite(value).all())
        elif isinstance(value, torch.Tensor):
            finite = not value.is_floating_point() or bool(value.isfinite().all())
        else:
            finite = True
        if not finite:
            names.append(name)
    return names


def weights_fingerprint(model: torch.nn.Module) -> str:
    """The SHA-256 of the model's state (names, dtypes, shapes and values of every parameter and
    buffer; a DistributedDataParallel wrapper is looked through): the model that LRP thresholds
    were computed for."""
    module = model.module if isinstance(model, DistributedDataParallel) else model
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        values = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{values.dtype}|{tuple(values.shape)}|".encode())
        digest.update(values.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_weights_classes(checkpoint: Dict[str, Any], path: str, datasets: Sequence[Optional[DatasetClasses]]) -> None:
    """Raises :class:`~alrp_d2.data.dataset_classes.ClassesMismatchError`, showing both lists, when
    the classes ``checkpoint`` (the remainder of ``AlrpCheckpointer.load(path)``) records are not
    those of each of ``datasets`` (None: a dataset without declared classes, not checked); warns once
    when it records none."""
    given = [classes for classes in datasets if classes is not None]
    if not given:
        return
    record = checkpoint.get(CLASSES_KEY)
    if record is None:
        logger.warning(
            f"{path} does not record the classes it was trained on (a checkpoint of an earlier version or of "
            f"another tool): the classes of {', '.join(repr(c.dataset) for c in given)} cannot be checked against "
            "the weights"
        )
        return
    recorded = classes_from_record(record, path)
    for classes in given:
        check_same_classes(recorded, path, classes)


def weights_from_pickle(data: Any, path: str) -> Dict[str, Any]:
    """The checkpoint dict of a ``.pkl`` file in one of the layouts of detectron2's published
    weights: detectron2's own ({"model", "__author__", ...}, e.g. the model zoo and the converted
    torchvision ImageNet weights), or Caffe2's (arrays at the top level or under "blobs", loaded by
    name-matching heuristics, without the optimizer's "_momentum" arrays)."""
    if not isinstance(data, dict):
        raise UnreadableCheckpointError(f"{path} holds a {type(data).__name__}, not a dict of weights")
    if "model" in data and "__author__" in data:
        _check_numeric_arrays(data["model"], path)
        return data
    arrays = data.get("blobs", data)
    weights = {name: value for name, value in arrays.items() if not name.endswith("_momentum")}
    _check_numeric_arrays(weights, path)
    return {"model": weights, "__author__": "Caffe2", "matching_heuristics": True}


NUMERIC_KINDS = "biuf"  # numpy dtype kinds of weights: bool, signed and unsigned integers, floats


def _check_numeric_arrays(weights: Any, path: str) -> None:
    """Raises :class:`UnreadableCheckpointError` naming the entries of ``weights`` (a ``.pkl`` file's
    dict of arrays) that are arrays of objects, strings or records: torch cannot make tensors of them."""
    if not isinstance(weights, dict):
        raise UnreadableCheckpointError(f"{path}: its weights are a {type(weights).__name__}, not a dict of arrays")
    other = [
        f"{name} ({value.dtype})"
        for name, value in weights.items()
        if isinstance(value, np.ndarray) and value.dtype.kind not in NUMERIC_KINDS
    ]
    if other:
        raise UnreadableCheckpointError(
            f"{path} has {len(other)} array(s) of objects, strings or records, which are not weights (numbers):\n"
            f"{listed(other)}"
        )
