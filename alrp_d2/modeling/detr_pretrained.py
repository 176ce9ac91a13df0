"""The checks of a Hugging Face DETR's ``pretrained`` folder before transformers reads it: a folder that does not
exist, holds no config or weights, or weights with NaN or infinite values is refused naming the folder and what is
wrong (transformers would take a missing folder for a hub id, and NaN weights would surface as a matcher's error)."""

from __future__ import annotations

import json
import os
import re
from typing import Dict, Iterator, List, Tuple

import torch

__all__ = ["WEIGHT_FILES", "check_pretrained", "looks_like_hub_id"]

#: The weights ``save_pretrained`` writes: one file, or shards named by an index.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_SUFFIX = ".index.json"
HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def looks_like_hub_id(pretrained: str) -> bool:
    """Whether ``pretrained`` has the form of a hub id (``name`` or ``namespace/name``) and is no path (such as
    ``./folder``, ``/abs/folder``, ``a/b/c``, or ``output/model`` where ``output`` is a local folder)."""
    namespace = pretrained.split("/")[0]
    local = "/" in pretrained and os.path.isdir(namespace)
    return bool(HUB_ID.match(pretrained)) and not pretrained.startswith(".") and not local


def _weight_files(folder: str) -> List[str]:
    """The weight files of a ``save_pretrained`` folder: the single file, or the shards its index names."""
    for name in WEIGHT_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
        index = os.path.join(folder, name + INDEX_SUFFIX)
        if os.path.isfile(index):
            with open(index) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            return [os.path.join(folder, shard) for shard in shards]
    return []


def _tensors(path: str) -> Iterator[Tuple[str, torch.Tensor]]:
    if path.endswith(".safetensors"):
        from safetensors import safe_open  # installed with transformers (the detr extra)

        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
    else:
        state: Dict[str, torch.Tensor] = torch.load(path, map_location="cpu", weights_only=True)
        yield from state.items()


def _non_finite(path: str) -> List[str]:
    """The names of the floating-point tensors of a weight file with a NaN or infinite value."""
    return [name for name, tensor in _tensors(path) if tensor.is_floating_point() and not tensor.isfinite().all()]


def check_pretrained(pretrained: str) -> None:
    """Raises an error naming the folder ``pretrained`` and what is wrong: FileNotFoundError when it is no folder and
    not of a hub id's form (:func:`looks_like_hub_id`: left to transformers, which fetches it from the hub), or holds
    no ``config.json`` or no weights (:data:`WEIGHT_FILES`, or their shard index); ValueError when a weight tensor
    holds NaN or infinite values (naming up to 3 of them)."""
    folder = os.path.expanduser(pretrained)
    what = f"HuggingFaceDETR(pretrained={pretrained!r})"
    if not os.path.isdir(folder):
        if looks_like_hub_id(pretrained) and not os.path.exists(folder):
            return
        raise FileNotFoundError(f"{what}: no such folder (a folder written by save_pretrained, or a hub id)")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise FileNotFoundError(f"{what}: the folder holds no config.json (a folder written by save_pretrained)")
    files = _weight_files(folder)
    if not files:
        raise FileNotFoundError(
            f"{what}: the folder holds no weights ({' or '.join(WEIGHT_FILES)}, or their shard index): a folder "
            "written by save_pretrained"
        )
    for path in files:
        bad = _non_finite(path)
        if bad:
            raise ValueError(
                f"{what}: {os.path.basename(path)} holds NaN or infinite values in {len(bad)} tensor(s), e.g. "
                f"{', '.join(bad[:3])}: the weights are unusable"
            )
