"""The LazyConfig quickstart through train_net.py: it trains, evaluates with LRP (metrics and threshold file), a run
resumed from a checkpoint logs the iterations and ends with the weights of the uninterrupted run, bit for bit (one
intra-op thread), and --eval-only evaluates the last checkpoint (with --resume) or refuses to run without weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import torch

from alrp_d2.evaluation.lrp_threshold_predictor import read_lrp_threshold_file

from .lazy_runs import (
    REPO_ROOT,
    environment,
    final_weights,
    logged,
    run_train_net,
    shapes_dataset_arguments,
    train_then_resume,
)

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.py")
MAX_ITER, CHECKPOINT_PERIOD = 6, 3


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> List[str]:
    return shapes_dataset_arguments(str(tmp_path_factory.mktemp("datasets")), "lazy", num_val=2)


def overrides(output_dir: Path) -> List[str]:
    """The quickstart at tiny scale: 6 iterations of 2 images, a checkpoint every 3, self-balance every 2."""
    return [
        f"train.output_dir={output_dir}",
        f"train.max_iter={MAX_ITER}",
        f"train.checkpointer.period={CHECKPOINT_PERIOD}",
        "train.log_period=1",
        "train.self_balance_period=2",
        "train.seed=5",
        "dataloader.train.total_batch_size=2",
        "dataloader.train.dataset.names=lazy_train",
        "dataloader.test.dataset.names=lazy_val",
    ]


def test_lazyconfig_quickstart_trains_evaluates_with_lrp_and_resumes_exactly(datasets, tmp_path):
    arguments = ["--config-file", QUICKSTART, *datasets]
    uninterrupted, resumed = train_then_resume(arguments, overrides, tmp_path, CHECKPOINT_PERIOD)

    expected, got = logged(uninterrupted), logged(resumed)
    assert sorted(expected) == list(range(MAX_ITER + 1))  # the evaluation is logged as iteration MAX_ITER
    assert sorted(got) == list(range(CHECKPOINT_PERIOD, MAX_ITER + 1))
    assert len({expected[i]["sb/retinanet/weight"] for i in range(MAX_ITER)}) > 2  # self-balanced
    for iteration in got:
        assert got[iteration] == expected[iteration], f"iteration {iteration}"
    assert {"bbox/AP", "bbox/oLRP", "bbox/oLRP_loc"} <= set(expected[MAX_ITER])
    thresholds = read_lrp_threshold_file(str(uninterrupted / "inference" / "lrp_optimal_thresholds.json"))
    names = sorted(entry["name"] for entry in thresholds.entries.values())
    assert names == ["circle", "cross", "ring", "square", "triangle"] and thresholds.task == "bbox"
    assert thresholds.model is not None and thresholds.model["architecture"] == "AlrpRetinaNet"
    weights, resumed_weights = final_weights(uninterrupted), final_weights(resumed)
    assert weights.keys() == resumed_weights.keys()
    for name, value in weights.items():
        assert torch.equal(value, resumed_weights[name]), name

    log = run_train_net(["--config-file", QUICKSTART, *datasets, "--eval-only", "--resume", *overrides(resumed)])
    olrp = f"{expected[MAX_ITER]['bbox/oLRP']:.4f}"
    assert "copypaste: AP,AP50" in log and olrp in log  # the uninterrupted run's final evaluation


def test_lazyconfig_eval_only_without_weights_is_an_error(datasets, tmp_path):
    command = [sys.executable, str(REPO_ROOT / "train_net.py"), "--config-file", QUICKSTART, *datasets, "--eval-only"]
    result = subprocess.run(
        command + overrides(tmp_path), env=environment(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode != 0
    assert "--eval-only needs trained weights but train.init_checkpoint is empty" in result.stderr
