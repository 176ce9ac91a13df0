"""Inputs of the public loss API: degenerate / inverted / float16 boxes in loc_error, label dtypes,
delta and negative localisation errors (pure torch)."""

from __future__ import annotations

import math

import pytest
import torch

from alrp_d2.losses import LabelledSet, alrp_loss, ap_loss, loc_error

from .ranking_cases import only_set

GT = torch.tensor([[10.0, 10.0, 50.0, 60.0]])


@pytest.mark.parametrize("kind", ["giou", "iou"])
def test_fully_inverted_prediction_is_no_match(kind):
    """IoU 0, so GIoU <= 0: at least the error of two disjoint boxes touching, (1 - 0) / 2 / (1 - tau)."""
    inverted = GT[:, [2, 3, 0, 1]]
    assert loc_error(inverted, GT, kind, tau=0.5).item() >= 1.0


@pytest.mark.parametrize("kind", ["giou", "iou"])
@pytest.mark.parametrize("tau", [0.0, 0.5])
def test_inverted_and_degenerate_boxes_stay_in_range(kind, tau):
    boxes = torch.tensor(
        [
            [10.0, 10.0, 5.0, 60.0],  # negative width
            [10.0, 60.0, 50.0, 10.0],  # negative height
            [30.0, 30.0, 30.0, 30.0],  # a point
            [-100.0, 10.0, -200.0, 60.0],  # inverted, far away
            [20.0, 20.0, 40.0, 50.0],  # inside the ground truth
        ]
    )
    error = loc_error(boxes, GT.expand(len(boxes), 4), kind, tau)
    assert torch.all((error >= 0) & (error <= 1.0 / (1.0 - tau)))
    assert torch.all(error[:4] >= error[4])


def test_float16_boxes_of_a_thousand_pixels_are_finite():
    gt = torch.tensor([[0.0, 0.0, 1000.0, 1000.0]])
    pred = torch.tensor([[5.0, 0.0, 1010.0, 990.0]])
    expected = loc_error(pred, gt)
    half = loc_error(pred.half(), gt.half())
    assert half.dtype == torch.float32
    assert torch.isfinite(half).all()
    assert half.item() == pytest.approx(expected.item(), abs=1e-3)


@pytest.mark.parametrize("loss", ["alrp", "ap"])
@pytest.mark.parametrize("labels", [[1.0, 0.0, 0.5], [1.0, 0.0, math.nan]])
def test_float_labels_are_refused(loss, labels):
    logits = torch.tensor([1.0, 0.0, -1.0])
    labels = torch.tensor(labels)
    with pytest.raises(TypeError, match="labels must be an integer or bool"):
        if loss == "alrp":
            alrp_loss([LabelledSet(logits, labels, torch.tensor([0.2]))])
        else:
            ap_loss([LabelledSet(logits, labels)])


def test_bool_labels_equal_integer_labels():
    logits = torch.tensor([2.0, 0.5, -1.0, 1.0])
    labels = torch.tensor([True, False, False, True])
    loc = torch.tensor([0.1, 0.3])
    assert [t.item() for t in only_set(alrp_loss([LabelledSet(logits, labels, loc)]))[:2]] == [
        t.item() for t in only_set(alrp_loss([LabelledSet(logits, labels.long(), loc)]))[:2]
    ]
    assert (
        only_set(ap_loss([LabelledSet(logits, labels)])).loss.item()
        == only_set(ap_loss([LabelledSet(logits, labels.to(torch.int8))])).loss.item()
    )


@pytest.mark.parametrize("delta", [math.inf, math.nan, 0.0, -1.0])
def test_delta_must_be_finite_and_positive(delta):
    with pytest.raises(ValueError, match="delta must be finite and > 0"):
        ap_loss([LabelledSet(torch.tensor([1.0, 0.0]), torch.tensor([1, 0]))], delta=delta)


def test_negative_localisation_errors_are_refused():
    with pytest.raises(ValueError, match="localisation errors must be >= 0"):
        alrp_loss([LabelledSet(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([1, 0, 1]), torch.tensor([0.2, -0.1]))])
