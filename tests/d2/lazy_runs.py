"""Runs of train_net.py for the LazyConfig tests: one intra-op thread (bit-for-bit results), and their metrics."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch

from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMING_KEYS = ("time", "data_time", "eta_seconds", "rank_data_time")


def environment() -> Dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))


def run_train_net(arguments: List[str]) -> str:
    """``python train_net.py ARGUMENTS`` in the repository root; the run must succeed. Returns its output."""
    command = [sys.executable, str(REPO_ROOT / "train_net.py"), *arguments]
    result = subprocess.run(command, env=environment(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def logged(output_dir: Path) -> Dict[int, Dict[str, float]]:
    """The last metrics.json record of every iteration, without the timing keys."""
    records: Dict[int, Dict[str, float]] = {}
    for line in (output_dir / "metrics.json").read_text().splitlines():
        record = json.loads(line)
        records[record.pop("iteration")] = {k: v for k, v in record.items() if k not in TIMING_KEYS}
    return records


def shapes_dataset_arguments(root: str, prefix: str, num_val: int) -> List[str]:
    """``--dataset`` arguments of a small shapes set generated in ``root`` (8 training images, ``num_val``
    validation ones), registered as ``<prefix>_train`` and ``<prefix>_val``."""
    prepare_shapes_dataset(root, num_images={"train": 8, "val": num_val})
    return [
        *("--dataset", f"{prefix}_train", *shapes_paths(root, "train")),
        *("--dataset", f"{prefix}_val", *shapes_paths(root, "val")),
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_machines(arguments: List[List[str]], timeout_s: float = 300) -> List[Tuple[int, str]]:
    """train_net.py as ``len(arguments)`` machines on the loopback, machine ``i`` with ``arguments[i]``; returns the
    exit status and the output of each (a machine still running after ``timeout_s`` seconds is killed)."""
    url = f"tcp://127.0.0.1:{free_port()}"
    processes = [
        subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "train_net.py"), "--num-machines", str(len(arguments))]
            + ["--machine-rank", str(rank), "--dist-url", url, *machine_arguments],
            env=environment(),
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank, machine_arguments in enumerate(arguments)
    ]
    results = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            output, _ = process.communicate()
        results.append((process.returncode, output))
    return results


def train_then_resume(
    arguments: List[str], overrides: Callable[[Path], List[str]], tmp_path: Path, checkpoint_period: int
) -> Tuple[Path, Path]:
    """The output folders of an uninterrupted ``train_net.py`` run and of one resumed from its first checkpoint
    (``overrides(output_dir)`` after ``arguments``)."""
    uninterrupted, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    run_train_net([*arguments, *overrides(uninterrupted)])
    resumed.mkdir()
    checkpoint = f"model_{checkpoint_period - 1:07d}.pth"
    shutil.copy(uninterrupted / checkpoint, resumed / checkpoint)
    (resumed / "last_checkpoint").write_text(checkpoint)
    run_train_net([*arguments, "--resume", *overrides(resumed)])
    return uninterrupted, resumed


def final_weights(output_dir: Path) -> Dict[str, torch.Tensor]:
    return torch.load(output_dir / "model_final.pth", map_location="cpu", weights_only=True)["model"]
