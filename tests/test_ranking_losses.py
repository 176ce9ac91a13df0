"""The fast ranking losses against the loop transcription of App. E Alg. 2, and their edge cases."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.losses import LabelledSet, NonFiniteInputError, alrp_loss, ap_loss, loc_error

from .loop_reference import alrp_loss_loop, ap_loss_loop, cached_reference
from .ranking_cases import DEVICES, TOLERANCE, assert_relative, only_set, random_case


def run_alrp(logits, labels, errors, delta, path: str):
    logits = logits.clone().requires_grad_(True)
    errors = errors.clone().requires_grad_(True)
    loss_cls, loss_loc = only_set(alrp_loss([LabelledSet(logits, labels, errors)], delta=delta, path=path))[:2]
    # Independent backward passes: loss_cls drives the logits, loss_loc the errors.
    grad_logits, grad_errors = torch.autograd.grad(loss_cls + loss_loc, [logits, errors])
    return loss_cls, loss_loc, grad_logits, grad_errors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", range(40))
def test_alrp_matches_loop_reference(seed, dtype, device, ranking_path):
    logits, labels, errors, delta = random_case(seed, dtype, device)
    loss_cls, loss_loc, grad_logits, grad_errors = run_alrp(logits, labels, errors, delta, path=ranking_path)
    ref_cls, ref_loc, ref_grad_logits, ref_grad_errors = cached_reference(
        ("alrp", seed, dtype), lambda: alrp_loss_loop(logits.cpu(), labels.cpu(), errors.cpu(), delta)
    )
    rtol = TOLERANCE[dtype]
    assert loss_cls.dtype == dtype and loss_loc.dtype == dtype
    assert_relative(loss_cls, ref_cls, rtol)
    assert_relative(loss_loc, ref_loc, rtol)
    assert_relative(grad_logits, ref_grad_logits, rtol)
    assert_relative(grad_errors, ref_grad_errors, rtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", range(40))
def test_ap_matches_loop_reference(seed, dtype, device, ranking_path):
    logits, labels, _, delta = random_case(seed, dtype, device)
    logits = logits.clone().requires_grad_(True)
    loss = only_set(ap_loss([LabelledSet(logits, labels)], delta=delta, path=ranking_path)).loss
    (grad,) = torch.autograd.grad(loss, [logits])
    ref_loss, ref_grad = cached_reference(
        ("ap", seed, dtype), lambda: ap_loss_loop(logits.detach().cpu(), labels.cpu(), delta)
    )
    assert_relative(loss, ref_loss, TOLERANCE[dtype])
    assert_relative(grad, ref_grad, TOLERANCE[dtype])


@pytest.mark.parametrize("delta", [1.0, 0.25])
def test_single_positive_and_scores_equal_to_negatives(delta, ranking_path):
    logits = torch.tensor([0.0, 0.0, 0.0, 0.3, -0.3, 5.0, -5.0], dtype=torch.float64)
    labels = torch.tensor([1, 0, 0, 0, 0, -1, 0])
    errors = torch.tensor([0.4], dtype=torch.float64)
    loss_cls, loss_loc, grad_logits, grad_errors = run_alrp(logits, labels, errors, delta, path=ranking_path)
    ref = alrp_loss_loop(logits, labels, errors, delta)
    for actual, expected in zip((loss_cls, loss_loc, grad_logits, grad_errors), ref):
        assert_relative(actual, expected, 1e-12)
    # The ignored entry (5.0) and the negative far below (-5.0) get no gradient.
    assert grad_logits[5] == 0 and grad_logits[6] == 0


def test_ignored_entries_do_not_change_anything(ranking_path):
    logits, labels, errors, delta = random_case(7, torch.float64, "cpu")
    extended_logits = torch.cat([logits, torch.tensor([100.0, -100.0, 0.0], dtype=torch.float64)])
    extended_labels = torch.cat([labels, torch.tensor([-1, -1, -1])])
    base = run_alrp(logits, labels, errors, delta, path=ranking_path)
    extended = run_alrp(extended_logits, extended_labels, errors, delta, path=ranking_path)
    for a, b in zip(base[:2], extended[:2]):
        assert_relative(b, a, 1e-12)
    assert_relative(extended[2][: logits.numel()], base[2], 1e-12)
    assert torch.all(extended[2][logits.numel() :] == 0)


@pytest.mark.parametrize("seed", range(10))
def test_theorem_2_balanced_gradients(seed, ranking_path):
    """Summed |gradient| over positives equals that over negatives (Theorem 2)."""
    logits, labels, errors, delta = random_case(seed, torch.float64, "cpu")
    for loss_fn in ("alrp", "ap"):
        leaf = logits.clone().requires_grad_(True)
        if loss_fn == "alrp":
            terms = only_set(alrp_loss([LabelledSet(leaf, labels, errors)], delta=delta, path=ranking_path))
            loss = terms.loss_cls
            reported = (terms.positive_gradient_magnitude, terms.negative_gradient_magnitude)
        else:
            terms = only_set(ap_loss([LabelledSet(leaf, labels)], delta=delta, path=ranking_path))
            loss = terms.loss
            reported = (terms.positive_gradient_magnitude, terms.negative_gradient_magnitude)
        (grad,) = torch.autograd.grad(loss, [leaf])
        positive = grad[labels == 1].abs().sum()
        negative = grad[labels == 0].abs().sum()
        torch.testing.assert_close(positive, negative, rtol=1e-10, atol=1e-14)
        torch.testing.assert_close(reported[0], positive, rtol=1e-10, atol=1e-14)
        torch.testing.assert_close(reported[1], negative, rtol=1e-10, atol=1e-14)
        assert torch.all(grad[labels == 1] <= 0) and torch.all(grad[labels == 0] >= 0)


# Paper App. A, table "Per-box calculation of L_aLRP": ten anchors a1..a10 in descending
# score order, positives a1, a3, a6, a10, and the IoUs of each output (docs/paper_notes.md,
# "Toy example": C&R2 is 0.70).
TOY_LABELS = torch.tensor([1, 0, 1, 0, 0, 1, 0, 0, 0, 1])
TOY_IOUS = {
    "C&R1": ([0.95, 0.80, 0.65, 0.50], 0.53),
    "C&R2": ([0.80, 0.65, 0.50, 0.80], 0.70),
    "C&R3": ([0.50, 0.65, 0.80, 0.95], 0.89),
}


@pytest.mark.parametrize("output", sorted(TOY_IOUS))
def test_paper_toy_example(output, ranking_path):
    scores = torch.arange(10, 0, -1, dtype=torch.float64)
    ious, expected_alrp = TOY_IOUS[output]
    errors = (1.0 - torch.tensor(ious, dtype=torch.float64)) / 0.5
    loss_cls, loss_loc = only_set(alrp_loss([LabelledSet(scores, TOY_LABELS, errors)], delta=1e-3, path=ranking_path))[
        :2
    ]
    assert round((loss_cls + loss_loc).item(), 2) == expected_alrp
    assert (
        round(only_set(ap_loss([LabelledSet(scores, TOY_LABELS)], delta=1e-3, path=ranking_path)).loss.item(), 2)
        == 0.36
    )
    assert round(loss_cls.item(), 2) == 0.36  # the classification component equals AP Loss


def test_no_positive_gives_connected_zero(ranking_path):
    logits = torch.randn(50, requires_grad=True)
    labels = torch.zeros(50, dtype=torch.long)
    errors = torch.zeros(0, requires_grad=True)
    loss_cls, loss_loc = only_set(alrp_loss([LabelledSet(logits, labels, errors)], path=ranking_path))[:2]
    assert loss_cls.item() == 0 and loss_loc.item() == 0
    (loss_cls + loss_loc + only_set(ap_loss([LabelledSet(logits, labels)], path=ranking_path)).loss).backward()
    assert torch.all(logits.grad == 0) and errors.grad.shape == (0,)


def test_empty_input_gives_connected_zero():
    logits = torch.zeros(0, requires_grad=True)
    loss = only_set(ap_loss([LabelledSet(logits, torch.zeros(0, dtype=torch.long))])).loss
    loss.backward()
    assert loss.item() == 0 and logits.grad.shape == (0,)


def test_perfect_ranking_gives_zero_classification_gradient(ranking_path):
    logits = torch.tensor([5.0, 4.0, 3.5, -1.0, -2.0, 0.9], dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([1, 1, 1, 0, 0, 0])
    errors = torch.tensor([0.3, 0.9, 0.1], dtype=torch.float64, requires_grad=True)
    loss_cls, loss_loc = only_set(alrp_loss([LabelledSet(logits, labels, errors)], path=ranking_path))[:2]
    (loss_cls + loss_loc).backward()
    assert loss_cls.item() == 0
    assert torch.all(logits.grad == 0)
    assert torch.all(errors.grad > 0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_logits_raise(bad):
    logits = torch.randn(10)
    logits[3] = bad
    labels = torch.zeros(10, dtype=torch.long)
    labels[0] = 1
    with pytest.raises(NonFiniteInputError, match="non-finite logits"):
        alrp_loss([LabelledSet(logits, labels, torch.ones(1))])
    with pytest.raises(FloatingPointError, match="non-finite logits"):
        ap_loss([LabelledSet(logits, labels)])


def test_invalid_inputs_raise():
    logits = torch.randn(6)
    labels = torch.tensor([1, 0, 0, 1, -1, 0])
    with pytest.raises(NonFiniteInputError, match="localisation errors"):
        alrp_loss([LabelledSet(logits, labels, torch.tensor([0.1, float("nan")]))])
    with pytest.raises(ValueError, match="one localisation error per positive"):
        alrp_loss([LabelledSet(logits, labels, torch.ones(3))])
    with pytest.raises(ValueError, match="labels must be"):
        ap_loss([LabelledSet(logits, torch.tensor([1, 0, 2, 0, 0, 0]))])
    with pytest.raises(ValueError, match="same length"):
        ap_loss([LabelledSet(logits, labels[:4])])
    with pytest.raises(ValueError, match="delta"):
        ap_loss([LabelledSet(logits, labels)], delta=0.0)
    with pytest.raises(ValueError, match="eps"):
        alrp_loss([LabelledSet(logits, labels, torch.ones(2))], eps=-1.0)


def test_false_positives_below_eps_give_no_gradient(ranking_path):
    # The only negative sits just inside the band of the positive: N_FP = 1e-7 < eps.
    delta = 1.0
    logits = torch.tensor([0.0, -delta + 2e-7], dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([1, 0])
    loss_cls, _ = only_set(
        alrp_loss([LabelledSet(logits, labels, torch.tensor([0.5], dtype=torch.float64))], path=ranking_path)
    )[:2]
    loss_cls.backward()
    assert torch.all(logits.grad == 0)
    assert 0 < loss_cls.item() < 1e-6


def test_autocast_computes_in_float32(ranking_path):
    logits, labels, errors, delta = random_case(11, torch.float32, "cpu")
    half_logits = logits.bfloat16().requires_grad_(True)
    errors = errors.requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_cls, loss_loc = only_set(
            alrp_loss([LabelledSet(half_logits, labels, errors)], delta=delta, path=ranking_path)
        )[:2]
    assert loss_cls.dtype == torch.float32 and loss_loc.dtype == torch.float32
    ref_cls, ref_loc, ref_grad, _ = alrp_loss_loop(half_logits.float(), labels, errors, delta)
    assert_relative(loss_cls, ref_cls, 1e-5)
    assert_relative(loss_loc, ref_loc, 1e-5)
    loss_cls.backward()
    assert half_logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(half_logits.grad.double(), ref_grad, rtol=1e-2, atol=1e-6)


def test_loc_component_gradcheck_wrt_boxes():
    """loss_loc is differentiable w.r.t. the predicted boxes through E_loc, rank constant."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(40, generator=gen, dtype=torch.float64)
    labels = torch.zeros(40, dtype=torch.long)
    labels[[1, 5, 9, 20, 33]] = 1
    gt = torch.tensor(
        [[0, 0, 10, 10], [5, 5, 20, 30], [2, 3, 8, 9], [0, 0, 4, 4], [10, 10, 30, 20]], dtype=torch.float64
    )
    pred = (gt + torch.randn(5, 4, generator=gen, dtype=torch.float64)).requires_grad_(True)

    for kind in ("giou", "iou"):

        def loss_loc(boxes, kind=kind):
            return only_set(alrp_loss([LabelledSet(logits, labels, loc_error(boxes, gt, kind=kind))]))[1]

        assert torch.autograd.gradcheck(loss_loc, (pred,))


def test_loc_error_values():
    gt = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 1.0, 1.0]])
    pred = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 2.0, 1.0], [2.0, 0.0, 3.0, 1.0]])
    # IoU 1, 0.5, 0; GIoU 1, 0.5, 0 - (3 - 2) / 3.
    torch.testing.assert_close(loc_error(pred, gt, "iou"), torch.tensor([0.0, 1.0, 2.0]), atol=1e-6, rtol=0)
    expected_giou = torch.tensor([0.0, 0.25, (1 + 1 / 3) / 2]) / 0.5
    torch.testing.assert_close(loc_error(pred, gt, "giou"), expected_giou, atol=1e-6, rtol=0)
    torch.testing.assert_close(loc_error(pred, gt, "iou", tau=0.7), torch.tensor([0.0, 0.5, 1.0]) / 0.3)
    with pytest.raises(ValueError, match="kind"):
        loc_error(pred, gt, "l1")
    with pytest.raises(ValueError, match="tau"):
        loc_error(pred, gt, tau=1.0)


@pytest.mark.parametrize("kind", ["giou", "iou"])
def test_loc_error_degenerate_boxes_are_finite(kind):
    gt = torch.tensor([[3.0, 3.0, 3.0, 3.0], [0.0, 0.0, 4.0, 4.0], [1.0, 1.0, 1.0, 5.0]])
    pred = torch.tensor([[3.0, 3.0, 3.0, 3.0], [2.0, 2.0, 2.0, 2.0], [1.0, 1.0, 1.0, 5.0]], requires_grad=True)
    error = loc_error(pred, gt, kind)
    error.sum().backward()
    assert torch.all(torch.isfinite(error)) and torch.all(torch.isfinite(pred.grad))
    assert torch.all((error >= 0) & (error <= 2.0 + 1e-6))


def test_huge_finite_logits_are_accepted(ranking_path):
    """Their sum overflows float32, but every logit is finite: no error, no NaN."""
    logits = torch.tensor([3e38, 3e38, -3e38, 1.0], requires_grad=True)
    labels = torch.tensor([0, 0, 0, 0])
    loss = only_set(ap_loss([LabelledSet(logits, labels)], path=ranking_path)).loss
    loss.backward()
    assert loss.item() == 0 and torch.all(logits.grad == 0)
    labels[3] = 1
    loss_cls, loss_loc = only_set(alrp_loss([LabelledSet(logits, labels, torch.tensor([0.5]))], path=ranking_path))[:2]
    assert torch.isfinite(loss_cls) and torch.isfinite(loss_loc)
    assert loss_cls.item() == pytest.approx(2 / 3)
