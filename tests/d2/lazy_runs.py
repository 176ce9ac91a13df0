"""Runs of train_net.py for the LazyConfig tests: one intra-op thread (bit-for-bit results), and their metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

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
