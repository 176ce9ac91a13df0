"""Every process of a distributed run must have the same config and datasets: machines started with
different configs (e.g. another SOLVER.MAX_ITER or MODEL.ALRP.RANKING) or different dataset files
would call different collectives and wait for each other until the process group's timeout. At
start-up each process exchanges a digest of its run description (every config key and every
``--dataset`` name with the digest of its annotation file; paths may differ between machines);
when they differ, every process stops naming the keys that differ and their values on each rank."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Dict, List, Mapping, Optional, Sequence

import torch.distributed as dist
from detectron2.config import CfgNode
from detectron2.utils import comm

__all__ = ["MachinesDisagreeError", "check_machines_agree", "run_description"]

MAX_SHOWN = 20


class MachinesDisagreeError(RuntimeError):
    """The processes of a distributed run were started with different configs or datasets."""


def _flatten(node: CfgNode, prefix: str, entries: Dict[str, str]) -> None:
    for name, value in node.items():
        key = f"{prefix}{name}"
        if isinstance(value, CfgNode):
            _flatten(value, f"{key}.", entries)
        else:
            entries[key] = repr(value)


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
    """{key: value} of every config key and of each ``--dataset NAME JSON IMAGE_DIR`` (the SHA-256
    of its annotation file)."""
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
