"""The losses and the ranking criteria import and run without detectron2: a fresh interpreter in which importing
detectron2 fails imports ``alrp_d2``, ``alrp_d2.losses`` and ``alrp_d2.criteria``, builds the registered criteria by
name and trains a tiny ranking with each."""

import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import importlib.abc
import sys


class NoDetectron2(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "detectron2" or name.startswith("detectron2."):
            raise ImportError(f"{name} imported by a module that must not need detectron2")
        return None


sys.meta_path.insert(0, NoDetectron2())

import torch

import alrp_d2
import alrp_d2.losses
from alrp_d2.criteria import RANKING_CRITERION_REGISTRY, CriterionSet, PositiveTargets, RowLabels

assert "detectron2" not in sys.modules, sorted(name for name in sys.modules if name.startswith("detectron2"))


class Boxes:
    # Three rows' predicted boxes (differentiable) and their matched boxes, one pyramid level.
    def __init__(self):
        self.pred = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 9.0, 12.0], [5.0, 5.0, 9.0, 9.0]])
        self.pred.requires_grad_(True)
        self.target = torch.tensor([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 10.0], [4.0, 4.0, 9.0, 9.0]])

    def decoded_boxes(self, positives):
        return self.pred[positives.row], self.target[positives.row]

    def encoded_box_loss(self, positives):
        return (self.pred[positives.row] - self.target[positives.row]).abs().mean(dim=1)

    def row_overlaps(self):
        from alrp_d2.losses.localisation_error import paired_iou_giou

        return paired_iou_giou(self.pred.detach(), self.target)[0]

    num_levels = 1

    def levels(self, positives):
        return torch.zeros_like(positives.row)


built = {
    "AlrpCriterion": dict(delta=1.0, loc_error_kind="giou", tau=0.5),
    "APCriterion": dict(delta=1.0, loc_loss="smooth_l1", loc_error_kind="giou", tau=0.5),
    "InterpolatedAPCriterion": dict(delta=1.0, loc_loss="giou", loc_error_kind="giou", tau=0.5, eps=None),
    "RankSortCriterion": dict(delta=0.5, loc_error_kind="giou"),
}
assert set(built) <= {name for name, _ in RANKING_CRITERION_REGISTRY}
rows = RowLabels(torch.tensor([0, 2, 1]), num_classes=2)  # rows 0 and 2 positive (classes 0, 1), row 1 background
for name, arguments in built.items():
    criterion = RANKING_CRITERION_REGISTRY.get(name)(**arguments)
    source = Boxes()
    logits = torch.tensor([[2.0, -1.0], [0.5, 1.5], [-0.5, 0.3]], requires_grad=True)
    targets = criterion.targets(rows, source)
    (output,) = criterion([CriterionSet(logits, targets, criterion.localisation_losses(targets.box, source))], None)
    (output.loss_cls + output.loss_loc).backward()
    assert torch.isfinite(output.loss_cls) and output.loss_cls > 0, (name, output)
    assert logits.grad is not None and logits.grad.abs().sum() > 0, name
    assert isinstance(targets.box, PositiveTargets) and targets.box.row.tolist() == [0, 2], (name, targets)
assert "detectron2" not in sys.modules
print("ok")
"""


def test_losses_and_criteria_import_and_run_without_detectron2():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPOSITORY, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
