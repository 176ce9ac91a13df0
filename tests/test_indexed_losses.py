"""The ranking losses of a `RankingSet` (the positives' flat indices and a validity mask, as the
detection heads give them) against a `LabelledSet` and the loop transcription: any order of the
positives, (rows, classes) logits with per-row validity, float64 chunks, non-finite logits."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.losses import LabelledSet, RankingSet, alrp_loss, ap_loss, negative_scan, rank_sort_loss

from .host_syncs import HostSyncCounter
from .loop_reference import alrp_loss_loop, ap_loss_loop, rank_sort_loss_loop
from .ranking_cases import TOLERANCE, assert_relative, only_set

NUM_CLASSES = 4


def detection_case(seed: int, dtype: torch.dtype):
    """(rows, K) logits, per-row labels (class, K background, -1 ignored) and the matching
    (M,) ranking labels; the logits sit on a coarse grid on some seeds (ties)."""
    gen = torch.Generator().manual_seed(seed)
    rows = int(torch.randint(3, 120, (1,), generator=gen))
    logits = torch.randn(rows, NUM_CLASSES, generator=gen, dtype=torch.float64)
    if seed % 2:
        logits = torch.round(logits * 2) / 2
    row_labels = torch.randint(-1, NUM_CLASSES + 1, (rows,), generator=gen)
    row_labels[0] = int(torch.randint(0, NUM_CLASSES, (1,), generator=gen))
    labels = torch.where(row_labels[:, None] < 0, -1, 0).expand(rows, NUM_CLASSES).clone()
    positive_rows = torch.nonzero((row_labels >= 0) & (row_labels < NUM_CLASSES)).squeeze(1)
    labels[positive_rows, row_labels[positive_rows]] = 1
    return logits.to(dtype), row_labels, labels.flatten()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", range(12))
def test_indexed_equals_labels_whatever_the_order_of_the_positives(seed, dtype, ranking_path):
    logits, row_labels, labels = detection_case(seed, dtype)
    gen = torch.Generator().manual_seed(100 + seed)
    flat_positives = torch.nonzero(labels == 1).squeeze(1)  # a labelled set's order
    errors = torch.rand(len(flat_positives), generator=gen, dtype=torch.float64).to(dtype)
    order = torch.randperm(len(flat_positives), generator=gen)

    by_labels = logits.flatten().clone().requires_grad_(True)
    errors_labels = errors.clone().requires_grad_(True)
    expected = only_set(alrp_loss([LabelledSet(by_labels, labels, errors_labels)], delta=0.5, path=ranking_path))
    expected_grads = torch.autograd.grad(expected.loss_cls + expected.loss_loc, [by_labels, errors_labels])

    by_index = logits.clone().requires_grad_(True)
    errors_index = errors[order].clone().requires_grad_(True)
    valid = (row_labels >= 0)[:, None]
    terms = only_set(
        alrp_loss([RankingSet(by_index, flat_positives[order], errors_index, valid)], delta=0.5, path=ranking_path)
    )
    grads = torch.autograd.grad(terms.loss_cls + terms.loss_loc, [by_index, errors_index])

    for actual, reference in zip(terms, expected):
        assert_relative(actual, reference, TOLERANCE[dtype])
    assert grads[0].shape == logits.shape
    assert_relative(grads[0].flatten(), expected_grads[0], TOLERANCE[dtype])
    assert_relative(grads[1], expected_grads[1][order], TOLERANCE[dtype])

    for interpolated in (False, True):
        by_labels = logits.flatten().clone().requires_grad_(True)
        ap = only_set(ap_loss([LabelledSet(by_labels, labels)], eps=None, interpolated=interpolated, path=ranking_path))
        by_index = logits.clone().requires_grad_(True)
        indexed = only_set(
            ap_loss(
                [RankingSet(by_index, flat_positives[order], None, valid)],
                eps=None,
                interpolated=interpolated,
                path=ranking_path,
            )
        )
        assert_relative(indexed.loss, ap.loss, TOLERANCE[dtype])
        (grad,) = torch.autograd.grad(indexed.loss, [by_index])
        (expected_grad,) = torch.autograd.grad(ap.loss, [by_labels])
        assert_relative(grad.flatten(), expected_grad, TOLERANCE[dtype])


@pytest.mark.parametrize("seed", range(6))
def test_negatives_in_many_float64_chunks_equal_the_loop(seed, monkeypatch, ranking_path):
    """The relevant negatives are turned into float64 a chunk at a time: tiny chunks give the
    loop transcription's values and gradients."""
    monkeypatch.setattr(negative_scan, "CHUNK", 7)
    monkeypatch.setattr(negative_scan, "DENSE_CHUNK", 7)
    logits, _, labels = detection_case(seed, torch.float64)
    logits = logits.flatten()
    errors = torch.rand(int((labels == 1).sum()), dtype=torch.float64)
    leaf = logits.clone().requires_grad_(True)
    terms = only_set(alrp_loss([LabelledSet(leaf, labels, errors)], delta=1.0, path=ranking_path))
    (grad,) = torch.autograd.grad(terms.loss_cls, [leaf])
    loss_cls, loss_loc, loop_grad, _ = alrp_loss_loop(logits, labels, errors, delta=1.0)
    assert_relative(terms.loss_cls, loss_cls, 1e-6)
    assert_relative(terms.loss_loc, loss_loc, 1e-6)
    assert_relative(grad, loop_grad, 1e-6)
    loss, loop_grad = ap_loss_loop(logits, labels, delta=1.0)
    leaf = logits.clone().requires_grad_(True)
    ap = only_set(ap_loss([LabelledSet(leaf, labels)], delta=1.0, path=ranking_path))
    (grad,) = torch.autograd.grad(ap.loss, [leaf])
    assert_relative(ap.loss, loss, 1e-6)
    assert_relative(grad, loop_grad, 1e-6)


INDEXED_LOSSES = ("alrp", "ap", "rank_sort")


def indexed_loss(name: str, logits: torch.Tensor, positives: torch.Tensor, path: str) -> torch.Tensor:
    """The ranking loss ``name`` of one ``RankingSet`` (its classification / ranking component)."""
    errors = torch.rand(len(positives))
    if name == "alrp":
        return only_set(alrp_loss([RankingSet(logits, positives, errors)], path=path)).loss_cls
    if name == "ap":
        return only_set(ap_loss([RankingSet(logits, positives, None)], path=path)).loss
    return only_set(rank_sort_loss([RankingSet(logits, positives, errors)], path=path)).ranking_loss


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_logits_make_the_indexed_losses_nan(bad, ranking_path):
    """No validation of a ``RankingSet`` (on the scan path one host synchronisation: the search steps of the
    negatives' gap lookup; none on the dense path): a non-finite logit, of a positive or a negative, gives a NaN
    loss, which stops a training loop."""
    for position in (0, 5):
        logits = torch.randn(6, 3)
        logits.view(-1)[position] = bad
        positives = torch.tensor([0, 7])
        for name in INDEXED_LOSSES:
            with HostSyncCounter() as syncs:
                value = indexed_loss(name, logits, positives, ranking_path)
            assert torch.isnan(value), name
            assert syncs.total() == {"scan": 1, "dense": 0}[ranking_path], (name, syncs.by_operation)


def test_no_positive_gives_connected_zeros():
    logits = torch.randn(5, 3, requires_grad=True)
    errors = torch.zeros(0, requires_grad=True)
    terms = only_set(
        alrp_loss([RankingSet(logits, torch.zeros(0, dtype=torch.long), errors, torch.ones(5, 1, dtype=torch.bool))])
    )
    (terms.loss_cls + terms.loss_loc).backward()
    assert terms.loss_cls.item() == 0 and torch.all(logits.grad == 0)


@pytest.mark.parametrize("delta", [0.5, 0.0])
@pytest.mark.parametrize("seed", range(6))
def test_rank_sort_indexed_equals_targets_whatever_the_order_of_the_positives(seed, delta, monkeypatch, ranking_path):
    """Also with the negatives in many float64 chunks; the unit step (delta 0) places a negative
    equal to a positive's score above it, also after the edges are rounded to float32."""
    monkeypatch.setattr(negative_scan, "CHUNK", 5)
    monkeypatch.setattr(negative_scan, "DENSE_CHUNK", 5)
    logits, row_labels, labels = detection_case(seed, torch.float32)
    gen = torch.Generator().manual_seed(200 + seed)
    flat_positives = torch.nonzero(labels == 1).squeeze(1)
    ious = torch.rand(len(flat_positives), generator=gen).clamp_min(0.05)
    ious[: len(ious) // 2] = 0.5  # equal targets
    targets = labels.to(torch.float32).clamp(max=0)
    targets[flat_positives] = ious
    order = torch.randperm(len(flat_positives), generator=gen)

    leaf = logits.flatten().clone().requires_grad_(True)
    expected = only_set(rank_sort_loss([LabelledSet(leaf, targets)], delta=delta, path=ranking_path))
    (expected_grad,) = torch.autograd.grad(expected.ranking_loss, [leaf])
    leaf = logits.clone().requires_grad_(True)
    valid = (row_labels >= 0)[:, None]
    terms = only_set(
        rank_sort_loss([RankingSet(leaf, flat_positives[order], ious[order], valid)], delta=delta, path=ranking_path)
    )
    (grad,) = torch.autograd.grad(terms.ranking_loss, [leaf])
    assert_relative(terms.ranking_loss, expected.ranking_loss, 1e-5)
    assert_relative(terms.sorting_loss, expected.sorting_loss, 1e-5)
    assert_relative(grad.flatten(), expected_grad, 1e-5)
    loop_ranking, loop_sorting, loop_grad = rank_sort_loss_loop(logits.flatten(), targets, delta=delta)
    assert_relative(terms.ranking_loss, loop_ranking, 1e-5)
    assert_relative(terms.sorting_loss, loop_sorting, 1e-5)
    assert_relative(grad.flatten(), loop_grad, 1e-5)
