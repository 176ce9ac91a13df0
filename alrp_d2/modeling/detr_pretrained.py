"""The checks of a Hugging Face DETR's ``pretrained`` folder before transformers reads it: a folder that does not
exist, holds no config, a config of a model type the detector does not take, no weights, pickled weights
(``pytorch_model.bin``: refused without unpickling), a damaged or truncated ``model.safetensors``, or weights with NaN
or infinite values is refused naming the folder and what is wrong (transformers would take a missing folder for a hub
id, and NaN weights would surface as a matcher's error)."""

from __future__ import annotations

import json
import os
import re
from typing import Iterator, List, Optional, Sequence, Tuple

import torch

from ..checks.errors import ArgumentError

__all__ = ["PICKLE_FILES", "WEIGHT_FILES", "check_pretrained", "looks_like_hub_id"]

#: The weights ``save_pretrained`` writes (safetensors): one file, or shards named by an index.
WEIGHT_FILES = ("model.safetensors",)
#: The pickled weights of older ``save_pretrained`` calls: unpickling can run code, so they are refused unread.
PICKLE_FILES = ("pytorch_model.bin",)
INDEX_SUFFIX = ".index.json"
HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def looks_like_hub_id(pretrained: str) -> bool:
    """Whether ``pretrained`` has the form of a hub id (``name`` or ``namespace/name``) and is no path (such as
    ``./folder``, ``/abs/folder``, ``a/b/c``, or ``output/model`` where ``output`` is a local folder)."""
    namespace = pretrained.split("/")[0]
    local = "/" in pretrained and os.path.isdir(namespace)
    return bool(HUB_ID.match(pretrained)) and not pretrained.startswith(".") and not local


def _weight_files(folder: str, names: Sequence[str] = WEIGHT_FILES) -> List[str]:
    """The weight files ``names`` of a ``save_pretrained`` folder: the single file, or the shards its index names."""
    for name in names:
        if os.path.isfile(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
        index = os.path.join(folder, name + INDEX_SUFFIX)
        if os.path.isfile(index):
            with open(index) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            return [os.path.join(folder, shard) for shard in shards]
    return []


def _tensors(path: str) -> Iterator[Tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        for name in f.keys():
            yield name, f.get_tensor(name)


def _non_finite(path: str) -> List[str]:
    """The names of the floating-point tensors of a safetensors file with a NaN or infinite value."""
    return [name for name, tensor in _tensors(path) if tensor.is_floating_point() and not tensor.isfinite().all()]


def _model_type_problem(folder: str, model_types: Sequence[str]) -> Optional[str]:
    """What is wrong with the folder's ``config.json`` (None: nothing): not a JSON object, or a ``model_type``
    outside ``model_types``."""
    try:
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"its config.json cannot be read as JSON ({error})"
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in model_types:
        return f"its config.json is of model_type {model_type!r}; supported: {', '.join(model_types)}"
    return None


def check_pretrained(pretrained: str, model_types: Sequence[str]) -> None:
    """Raises :class:`ArgumentError` naming ``HuggingFaceDETR(pretrained=...)`` and what is wrong in the folder: no
    folder and not of a hub id's form (:func:`looks_like_hub_id`: left to transformers, which fetches it from the
    hub), no ``config.json`` or one of a model type outside ``model_types``, pickled weights (:data:`PICKLE_FILES`,
    refused unread) or none (:data:`WEIGHT_FILES`, or their shard index), a safetensors file that cannot be read
    (truncated, damaged), or a weight tensor with NaN or infinite values (naming up to 3 of them)."""
    folder = os.path.expanduser(pretrained)
    if not os.path.isdir(folder):
        if looks_like_hub_id(pretrained) and not os.path.exists(folder):
            return
        raise ArgumentError("HuggingFaceDETR", "pretrained", pretrained, _NOT_SAVED.format("no such folder"))
    problem = _folder_problem(folder, model_types)
    if problem:
        raise ArgumentError("HuggingFaceDETR", "pretrained", pretrained, problem)


_NOT_SAVED = "{} (a folder written by save_pretrained, or a hub id)"


def _folder_problem(folder: str, model_types: Sequence[str]) -> Optional[str]:
    """What is wrong in a local ``pretrained`` folder (None: nothing), as :func:`check_pretrained` lists it."""
    from safetensors import SafetensorError  # installed with transformers (the detr extra)

    if not os.path.isfile(os.path.join(folder, "config.json")):
        return _NOT_SAVED.format("the folder holds no config.json")
    problem = _model_type_problem(folder, model_types)
    if problem:
        return problem
    files = _weight_files(folder)
    pickled = _weight_files(folder, PICKLE_FILES)
    if not files and pickled:
        return (
            f"the folder holds {os.path.basename(pickled[0])}, pickled weights, which are not loaded (unpickling can "
            "run code): save the model again with save_pretrained (safetensors) where the file is trusted"
        )
    if not files:
        return _NOT_SAVED.format(f"the folder holds no weights ({' or '.join(WEIGHT_FILES)}, or their shard index)")
    for path in files:
        try:
            bad = _non_finite(path)
        except (SafetensorError, OSError) as error:
            return f"{os.path.basename(path)} cannot be read, truncated or damaged ({error})"
        if bad:
            return (
                f"{os.path.basename(path)} holds NaN or infinite values in {len(bad)} tensor(s), e.g. "
                f"{', '.join(bad[:3])}: the weights are unusable"
            )
    return None
