"""alrp_d2.lrp.LRP: bad inputs refused naming the image and the key, nothing kept from a refused update, reset, no
image at all, the same results on 2 gloo processes as on one, and the package with detectron2 blocked."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from alrp_d2.lrp import LRP, LRP_METRICS

from .distributed_cases import spawn_workers
from .lrp_official_cases import case_files, metric_inputs, official

REPOSITORY = Path(__file__).resolve().parents[1]


def image(**entries):
    base = {"boxes": torch.tensor([[0.0, 0.0, 10.0, 10.0]]), "scores": torch.tensor([0.9]), "labels": torch.tensor([1])}
    return {**base, **entries}


def truth(**entries):
    base = {"boxes": torch.tensor([[0.0, 0.0, 10.0, 8.0]]), "labels": torch.tensor([1])}
    return {**base, **entries}


@pytest.mark.parametrize(
    "preds, target, message",
    [
        ([image()], [truth(), truth()], "same number of images"),
        (
            [image(), {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0)}],
            [truth(), truth()],
            r"preds\[1\] has no 'scores'",
        ),
        ([image(boxes=torch.zeros(1, 5))], [truth()], r"preds\[0\]\['boxes'\] must have shape \(1, 4\)"),
        ([image(scores=torch.tensor([0.9, 0.8]))], [truth()], r"preds\[0\]\['scores'\] must have shape"),
        ([image(scores=torch.tensor([math.nan]))], [truth()], "NaN or infinite scores"),
        ([image(boxes=torch.tensor([[5.0, 0.0, 1.0, 10.0]]))], [truth()], "x2 >= x1"),
        ([image()], [truth(boxes=torch.tensor([[0.0, math.inf, 1.0, 1.0]]))], r"target\[0\]\['boxes'\] holds NaN"),
        ([image(labels=torch.tensor([0.5]))], [truth()], "integer class labels"),
        ([image()], [truth(iscrowd=torch.tensor([2]))], r"target\[0\]\['iscrowd'\] must hold 0 or 1"),
        ([image()], [[1, 2]], r"target\[0\] must be a dict"),
    ],
)
def test_bad_inputs_name_the_image_and_the_key(preds, target, message):
    metric = LRP()
    metric.update([image()], [truth()])
    with pytest.raises((ValueError, TypeError), match=message):
        metric.update(preds, target)
    assert len(metric._images) == 1  # the refused update kept nothing


def test_masks_of_different_sizes_are_refused():
    metric = LRP(iou_type="segm")
    preds = [
        {"masks": torch.ones(1, 4, 4, dtype=torch.bool), "scores": torch.tensor([0.5]), "labels": torch.tensor([0])}
    ]
    target = [{"masks": torch.ones(1, 4, 5, dtype=torch.bool), "labels": torch.tensor([0])}]
    with pytest.raises(ValueError, match=r"preds\[0\] and target\[0\] hold masks of different sizes"):
        metric.update(preds, target)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="iou_type"):
        LRP(iou_type="boxes")
    with pytest.raises(ValueError, match="max_detections"):
        LRP(max_detections=0)


def test_reset_and_no_image():
    metric = LRP()
    metric.update([image()], [truth()])
    assert float(metric.compute()["oLRP"]) == pytest.approx(100 * (0.2 / 0.5) / 1)
    metric.reset()
    results = metric.compute()
    assert all(math.isnan(float(results[key])) for key in LRP_METRICS)
    assert results["classes"].tolist() == [] and results["thresholds"].tolist() == []


def test_one_ground_truth_per_class_hand_computed():
    """Class 1: TP IoU 0.8 at 0.9 -> LRP 0.4 at threshold 0.9; class 2: only an FP -> oLRP 1, FN 1; class 3 has no
    ground truth (NaN, left out of the means)."""
    metric = LRP()
    preds = [
        image(
            boxes=torch.tensor([[0.0, 0.0, 10.0, 10.0], [50, 50, 60, 60], [0, 0, 5, 5]]),
            scores=torch.tensor([0.9, 0.6, 0.3]),
            labels=torch.tensor([1, 2, 3]),
        )
    ]
    target = [truth(boxes=torch.tensor([[0.0, 0.0, 10.0, 8.0], [20, 20, 30, 30]]), labels=torch.tensor([1, 2]))]
    metric.update(preds, target)
    results = metric.compute()
    assert results["classes"].tolist() == [1, 2, 3]
    assert results["oLRP_per_class"][:2].tolist() == pytest.approx([40.0, 100.0])
    assert results["oLRP_FN_per_class"][:2].tolist() == pytest.approx([0.0, 100.0])
    assert results["thresholds"][0].item() == pytest.approx(0.9) and math.isnan(results["thresholds"][1].item())
    assert math.isnan(results["oLRP_per_class"][2].item())
    assert float(results["oLRP"]) == pytest.approx(70.0) and float(results["oLRP_FN"]) == pytest.approx(50.0)


def _distributed_worker(rank: int, world_size: int, case: str, expected: dict) -> None:
    preds, target = metric_inputs(case)
    metric = LRP(iou_type=official(case)["iou_type"])
    metric.update(preds[rank::world_size], target[rank::world_size])  # uneven shares of the images
    results = metric.compute()
    for key in LRP_METRICS:
        assert torch.allclose(results[key], expected[key], equal_nan=True, atol=1e-9), (rank, key)


def test_two_processes_give_the_results_of_one():
    preds, target = metric_inputs("boxes")
    metric = LRP()
    metric.update(preds, target)
    spawn_workers(2, _distributed_worker, "boxes", metric.compute())


BLOCKED = r"""
import importlib.abc, json, runpy, sys

class NoDetectron2(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "detectron2" or name.startswith("detectron2."):
            raise ImportError(f"{name} imported by a module that must not need detectron2")

sys.meta_path.insert(0, NoDetectron2())
import torch
from alrp_d2.lrp import LRP
metric = LRP()
metric.update([{"boxes": torch.tensor([[0.0, 0, 10, 10]]), "scores": torch.tensor([0.9]), "labels": torch.tensor([1])}],
              [{"boxes": torch.tensor([[0.0, 0, 10, 8]]), "labels": torch.tensor([1])}])
assert abs(float(metric.compute()["oLRP"]) - 40.0) < 1e-9
sys.argv = ["alrp_d2.lrp", sys.argv[1], sys.argv[2], "--json"]
try:
    runpy.run_module("alrp_d2.lrp", run_name="__main__")
except SystemExit as exit:
    assert exit.code == 0, exit.code
assert "detectron2" not in sys.modules
"""


def test_package_and_command_without_detectron2():
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED, *map(str, case_files("boxes"))],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed["oLRP"] == pytest.approx(official("boxes")["oLRP"], abs=1e-6)
