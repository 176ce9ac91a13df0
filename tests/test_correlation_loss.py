"""Correlation Loss and the soft rank against the official functions and ``torchsort`` (the fixture
written by tools/correlation_reference.py), against loop references, and their edge cases."""

from __future__ import annotations

import importlib
import os

import pytest
import torch

from alrp_d2.losses import CORRELATION_KINDS, correlation_loss, correlation_loss_per_level, soft_rank

from .correlation_reference_loop import per_level_loop, soft_rank_pav

FIXTURE = torch.load(
    os.path.join(os.path.dirname(__file__), "fixtures", "correlation", "correlation_reference.pt"), weights_only=True
)
soft_rank_module = importlib.import_module("alrp_d2.losses.soft_rank")  # the package exports the function by its name
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def loss_and_gradient(loss_of, scores: torch.Tensor):
    leaf = scores.clone().requires_grad_(True)
    loss = loss_of(leaf)
    (gradient,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), gradient


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "case",
    FIXTURE["losses"],
    ids=[f"{c['case']}-{c['kind']}-eps{c.get('concordance_eps', 0)}" for c in FIXTURE["losses"]],
)
def test_loss_equals_official(case, device):
    eps = case.get("concordance_eps", 0.0)
    ious = case["ious"].to(device)
    loss, gradient = loss_and_gradient(
        lambda s: correlation_loss(s, ious, case["kind"], concordance_eps=eps), case["scores"].to(device)
    )
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss.cpu(), case["loss"], rtol=0, atol=1e-6)
    torch.testing.assert_close(gradient.cpu(), case["gradient"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", FIXTURE["per_level"], ids=[c["kind"] for c in FIXTURE["per_level"]])
def test_per_level_equals_official(case):
    loss, gradient = loss_and_gradient(
        lambda s: correlation_loss_per_level(s, case["ious"], case["levels"], case["num_levels"], case["kind"]),
        case["scores"],
    )
    torch.testing.assert_close(loss, case["loss"], rtol=0, atol=1e-6)
    torch.testing.assert_close(gradient, case["gradient"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(FIXTURE["soft_rank"]))
def test_soft_rank_equals_torchsort(name, device):
    case = FIXTURE["soft_rank"][name]
    values = case["values"].to(device).requires_grad_(True)
    ranks = soft_rank(values, case["strength"])
    (gradient,) = torch.autograd.grad((ranks * case["upstream"].to(device)).sum(), values)
    torch.testing.assert_close(ranks.detach().cpu(), case["ranks"], rtol=0, atol=1e-6)
    torch.testing.assert_close(gradient.cpu(), case["gradient"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("strength", [1.0, 0.05, 4.0])
def test_soft_rank_equals_pav_over_several_chunks(strength, monkeypatch):
    """500 entries with ties, the (j, k) table searched in chunks of 37 rows."""
    monkeypatch.setattr(soft_rank_module, "_CHUNK_ELEMENTS", 37 * 500)
    gen = torch.Generator().manual_seed(3)
    values = torch.round(torch.randn(500, generator=gen, dtype=torch.float64) * 40) / 4
    torch.testing.assert_close(soft_rank(values, strength), soft_rank_pav(values, strength), rtol=0, atol=1e-9)


def test_grouped_soft_rank_ranks_every_group_on_its_own():
    gen = torch.Generator().manual_seed(4)
    values = torch.round(torch.randn(120, generator=gen, dtype=torch.float64) * 8) / 2
    groups = torch.randint(0, 5, (120,), generator=gen)
    leaf = values.clone().requires_grad_(True)
    upstream = torch.randn(120, generator=gen, dtype=torch.float64)
    (gradient,) = torch.autograd.grad((soft_rank(leaf, groups=groups) * upstream).sum(), leaf)
    for group in range(5):
        mask = groups == group
        alone = values[mask].clone().requires_grad_(True)
        ranks = soft_rank(alone)
        (expected,) = torch.autograd.grad((ranks * upstream[mask]).sum(), alone)
        torch.testing.assert_close(
            soft_rank(values, groups=groups)[mask], soft_rank_pav(values[mask]), rtol=0, atol=1e-9
        )
        torch.testing.assert_close(gradient[mask], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", CORRELATION_KINDS)
@pytest.mark.parametrize("seed", range(4))
def test_per_level_equals_loop_over_levels(kind, seed):
    """Five levels of random sizes (some with 0 or 1 positive), one with constant IoUs."""
    gen = torch.Generator().manual_seed(seed)
    levels = torch.randint(0, 5, (int(torch.randint(0, 60, (1,), generator=gen)),), generator=gen)
    levels[levels == 1] = 2 if seed % 2 else 1
    scores = torch.rand(levels.numel(), generator=gen, dtype=torch.float64)
    ious = torch.rand(levels.numel(), generator=gen, dtype=torch.float64)
    ious[levels == 3] = 0.625
    loss, gradient = loss_and_gradient(lambda s: correlation_loss_per_level(s, ious, levels, 5, kind), scores)
    expected, expected_gradient = loss_and_gradient(lambda s: per_level_loop(s, ious, levels, 5, kind), scores)
    torch.testing.assert_close(loss, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(gradient, expected_gradient, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", CORRELATION_KINDS)
@pytest.mark.parametrize("count", [0, 1])
def test_fewer_than_two_positives_give_zero_with_the_graph(kind, count):
    scores = torch.rand(count, dtype=torch.float64, requires_grad=True)
    for loss in (
        correlation_loss(scores, torch.rand(count), kind),
        correlation_loss_per_level(scores, torch.rand(count), torch.zeros(count, dtype=torch.long), 3, kind),
    ):
        assert loss.item() == 0 and loss.requires_grad
        (gradient,) = torch.autograd.grad(loss, scores)
        assert torch.equal(gradient, torch.zeros_like(scores))


@pytest.mark.parametrize("kind", CORRELATION_KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_constant_scores_give_zero_whatever_the_rounding_of_their_mean(kind, dtype):
    """The official code gets 0 / 0 = NaN -> 0 only where the mean of 0.1s rounds back to 0.1; here
    every constant group gives 0 with a zero (finite) gradient."""
    scores = torch.full((7,), 0.1, dtype=dtype, requires_grad=True)
    loss = correlation_loss(scores, torch.rand(7, dtype=dtype), kind, concordance_eps=1e-6)
    (gradient,) = torch.autograd.grad(loss, scores)
    assert loss.item() == 0 and torch.equal(gradient, torch.zeros_like(gradient))


@pytest.mark.parametrize("kind", CORRELATION_KINDS)
def test_float32_is_close_to_float64(kind):
    gen = torch.Generator().manual_seed(5)
    scores = torch.rand(200, generator=gen, dtype=torch.float64)
    ious = torch.rand(200, generator=gen, dtype=torch.float64)
    levels = torch.randint(0, 5, (200,), generator=gen)
    for loss_of in (
        lambda s, i: correlation_loss(s, i, kind),
        lambda s, i: correlation_loss_per_level(s, i, levels, 5, kind),
    ):
        loss32, gradient32 = loss_and_gradient(lambda s, f=loss_of: f(s, ious.float()), scores.float())
        loss64, gradient64 = loss_and_gradient(lambda s, f=loss_of: f(s, ious), scores)
        assert loss32.dtype == torch.float32
        torch.testing.assert_close(loss32.double(), loss64, rtol=0, atol=1e-5)
        torch.testing.assert_close(gradient32.double(), gradient64, rtol=0, atol=1e-6)


def test_half_scores_are_computed_in_float32():
    scores = torch.rand(50).half().requires_grad_(True)
    loss = correlation_loss(scores, torch.rand(50).half(), "concordance")
    assert loss.dtype == torch.float32
    loss.backward()
    assert scores.grad is not None and torch.isfinite(scores.grad).all()


def test_ious_are_detached_and_floored():
    scores = torch.rand(20, dtype=torch.float64, requires_grad=True)
    ious = torch.rand(20, dtype=torch.float64, requires_grad=True)
    zeroed = torch.where(torch.arange(20) % 3 == 0, 0.0, ious)
    floored = zeroed.detach().clamp(min=1e-6)
    for kind in CORRELATION_KINDS:
        loss = correlation_loss(scores, zeroed, kind)
        assert torch.autograd.grad(loss, ious, allow_unused=True) == (None,)
        assert loss.item() == correlation_loss(scores, floored, kind).item()


@pytest.mark.parametrize("kind", CORRELATION_KINDS)
def test_spearman_at_strength_one_equals_pearson_on_the_unit_interval(kind):
    """Scores and IoUs in (0, 1): no gap of 1 between sorted neighbours, so every soft rank at
    strength 1 pools into one block and is the input plus a constant."""
    gen = torch.Generator().manual_seed(6)
    scores, ious = (
        torch.rand(100, generator=gen, dtype=torch.float64),
        torch.rand(100, generator=gen, dtype=torch.float64),
    )
    torch.testing.assert_close(
        soft_rank(scores) - scores, torch.full_like(scores, (soft_rank(scores) - scores)[0].item())
    )
    assert correlation_loss(scores, ious, "spearman").item() == pytest.approx(
        correlation_loss(scores, ious, "pearson").item(), abs=1e-12
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_scores_make_the_loss_nan(bad):
    scores = torch.rand(10, dtype=torch.float64)
    scores[3] = bad
    levels = torch.zeros(10, dtype=torch.long)
    for kind in CORRELATION_KINDS:
        assert torch.isnan(correlation_loss(scores, torch.rand(10, dtype=torch.float64), kind))
        assert torch.isnan(correlation_loss_per_level(scores, torch.rand(10, dtype=torch.float64), levels, 2, kind))


def test_bad_input_is_named():
    scores, ious = torch.rand(5), torch.rand(5)
    with pytest.raises(ValueError, match="kind must be one of"):
        correlation_loss(scores, ious, "kendall")
    with pytest.raises(ValueError, match=r"same length, got \(5,\) and \(4,\)"):
        correlation_loss(scores, torch.rand(4), "pearson")
    with pytest.raises(ValueError, match="1-D"):
        correlation_loss(scores[None], ious[None], "pearson")
    with pytest.raises(TypeError, match="floating-point"):
        correlation_loss(torch.arange(5), ious, "pearson")
    with pytest.raises(ValueError, match="levels must be an integer tensor"):
        correlation_loss_per_level(scores, ious, torch.zeros(5), 2, "pearson")
    with pytest.raises(ValueError, match="num_levels must be a positive int"):
        correlation_loss_per_level(scores, ious, torch.zeros(5, dtype=torch.long), 0, "pearson")
    with pytest.raises(ValueError, match="regularization_strength must be > 0"):
        soft_rank(scores, 0.0)
    with pytest.raises(ValueError, match="groups can only be given with 1-D values"):
        soft_rank(scores[None], groups=torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="groups must be an integer tensor"):
        soft_rank(scores, groups=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        soft_rank(torch.rand(2, 2, 2))
