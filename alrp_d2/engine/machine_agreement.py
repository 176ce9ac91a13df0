"""Every process of a distributed run must have the same config and datasets: machines started with
different configs (e.g. another SOLVER.MAX_ITER or MODEL.ALRP.RANKING) or different dataset files
would call different collectives and wait for each other until the process group's timeout. At
start-up each process exchanges a digest of its run description (every config key and every
``--dataset`` name with the digest of its annotation file; paths may differ between machines);
when they differ, every process stops naming the keys that differ and their values on each rank.

A value is described by its ``repr`` when that is short, otherwise by the SHA-256 of its content
(:func:`value_text`): a list that YAML anchors and aliases share between many places (a few hundred
bytes can nest 2**40 references to one list) is hashed once, never expanded."""

from __future__ import annotations

import hashlib
import itertools
import json
from datetime import timedelta
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import torch.distributed as dist
from detectron2.config import CfgNode
from detectron2.utils import comm

__all__ = ["MachinesDisagreeError", "check_machines_agree", "content_digest", "run_description", "value_text"]

MAX_SHOWN = 20
#: The longest ``repr`` of a config value shown as it is; a longer value is shown by the SHA-256 of its content.
MAX_VALUE_TEXT = 200
CONTAINERS = (list, tuple, dict)


class MachinesDisagreeError(RuntimeError):
    """The processes of a distributed run were started with different configs or datasets."""


class _TooLong(Exception):
    """The text of a value exceeds its budget."""


def _bounded_repr(value: Any, budget: int) -> str:
    """``repr(value)`` of a value of lists, tuples, dicts and scalars, built part by part; raises
    :class:`_TooLong` as soon as it exceeds ``budget`` characters (so a list shared by aliases, or a
    cyclic one, costs at most ``budget`` steps)."""
    if not isinstance(value, CONTAINERS):
        text = repr(value)
        if len(text) > budget:
            raise _TooLong
        return text
    if isinstance(value, dict):
        opening, closing = "{", "}"
        items: Iterable[Any] = value.items()
    else:
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ",)" if len(value) == 1 else ")")
        items = value
    parts: List[str] = []
    used = len(opening) + len(closing)
    for item in itertools.islice(items, budget + 1):
        if isinstance(value, dict):
            key_text = _bounded_repr(item[0], budget - used)
            text = f"{key_text}: {_bounded_repr(item[1], budget - used - len(key_text) - 2)}"
        else:
            text = _bounded_repr(item, budget - used)
        used += len(text) + 2 * bool(parts)
        if used > budget:
            raise _TooLong
        parts.append(text)
    return opening + ", ".join(parts) + closing


def _children(item: Any) -> List[Any]:
    return [part for pair in item.items() for part in pair] if isinstance(item, dict) else list(item)


def content_digest(value: Any) -> str:
    """The SHA-256 of ``value`` (lists, tuples, dicts and scalars, the scalars by their ``repr``), equal for equal
    values whether or not their parts are shared. Each distinct list, tuple or dict is hashed once (its digest is
    remembered by identity), without recursion: a structure of 2**40 references to shared lists costs as much as
    its distinct lists; a list that contains itself is hashed with a marker in that place."""
    digests: Dict[int, bytes] = {}
    expanded = set()  # identities of the containers whose children are being hashed (the current path)
    stack = [value]
    while stack:
        item = stack[-1]
        if not isinstance(item, CONTAINERS) or id(item) in digests:
            stack.pop()
            continue
        pending = [
            child
            for child in _children(item)
            if isinstance(child, CONTAINERS) and id(child) not in digests and id(child) not in expanded
        ]
        if pending and id(item) not in expanded:
            expanded.add(id(item))
            stack.extend(pending)
            continue
        digest = hashlib.sha256(type(item).__name__.encode())
        for child in _children(item):
            if not isinstance(child, CONTAINERS):
                digest.update(b"|" + repr(child).encode())
            else:
                digest.update(b"|" + digests.get(id(child), b"<cycle>"))
        digests[id(item)] = digest.digest()
        expanded.discard(id(item))
        stack.pop()
    if not isinstance(value, CONTAINERS):
        return hashlib.sha256(repr(value).encode()).hexdigest()
    return digests[id(value)].hex()


def value_text(value: Any) -> str:
    """How the run description shows a config value: its ``repr`` when at most :data:`MAX_VALUE_TEXT`
    characters, else its type and :func:`content_digest`, computed in time bounded by the value's distinct
    parts (never by the references YAML aliases multiply)."""
    try:
        return _bounded_repr(value, MAX_VALUE_TEXT)
    except _TooLong:
        return f"<{type(value).__name__}, sha256 {content_digest(value)}>"


def _flatten(node: CfgNode, prefix: str, entries: Dict[str, str]) -> None:
    for name, value in node.items():
        key = f"{prefix}{name}"
        if isinstance(value, CfgNode):
            _flatten(value, f"{key}.", entries)
        else:
            entries[key] = value_text(value)


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as error:
        return f"unreadable ({error.strerror})"
    return f"sha256 {digest.hexdigest()}"


def run_description(cfg: CfgNode, dataset_specs: Sequence[Sequence[str]] = ()) -> Dict[str, str]:
    """{key: value} of every config key (:func:`value_text`) and of each ``--dataset NAME JSON IMAGE_DIR``
    (the SHA-256 of its annotation file)."""
    entries: Dict[str, str] = {}
    _flatten(cfg, "", entries)
    for name, json_file, _ in dataset_specs:
        entries[f"--dataset {name}"] = f"annotations {_file_digest(json_file)}"
    return entries


def _digest(description: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(description.items())).encode()).hexdigest()


def _differences(descriptions: List[Dict[str, str]]) -> List[str]:
    """One line per key whose value is not the same on every rank: each value and its ranks."""
    lines = []
    for key in sorted(set().union(*descriptions)):
        ranks: Dict[str, List[int]] = {}
        for rank, description in enumerate(descriptions):
            ranks.setdefault(description.get(key, "(absent)"), []).append(rank)
        if len(ranks) > 1:
            lines.append(f"{key}: " + "; ".join(f"{value} on ranks {on}" for value, on in ranks.items()))
    return lines


def check_machines_agree(description: Mapping[str, str], timeout: Optional[timedelta] = None) -> None:
    """Raises :class:`MachinesDisagreeError` on every process of the run, naming the keys that
    differ, when the :func:`run_description` of some process differs; nothing in a single-process
    run. The exchange runs on a gloo group with ``timeout`` (the run's, --dist-timeout), so that a
    process that never gets here ends it after that time."""
    if comm.get_world_size() == 1:
        return
    group = dist.new_group(backend="gloo", timeout=timeout) if timeout is not None else dist.new_group(backend="gloo")
    if not isinstance(group, dist.ProcessGroup):
        raise RuntimeError("this process is not a member of the run's process group")
    digests: List[Optional[str]] = [None] * comm.get_world_size()
    dist.all_gather_object(digests, _digest(description), group=group)
    if len(set(digests)) == 1:
        return
    descriptions: List[Dict[str, str]] = [{}] * comm.get_world_size()
    dist.all_gather_object(descriptions, dict(description), group=group)
    lines = _differences(descriptions)
    shown = "\n".join(f"  {line}" for line in lines[:MAX_SHOWN])
    more = f"\n  ... and {len(lines) - MAX_SHOWN} more" if len(lines) > MAX_SHOWN else ""
    raise MachinesDisagreeError(
        f"the processes of this distributed run were started with different configs or datasets; "
        f"{len(lines)} key(s) differ:\n{shown}{more}\nStart every machine with the same config file, options and "
        "--dataset files."
    )
