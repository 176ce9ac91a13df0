"""The set-prediction ranking loss of one decoder layer (alrp_d2.detr.SetRankingLoss) against a transcription of
BRS-DETR's per-layer loss with the official unbucketed Rank & Sort Loss (tests/brs_detr_reference.py): values and
gradients in float64 to 1e-6; its other choices; its input errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
import torch
from torchvision.ops import generalized_box_iou

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.criteria.output_check import CriterionOutputError
from alrp_d2.detr import MatchedSet, SetRankingLoss, set_prediction_criterion
from alrp_d2.detr.matched_queries import floored_iou_giou
from alrp_d2.losses import NonFiniteInputError

from .brs_detr_reference import brs_detr_layer_loss
from .detr_cases import Layer, make_layer, rank_sort_loss

CASES = {
    "no_denoising": dict(seed=1, num_targets=[3, 2, 4]),
    "far_box_iou_0": dict(seed=3, num_targets=[3, 2]),
    "image_without_objects": dict(seed=2, num_targets=[0, 3, 2]),
    "one_positive": dict(seed=4, num_targets=[1, 0]),
    "tied_logits": dict(seed=5, num_targets=[3, 4], tied=True),
    "denoising_groups": dict(seed=7, num_targets=[2, 3, 0], dn_groups=3),
    "tied_denoising_groups": dict(seed=6, num_targets=[1, 2], dn_groups=2, tied=True),
    "one_pixel_boxes": dict(seed=10, num_targets=[3, 2, 1], one_pixel=True),
}


def ours(layer: Layer, loss: SetRankingLoss):
    logits = layer.logits.clone().requires_grad_(True)
    pred_boxes = layer.pred_boxes.clone().requires_grad_(True)
    (losses,) = loss([MatchedSet(logits, pred_boxes, layer.indices)], layer.targets)
    logits_grad, boxes_grad = torch.autograd.grad(sum(losses.values()), [logits, pred_boxes])
    return losses, logits_grad, boxes_grad


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_layer_loss_equals_brs_detr_transcription(case):
    layer = make_layer(**CASES[case])
    losses, logits_grad, boxes_grad = ours(
        layer, SetRankingLoss(set_prediction_criterion("RankSortCriterion", delta=0.5), rank_weight=2.0)
    )
    expected, expected_logits_grad, expected_boxes_grad = brs_detr_layer_loss(
        layer.logits, layer.pred_boxes, layer.indices, layer.targets, layer.image_sizes, rank_weight=2.0, delta=0.5
    )
    assert sorted(losses) == ["loss_bbox", "loss_giou", "loss_rank"]
    assert_close(losses["loss_rank"], expected["rank"] + expected["sort"])
    assert_close(losses["loss_bbox"], expected["bbox"])
    assert_close(losses["loss_giou"], expected["iou"])
    assert_close(logits_grad, expected_logits_grad)
    assert_close(boxes_grad, expected_boxes_grad)
    assert float(expected["rank"]) > 0 and bool(expected_logits_grad.abs().sum() > 0)


def test_boxes_on_their_targets_leave_the_box_terms_at_zero():
    """Every matched box exactly on its target: IoU 1 (the ranking as the reference's) and box terms of value 0, left
    at 0 with no gradient (BRS-DETR leaves a zero term as it is). The reference's box terms are not compared: its
    targets go through pixels and back, which leaves an L1 of ~1e-17 that its balance rescales by ~1e17."""
    layer = make_layer(seed=8, num_targets=[3, 2], on_target=True)
    losses, logits_grad, boxes_grad = ours(
        layer, SetRankingLoss(set_prediction_criterion("RankSortCriterion", delta=0.5), rank_weight=2.0)
    )
    expected, expected_logits_grad, _ = brs_detr_layer_loss(
        layer.logits, layer.pred_boxes, layer.indices, layer.targets, layer.image_sizes, rank_weight=2.0, delta=0.5
    )
    assert_close(losses["loss_rank"], expected["rank"] + expected["sort"])
    assert_close(logits_grad, expected_logits_grad)
    assert (
        float(losses["loss_bbox"].detach()) == 0
        and float(losses["loss_giou"].detach()) == 0
        and float(boxes_grad.abs().max()) == 0
    )
    assert float(losses["loss_rank"].detach()) > 0


def test_the_iou_of_identical_boxes_is_one():
    boxes = torch.tensor([[0.1, 0.2, 0.4, 0.7], [0.3, 0.3, 0.3001, 0.3002]], dtype=torch.float32)
    iou, giou = floored_iou_giou(boxes, boxes.clone())
    assert iou.tolist() == [1.0, 1.0] and giou.tolist() == [1.0, 1.0]


def test_cases_cover_what_they_claim():
    far = make_layer(**CASES["far_box_iou_0"])
    query, target = far.indices[0]
    assert float(far.pred_boxes[0, query[0], 0]) == 0.95 and float(far.targets[0]["boxes"][target[0], 0]) == 0.1
    one = make_layer(**CASES["one_positive"])
    assert sum(len(query) for query, _ in one.indices) == 1
    dn = make_layer(**CASES["denoising_groups"])
    assert dn.logits.shape[1] == 3 * 2 * 3 and [len(query) for query, _ in dn.indices] == [6, 9, 0]
    pixel = make_layer(**CASES["one_pixel_boxes"])
    assert all(torch.all(t["boxes"][:, 2:] * 600 == 1) for t in pixel.targets)
    on_target = make_layer(seed=8, num_targets=[3, 2], on_target=True)
    assert all(
        torch.equal(on_target.pred_boxes[i, q], on_target.targets[i]["boxes"][t])
        for i, (q, t) in enumerate(on_target.indices)
    )
    tied = make_layer(**CASES["tied_logits"])
    assert len(torch.unique(tied.logits)) < tied.logits.numel() / 4


def test_fixed_box_terms_are_weighted_means_over_the_matched_pairs():
    layer = make_layer(seed=1, num_targets=[3, 2, 4])
    losses, _, _ = ours(layer, SetRankingLoss(set_prediction_criterion("RankSortCriterion"), box_terms="fixed"))
    l1, giou = [], []
    for image, (query, target) in enumerate(layer.indices):
        predicted, boxes = layer.pred_boxes[image, query], layer.targets[image]["boxes"][target]
        l1.append((predicted - boxes).abs().sum(1))
        corners = [torch.cat([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], 1) for b in (predicted, boxes)]
        giou.append(1 - torch.diag(generalized_box_iou(*corners)))
    assert_close(losses["loss_bbox"], 5.0 * torch.cat(l1).mean())
    assert_close(losses["loss_giou"], 2.0 * torch.cat(giou).mean())


@pytest.mark.parametrize("criterion", ["AlrpCriterion", "APCriterion", "InterpolatedAPCriterion"])
def test_any_registered_criterion_by_name(criterion):
    layer = make_layer(seed=1, num_targets=[3, 2])
    losses, logits_grad, boxes_grad = ours(layer, SetRankingLoss(set_prediction_criterion(criterion)))
    assert sorted(losses) == ["loss_bbox", "loss_giou", "loss_rank"]
    assert all(bool(torch.isfinite(value.detach()) and value.detach() > 0) for value in losses.values())
    assert_close(losses["loss_bbox"], losses["loss_rank"])
    assert torch.isfinite(logits_grad).all() and logits_grad.abs().sum() > 0 and boxes_grad.abs().sum() > 0


def test_alrp_own_localisation_and_correlation_term():
    layer = make_layer(seed=1, num_targets=[3, 2])
    loss = SetRankingLoss(set_prediction_criterion("AlrpCriterion"), box_terms="own", corr_weight=0.5)
    losses, _, boxes_grad = ours(layer, loss)
    assert sorted(losses) == ["loss_bbox", "loss_corr", "loss_loc", "loss_rank"]
    assert_close(losses["loss_loc"], losses["loss_rank"])
    assert 0 < float(losses["loss_corr"].detach()) <= 1.0 and boxes_grad.abs().sum() > 0


def test_no_matched_pair_gives_zeros_connected_to_the_inputs():
    layer = make_layer(seed=1, num_targets=[0, 0])
    losses, logits_grad, boxes_grad = ours(layer, rank_sort_loss())
    assert all(float(value.detach()) == 0 for value in losses.values())
    assert float(logits_grad.abs().sum()) == 0 and float(boxes_grad.abs().sum()) == 0


def test_an_empty_batch_and_int32_indices_and_labels():
    (empty,) = rank_sort_loss()([MatchedSet(torch.zeros(0, 5, 3), torch.zeros(0, 5, 4), [])], [])
    assert sorted(empty) == ["loss_bbox", "loss_giou", "loss_rank"] and all(float(v) == 0 for v in empty.values())
    layer = make_layer(seed=1, num_targets=[3, 2])
    targets = [{"class_labels": t["class_labels"].int(), "boxes": t["boxes"]} for t in layer.targets]
    indices = [(query.int(), target.int()) for query, target in layer.indices]
    expected = ours(layer, rank_sort_loss())[0]
    actual = ours(layer._replace(indices=indices, targets=targets), rank_sort_loss())[0]
    for key, value in expected.items():
        assert_close(actual[key], value)


def bad_inputs() -> Dict[str, tuple]:
    layer = make_layer(seed=1, num_targets=[3, 2])
    logits, boxes, indices, targets = layer.logits, layer.pred_boxes, layer.indices, layer.targets
    nan_logits = logits.clone()
    nan_logits[1, 2, 3] = float("nan")
    query, target = indices[1]
    return {
        "pred_boxes must be [B, Q, 4] = [2, 12, 4]": (logits, boxes[:, :5], indices, targets),
        "one entry per image of logits (2, 12, 5), got 1 and 2": (logits, boxes, indices[:1], targets),
        "indices[1]: query index 12 out of range [0, Q = 12)": (
            logits,
            boxes,
            [indices[0], (torch.tensor([0, 12]), target)],
            targets,
        ),
        'indices[1]: target index 2 out of range [0, 2) of targets[1]["class_labels"] (2,)': (
            logits,
            boxes,
            [indices[0], (query, torch.tensor([0, 2]))],
            targets,
        ),
        "indices[1]: query 4 is matched more than once": (
            logits,
            boxes,
            [indices[0], (torch.tensor([4, 4]), target)],
            targets,
        ),
        'targets[0]["class_labels"] holds class 5, outside [0, C = 5)': (
            logits,
            boxes,
            indices,
            [{**targets[0], "class_labels": torch.tensor([0, 5, 1])}, targets[1]],
        ),
        'targets[1]["boxes"] must be floating-point [T, 4] = [2, 4]': (
            logits,
            boxes,
            indices,
            [targets[0], {**targets[1], "boxes": targets[1]["boxes"][:, :3]}],
        ),
        "NaN or infinite value in logits": (nan_logits, boxes, indices, targets),
    }


@pytest.mark.parametrize("message", list(bad_inputs()))
def test_bad_input_raises_naming_the_argument_and_shapes(message):
    expected = NonFiniteInputError if "NaN" in message else ValueError
    with pytest.raises(expected, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        logits, boxes, indices, targets = bad_inputs()[message]
        rank_sort_loss()([MatchedSet(logits, boxes, indices)], targets)


def test_the_criterions_output_is_checked_and_its_statistics_recorded():
    layer = make_layer(seed=1, num_targets=[3, 2])
    loss = rank_sort_loss()
    ours(layer, loss)
    statistics = loss.take_statistics()
    assert statistics is not None and {"cls", "loc", "rank", "sort", "weight"} <= set(statistics.values)
    assert loss.take_statistics() is None

    class TupleCriterion(RankSortCriterion):
        def __call__(self, *args):  # type: ignore[override]
            return tuple(super().__call__(*args))

    with pytest.raises(CriterionOutputError, match="TupleCriterion returned a tuple"):
        ours(layer, SetRankingLoss(TupleCriterion(loc_error_kind="giou")))


def test_bad_options_raise():
    rank_sort = set_prediction_criterion("RankSortCriterion")
    with pytest.raises(ValueError, match="box_terms must be one of"):
        SetRankingLoss(rank_sort, box_terms="balanced")
    with pytest.raises(ValueError, match='ranking "local" is now called "per_worker"'):
        SetRankingLoss(rank_sort, ranking="local")
    with pytest.raises(ValueError, match="ranking must be one of"):
        SetRankingLoss(rank_sort, ranking="everywhere")
    with pytest.raises(ValueError, match="criterion must be a RankingCriterion"):
        SetRankingLoss("RankSortCriterion")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a registered ranking criterion"):
        set_prediction_criterion("RankSort")
    with pytest.raises(ValueError, match="giou_weight must be 0"):
        SetRankingLoss(set_prediction_criterion("AlrpCriterion"), box_terms="own", giou_weight=2.0)
    with pytest.raises(ValueError, match="must be None with box_terms 'model'"):
        SetRankingLoss(rank_sort, box_terms="model", l1_weight=5.0)
    with pytest.raises(ValueError, match="l1_weight must be a finite number >= 0"):
        SetRankingLoss(rank_sort, l1_weight=-1.0)


IMPORT_CHECK = r"""
import importlib.abc
import sys


class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("detectron2", "transformers"):
            raise ImportError(f"{name} imported by the set-prediction loss")
        return None


sys.meta_path.insert(0, Blocked())
import torch

from alrp_d2.detr import MatchedSet, SetRankingLoss, set_prediction_criterion

logits = torch.randn(2, 4, 3, requires_grad=True)
boxes = torch.rand(2, 4, 4) * 0.5 + 0.2
targets = [{"class_labels": torch.tensor([1]), "boxes": torch.tensor([[0.4, 0.4, 0.3, 0.3]])}] * 2
indices = [(torch.tensor([2]), torch.tensor([0])), (torch.tensor([0]), torch.tensor([0]))]
(losses,) = SetRankingLoss(set_prediction_criterion("RankSortCriterion"))([MatchedSet(logits, boxes, indices)], targets)
sum(losses.values()).backward()
assert sorted(losses) == ["loss_bbox", "loss_giou", "loss_rank"] and logits.grad.abs().sum() > 0
print("ok")
"""


def test_imports_and_runs_without_detectron2_and_transformers():
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


@pytest.mark.parametrize("criterion", ["RankSortCriterion", "AlrpCriterion", "APCriterion"])
def test_logits_without_a_class_are_refused(criterion):
    """C = 0 (a model of ``num_labels`` 0): Rank & Sort Loss would fail in a reduction over no class, aLRP and AP Loss
    would return 0."""
    layer = make_layer(seed=1, num_targets=[0, 0])
    logits = layer.logits[..., :0]
    with pytest.raises(ValueError, match=r"logits \(.*, 0\) have no class \(C = 0\)"):
        SetRankingLoss(set_prediction_criterion(criterion))(
            [MatchedSet(logits, layer.pred_boxes, layer.indices)], layer.targets
        )


WITHOUT_TRANSFORMERS = r"""
import sys

sys.modules["transformers"] = None  # as if it were not installed
import alrp_d2.detr

for name in alrp_d2.detr.HF_FUNCTIONS:
    try:
        getattr(alrp_d2.detr, name)
    except ModuleNotFoundError as error:
        print(error)
"""


def test_the_hugging_face_functions_without_transformers_name_the_detr_extra():
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRANSFORMERS], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        f"alrp_d2.detr.{name} needs transformers, the 'detr' extra of alrp_d2: pip install '.[detr]' in the alrp_d2 "
        "checkout (transformers, scipy, accelerate)"
        for name in ("attach_ranking_loss", "restore_loss", "use_ranking_loss")
    ]
