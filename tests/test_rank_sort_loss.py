"""Rank & Sort Loss against the loop transcription of the official ``RankSort``, and its edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from alrp_d2.losses import LabelledSet, NonFiniteInputError, rank_sort_loss

from .loop_reference import cached_reference, rank_sort_loss_loop
from .ranking_cases import assert_relative, only_set

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# float32 inputs are computed in float64 like float64 ones; only the outputs are rounded to float32.
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-5}
DELTAS = [0.5, 1.0, 0.0, 0.1, 2.0]
NUM_RANDOM_CASES = 40


def random_case(seed: int, dtype: torch.dtype, device: str = "cpu"):
    """A few hundred examples with ignored entries and a random number of positives (at least one).
    Every other seed puts the scores on a grid of 0.25 (ties between positives, between positives
    and negatives, and score differences of exactly delta) and every third seed the IoUs on a grid
    of 0.25 (equal targets, some equal to 1)."""
    gen = torch.Generator().manual_seed(seed)
    size = int(torch.randint(2, 500, (1,), generator=gen))
    logits = torch.randn(size, generator=gen, dtype=torch.float64) * 1.5
    if seed % 2 == 0:
        logits = torch.round(logits * 4) / 4
    labels = torch.randint(-1, 2, (size,), generator=gen)
    labels[int(torch.randint(0, size, (1,), generator=gen))] = 1
    ious = 1.0 - torch.rand(size, generator=gen, dtype=torch.float64)
    if seed % 3 == 0:
        ious = (torch.round(ious * 4) / 4).clamp_min(0.25)
    targets = torch.where(labels == 1, ious, labels.double())
    return logits.to(dtype).to(device), targets.to(dtype).to(device), DELTAS[seed % len(DELTAS)]


def run(logits: torch.Tensor, targets: torch.Tensor, delta: float, path: str):
    """(ranking_loss, sorting_loss, d ranking_loss / d logits)."""
    logits = logits.clone().requires_grad_(True)
    ranking, sorting = only_set(rank_sort_loss([LabelledSet(logits, targets)], delta=delta, path=path))[:2]
    (grad,) = torch.autograd.grad(ranking, [logits])
    return ranking, sorting, grad


def assert_matches_loop(
    logits: torch.Tensor, targets: torch.Tensor, delta: float, rtol: float, key=None, *, path: str
) -> None:
    """Values and gradient against the loop transcription (computed once per ``key`` when one is given)."""
    ranking, sorting, grad = run(logits, targets, delta, path=path)

    def loop():
        return rank_sort_loss_loop(logits.detach().cpu(), targets.cpu(), delta)

    expected = loop() if key is None else cached_reference(key, loop)
    for actual, reference in zip((ranking, sorting, grad), expected):
        assert_relative(actual, reference, rtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", range(NUM_RANDOM_CASES))
def test_matches_loop_reference(seed, dtype, device, ranking_path):
    logits, targets, delta = random_case(seed, dtype, device)
    ranking, sorting, _ = run(logits, targets, delta, path=ranking_path)
    assert ranking.dtype == dtype and sorting.dtype == dtype
    assert_matches_loop(logits, targets, delta, TOLERANCE[dtype], key=("rank_sort", seed, dtype), path=ranking_path)


def test_random_cases_cover_the_edge_cases(ranking_path):
    """Ties between positives, between positives and negatives, equal IoUs, IoUs of 1, ignored
    entries and every delta (the unit step included) occur among the random problems."""
    found = dict.fromkeys(["positive_ties", "positive_negative_ties", "equal_ious", "iou_one", "ignored"], 0)
    for seed in range(NUM_RANDOM_CASES):
        logits, targets, _ = random_case(seed, torch.float64)
        positives, negatives = logits[targets > 0], logits[targets == 0]
        found["positive_ties"] += len(torch.unique(positives)) < len(positives)
        found["positive_negative_ties"] += bool(torch.isin(positives, negatives).any())
        found["equal_ious"] += len(torch.unique(targets[targets > 0])) < int((targets > 0).sum())
        found["iou_one"] += bool((targets == 1).any())
        found["ignored"] += bool((targets < 0).any())
    assert all(count >= 5 for count in found.values()), found
    assert set(DELTAS) == {random_case(seed, torch.float64)[2] for seed in range(NUM_RANDOM_CASES)}


def test_hand_computed_unit_step_example(ranking_path):
    """Positive a (IoU 0.9, score 1), positive b (IoU 0.5, score 2), a negative at 1.5, delta 0:
    a has N_FP 1, rank^+ 2 (itself and b), l_R = 1/3 and l_S = 0.3 - 0.1; b has no error. a hands
    l_R to the negative and l_S to b, which is sorted above it by mistake."""
    logits = torch.tensor([1.0, 2.0, 1.5], dtype=torch.float64)
    targets = torch.tensor([0.9, 0.5, 0.0], dtype=torch.float64)
    terms = only_set(rank_sort_loss([LabelledSet(logits.requires_grad_(True), targets)], delta=0.0, path=ranking_path))
    (grad,) = torch.autograd.grad(terms.ranking_loss, [logits])
    assert terms.ranking_loss.item() == pytest.approx(1 / 6, abs=1e-15)
    assert terms.sorting_loss.item() == pytest.approx(0.1, abs=1e-15)
    torch.testing.assert_close(grad, torch.tensor([-(1 / 3 + 0.2) / 2, 0.1, 1 / 6], dtype=torch.float64))
    assert terms.positive_gradient_magnitude.item() == pytest.approx((1 / 3 + 0.2) / 2 + 0.1)
    assert terms.negative_gradient_magnitude.item() == pytest.approx(1 / 6)


@pytest.mark.parametrize("delta", [0.5, 0.0])
def test_ties_between_positives_and_negatives(delta, ranking_path):
    """Tied scores at 0 and ties at exactly delta; two positives share an IoU."""
    logits = torch.tensor([0.0, 0.0, 0.0, 0.5, 0.5, -0.5, 0.0, 1.0], dtype=torch.float64)
    targets = torch.tensor([0.7, 0.7, 0.0, 0.4, 0.0, 1.0, -1.0, 0.0], dtype=torch.float64)
    assert_matches_loop(logits, targets, delta, 1e-12, path=ranking_path)


@pytest.mark.parametrize("delta", [0.5, 0.0])
def test_single_positive(delta, ranking_path):
    logits = torch.tensor([0.0, 0.0, 0.3, -0.3, 5.0, -5.0], dtype=torch.float64)
    targets = torch.tensor([0.6, 0.0, 0.0, 0.0, -1.0, 0.0], dtype=torch.float64)
    ranking, sorting, grad = run(logits, targets, delta, path=ranking_path)
    assert_matches_loop(logits, targets, delta, 1e-12, path=ranking_path)
    assert sorting.item() == 0
    assert grad[4] == 0 and grad[5] == 0  # ignored, and far below the positive


@pytest.mark.parametrize("iou", [1.0, 0.6])
def test_equal_ious_have_no_sorting_error(iou, ranking_path):
    """With every IoU equal nothing is mis-sorted: the sorting loss and its gradient are exactly 0
    and the gradient is the ranking gradient alone (that of a constant sorting target)."""
    logits, targets, delta = random_case(4, torch.float64)
    targets = torch.where(targets > 0, iou, targets)
    ranking, sorting, grad = run(logits, targets, delta, path=ranking_path)
    assert sorting.item() == 0
    assert_matches_loop(logits, targets, delta, 1e-10, path=ranking_path)
    positive = targets > 0
    relevant_negatives = grad[targets == 0]
    assert torch.all(grad[positive] <= 0) and torch.all(relevant_negatives >= 0)


def test_perfect_ranking_and_sorting_have_no_error(ranking_path):
    logits = torch.tensor([5.0, 4.0, 3.0, -1.0, -2.0, 1.9], dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0.9, 0.8, 0.3, 0.0, 0.0, 0.0], dtype=torch.float64)
    ranking, sorting = only_set(rank_sort_loss([LabelledSet(logits, targets)], path=ranking_path))[:2]
    (ranking + sorting).backward()
    assert ranking.item() == 0 and sorting.item() == 0
    assert torch.all(logits.grad == 0)


def test_ignored_entries_do_not_change_anything(ranking_path):
    logits, targets, delta = random_case(7, torch.float64)
    base = run(logits, targets, delta, path=ranking_path)
    extended = run(
        torch.cat([logits, torch.tensor([100.0, -100.0, 0.0], dtype=torch.float64)]),
        torch.cat([targets, torch.tensor([-1.0, -0.5, -2.0], dtype=torch.float64)]),
        delta,
        path=ranking_path,
    )
    for a, b in zip(base[:2], extended[:2]):
        assert_relative(b, a, 1e-12)
    assert_relative(extended[2][: logits.numel()], base[2], 1e-12)
    assert torch.all(extended[2][logits.numel() :] == 0)


def test_sorting_loss_is_connected_with_zero_gradient(ranking_path):
    """As the official backward, only the ranking loss carries the score gradient."""
    logits, targets, delta = random_case(2, torch.float64)
    logits.requires_grad_(True)
    ranking, sorting = only_set(rank_sort_loss([LabelledSet(logits, targets)], delta=delta, path=ranking_path))[:2]
    assert sorting.item() > 0 and sorting.requires_grad
    (sorting_grad,) = torch.autograd.grad(sorting, [logits], retain_graph=True)
    assert torch.all(sorting_grad == 0)
    (both,) = torch.autograd.grad(ranking + sorting, [logits], retain_graph=True)
    (ranking_grad,) = torch.autograd.grad(ranking, [logits])
    assert torch.equal(both, ranking_grad)


@pytest.mark.parametrize("seed", range(10))
def test_gradients_of_positives_and_negatives_balance(seed, ranking_path):
    """The ranking update moves as much to the negatives as it takes from the positives, and the
    sorting update moves score among the positives only: the signed sums cancel. The reported
    magnitudes are the sums of |gradient| of the positives and of the negatives."""
    logits, targets, delta = random_case(seed, torch.float64)
    leaf = logits.clone().requires_grad_(True)
    terms = only_set(rank_sort_loss([LabelledSet(leaf, targets)], delta=delta, path=ranking_path))
    (grad,) = torch.autograd.grad(terms.ranking_loss, [leaf])
    positive, negative = grad[targets > 0], grad[targets == 0]
    torch.testing.assert_close(positive.sum(), -negative.sum(), rtol=0, atol=1e-12)
    torch.testing.assert_close(terms.positive_gradient_magnitude, positive.abs().sum(), rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(terms.negative_gradient_magnitude, negative.abs().sum(), rtol=1e-10, atol=1e-14)
    assert torch.all(negative >= 0)


def test_no_positive_gives_connected_zeros(ranking_path):
    logits = torch.randn(50, requires_grad=True)
    targets = torch.zeros(50)
    targets[:5] = -1
    ranking, sorting = only_set(rank_sort_loss([LabelledSet(logits, targets)], path=ranking_path))[:2]
    assert ranking.item() == 0 and sorting.item() == 0
    (ranking + sorting).backward()
    assert torch.all(logits.grad == 0)
    empty = torch.zeros(0, requires_grad=True)
    ranking, sorting = only_set(rank_sort_loss([LabelledSet(empty, torch.zeros(0))], path=ranking_path))[:2]
    (ranking + sorting).backward()
    assert ranking.item() == 0 and empty.grad.shape == (0,)


def test_autocast_computes_in_float32(ranking_path):
    logits, targets, delta = random_case(11, torch.float32)
    half_logits = logits.bfloat16().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ranking, sorting = only_set(
            rank_sort_loss([LabelledSet(half_logits, targets)], delta=delta, path=ranking_path)
        )[:2]
    assert ranking.dtype == torch.float32 and sorting.dtype == torch.float32
    ref_ranking, ref_sorting, ref_grad = rank_sort_loss_loop(half_logits.float(), targets, delta)
    assert_relative(ranking, ref_ranking, 1e-5)
    assert_relative(sorting, ref_sorting, 1e-5)
    ranking.backward()
    assert half_logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(half_logits.grad.double(), ref_grad, rtol=1e-2, atol=1e-6)


def test_invalid_inputs_raise(ranking_path):
    logits = torch.randn(6)
    targets = torch.tensor([0.5, 0.0, 0.0, 1.0, -1.0, 0.0])
    with pytest.raises(ValueError, match="same length"):
        rank_sort_loss([LabelledSet(logits, targets[:5])], path=ranking_path)
    with pytest.raises(ValueError, match="1-D"):
        rank_sort_loss([LabelledSet(logits.view(2, 3), targets.view(2, 3))], path=ranking_path)
    with pytest.raises(TypeError, match="targets must be a floating-point tensor"):
        rank_sort_loss([LabelledSet(logits, (targets > 0).long())], path=ranking_path)
    with pytest.raises(TypeError, match="logits must be a floating-point tensor"):
        rank_sort_loss([LabelledSet(torch.arange(6), targets)], path=ranking_path)
    with pytest.raises(ValueError, match=r"targets must be <= 1 .* maximum of 1.5"):
        rank_sort_loss([LabelledSet(logits, torch.tensor([1.5, 0.0, 0.0, 1.0, -1.0, 0.0]))], path=ranking_path)
    for delta in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="delta must be finite and >= 0"):
            rank_sort_loss([LabelledSet(logits, targets)], delta=delta, path=ranking_path)
    with pytest.raises(ValueError, match="eps must be > 0"):
        rank_sort_loss([LabelledSet(logits, targets)], eps=0.0, path=ranking_path)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_inputs_raise(bad, ranking_path):
    logits = torch.randn(6)
    targets = torch.tensor([0.5, 0.0, 0.0, 1.0, -1.0, 0.0])
    bad_logits = logits.clone()
    bad_logits[2] = bad
    with pytest.raises(NonFiniteInputError, match="1 non-finite logits"):
        rank_sort_loss([LabelledSet(bad_logits, targets)], path=ranking_path)
    bad_targets = targets.clone()
    bad_targets[4] = bad
    with pytest.raises(NonFiniteInputError, match="1 non-finite targets"):
        rank_sort_loss([LabelledSet(logits, bad_targets)], path=ranking_path)


@pytest.mark.parametrize("eps", [0.5, 0.49])
def test_gates_are_strict(eps, ranking_path):
    """Two tied positives and a tied negative with delta 0.5: N_FP = 0.5 for both positives and
    the sorting pmf's denominator of the better one is H(0) = 0.5. eps = 0.5 closes both gates
    (``N_FP > eps``, ``D > eps``, as the official code); eps = 0.49 opens them."""
    logits = torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64)
    targets = torch.tensor([0.9, 0.5, 0.0], dtype=torch.float64)
    ranking, sorting, grad = run(logits, targets, 0.5, path=ranking_path)
    expected = rank_sort_loss_loop(logits, targets, 0.5, eps)
    leaf = logits.clone().requires_grad_(True)
    gated = only_set(rank_sort_loss([LabelledSet(leaf, targets)], delta=0.5, eps=eps, path=ranking_path))[0]
    (gated_grad,) = torch.autograd.grad(gated, [leaf])
    assert_relative(gated_grad, expected[2], 1e-12)
    assert torch.all(gated_grad == 0) == (eps == 0.5)
    assert ranking.item() > 0 and sorting.item() > 0
