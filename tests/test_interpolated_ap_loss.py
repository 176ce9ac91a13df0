"""Interpolated AP Loss against a loop transcription of the official APLoss."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.losses import LabelledSet, ap_loss

from .loop_reference import cached_reference, interpolated_ap_loss_loop
from .ranking_cases import DEVICES, TOLERANCE, assert_relative, only_set, random_case


def run_interpolated(logits: torch.Tensor, labels: torch.Tensor, delta: float, eps=None, *, path: str):
    leaf = logits.clone().requires_grad_(True)
    loss = only_set(ap_loss([LabelledSet(leaf, labels)], delta=delta, eps=eps, interpolated=True, path=path)).loss
    (grad,) = torch.autograd.grad(loss, [leaf])
    return loss, grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", range(40))
def test_matches_official_loop(seed, dtype, device, ranking_path):
    """Values and every gradient element, with ties on every third seed, ignored entries and
    one to ~200 positives; the order in which the official loop visits tied positives does not
    change the result."""
    logits, labels, _, delta = random_case(seed, dtype, device)
    loss, grad = run_interpolated(logits, labels, delta, path=ranking_path)
    ref_loss, ref_grad = cached_reference(
        ("interpolated_ap", seed, dtype), lambda: interpolated_ap_loss_loop(logits.cpu(), labels.cpu(), delta)
    )
    assert loss.dtype == dtype
    assert_relative(loss, ref_loss, TOLERANCE[dtype])
    assert_relative(grad, ref_grad, TOLERANCE[dtype])
    tie_loss, tie_grad = cached_reference(
        ("interpolated_ap_reversed_ties", seed, dtype),
        lambda: interpolated_ap_loss_loop(logits.cpu(), labels.cpu(), delta, reverse_ties=True),
    )
    assert_relative(tie_loss, ref_loss, 1e-12)
    assert_relative(tie_grad, ref_grad, 1e-12)


def test_interpolation_changes_the_loss_on_random_rankings(ranking_path):
    """The interpolated loss never exceeds the non-interpolated one, and is lower on most cases."""
    lower = 0
    for seed in range(20):
        logits, labels, _, delta = random_case(seed, torch.float64, "cpu")
        interpolated = only_set(
            ap_loss([LabelledSet(logits, labels)], delta=delta, eps=None, interpolated=True, path=ranking_path)
        ).loss
        plain = only_set(ap_loss([LabelledSet(logits, labels)], delta=delta, eps=None, path=ranking_path)).loss
        assert interpolated <= plain + 1e-12
        lower += bool(interpolated < plain - 1e-6)
    assert lower >= 10


def test_hand_computed_precisions(ranking_path):
    """Positives at ranks 1, 3, 4 (delta small: H is a step): precisions 1, 2/3, 3/4; the
    interpolated precision of the second positive is the 3/4 of the lower-ranked third."""
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0], dtype=torch.float64)
    labels = torch.tensor([1, 0, 1, 1, 0])
    loss, grad = run_interpolated(logits, labels, 1e-3, path=ranking_path)
    assert loss.item() == pytest.approx(1 - (1 + 3 / 4 + 3 / 4) / 3, abs=1e-12)
    assert only_set(ap_loss([LabelledSet(logits, labels)], delta=1e-3, path=ranking_path)).loss.item() == pytest.approx(
        1 - (1 + 2 / 3 + 3 / 4) / 3, abs=1e-12
    )
    # l = (0, 1/4, 1/4): the one negative above the two lower positives gets (1/4 + 1/4) / 3.
    torch.testing.assert_close(grad, torch.tensor([0, 1 / 6, -1 / 12, -1 / 12, 0], dtype=torch.float64))


def test_tied_positives_take_the_precision_of_a_lower_positive(ranking_path):
    """Two tied positives (precision 2.5 / 3.5) are lifted together to the 0.8 of the positive
    below them, whichever of the two the official loop visits first."""
    logits = torch.tensor([3.0, 2.0, 1.0, 1.0, 0.8, 0.5], dtype=torch.float64)
    labels = torch.tensor([1, 0, 1, 1, 1, 0])
    loss, grad = run_interpolated(logits, labels, 1e-3, path=ranking_path)
    assert loss.item() == pytest.approx(1 - (1 + 0.8 + 0.8 + 0.8) / 4, abs=1e-12)
    assert grad[2] == grad[3] == pytest.approx(-0.2 / 4, abs=1e-12)
    for reverse_ties in (False, True):
        ref_loss, ref_grad = interpolated_ap_loss_loop(logits, labels, 1e-3, reverse_ties)
        assert_relative(loss, ref_loss, 1e-12)
        assert_relative(grad, ref_grad, 1e-12)


@pytest.mark.parametrize("delta", [1.0, 0.25])
def test_single_positive_and_scores_equal_to_negatives(delta, ranking_path):
    logits = torch.tensor([0.0, 0.0, 0.0, 0.3, -0.3, 5.0, -5.0], dtype=torch.float64)
    labels = torch.tensor([1, 0, 0, 0, 0, -1, 0])
    loss, grad = run_interpolated(logits, labels, delta, path=ranking_path)
    ref_loss, ref_grad = interpolated_ap_loss_loop(logits, labels, delta)
    assert_relative(loss, ref_loss, 1e-12)
    assert_relative(grad, ref_grad, 1e-12)
    assert loss.item() > 0 and grad[5] == 0 and grad[6] == 0


def test_ignored_entries_do_not_change_anything(ranking_path):
    logits, labels, _, delta = random_case(7, torch.float64, "cpu")
    extended_logits = torch.cat([logits, torch.tensor([100.0, -100.0, 0.0], dtype=torch.float64)])
    extended_labels = torch.cat([labels, torch.tensor([-1, -1, -1])])
    loss, grad = run_interpolated(logits, labels, delta, path=ranking_path)
    extended_loss, extended_grad = run_interpolated(extended_logits, extended_labels, delta, path=ranking_path)
    assert_relative(extended_loss, loss, 1e-12)
    assert_relative(extended_grad[: logits.numel()], grad, 1e-12)
    assert torch.all(extended_grad[logits.numel() :] == 0)


def test_official_loss_has_no_false_positive_gate(ranking_path):
    """The only negative sits just inside the band of the positive (N_FP = 1e-7): the official
    loss (eps=None) still moves both scores; with the App. E gate (eps=1e-5) neither moves."""
    logits = torch.tensor([0.0, -1.0 + 2e-7], dtype=torch.float64)
    labels = torch.tensor([1, 0])
    loss, grad = run_interpolated(logits, labels, 1.0, path=ranking_path)
    ref_loss, ref_grad = interpolated_ap_loss_loop(logits, labels, 1.0)
    assert_relative(loss, ref_loss, 1e-9)
    assert_relative(grad, ref_grad, 1e-9)
    assert grad[0] < 0 < grad[1]
    _, gated_grad = run_interpolated(logits, labels, 1.0, eps=1e-5, path=ranking_path)
    assert torch.all(gated_grad == 0)


@pytest.mark.parametrize("seed", range(10))
def test_theorem_2_balanced_gradients(seed, ranking_path):
    logits, labels, _, delta = random_case(seed, torch.float64, "cpu")
    leaf = logits.clone().requires_grad_(True)
    terms = only_set(ap_loss([LabelledSet(leaf, labels)], delta=delta, eps=None, interpolated=True, path=ranking_path))
    (grad,) = torch.autograd.grad(terms.loss, [leaf])
    positive, negative = grad[labels == 1].abs().sum(), grad[labels == 0].abs().sum()
    torch.testing.assert_close(positive, negative, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(terms.positive_gradient_magnitude, positive, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(terms.negative_gradient_magnitude, negative, rtol=1e-10, atol=1e-14)


def test_without_positives_gives_connected_zero(ranking_path):
    logits = torch.randn(20, requires_grad=True)
    loss = only_set(
        ap_loss(
            [LabelledSet(logits, torch.zeros(20, dtype=torch.long))], eps=None, interpolated=True, path=ranking_path
        )
    ).loss
    loss.backward()
    assert loss.item() == 0 and torch.all(logits.grad == 0)
