"""Straightforward transcriptions of App. E Algorithm 2 and of the official Rank & Sort Loss (a
Python loop over positives).

They are the reference the fast losses are tested and benchmarked against. Everything is
computed in float64. Where the paper contradicts itself, docs/paper_notes.md says what is
followed: the positive gradient uses the individual errors E_loc(k) weighted by the smoothed
step ("Positive gradient"), R_- comes from X_- ("R_- from X_-"), and the step-function
cumulative sum of line 14 counts tied positives together (H(x) = 1 for x >= 0, Sec. 2.1;
"Ties in the localisation cumulative sum"), which makes it independent of how a sort orders ties.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple, TypeVar

import torch
from torch import Tensor

Result = TypeVar("Result")
_REFERENCES: Dict[Tuple, Any] = {}


def cached_reference(key: Tuple, compute: Callable[[], Result]) -> Result:
    """``compute()`` (a loop transcription on a seeded case), computed once per ``key``: the tests that run on both
    paths of the losses compare them with the same reference, and the loops are slow."""
    if key not in _REFERENCES:
        _REFERENCES[key] = compute()
    return _REFERENCES[key]


def smooth_step(x: Tensor, delta: float) -> Tensor:
    """Eq. (14) of App. E."""
    return torch.clamp(x / (2 * delta) + 0.5, min=0, max=1)


def _positives_and_relevant_negatives(logits: Tensor, labels: Tensor, delta: float):
    """(scores, fg_mask, fg, bg_mask, bg): float64 scores, the positives and the negatives with
    s_j >= min positive score - delta (App. E lines 8-9)."""
    scores = logits.detach().double()
    fg_mask = labels == 1
    fg = scores[fg_mask]
    bg_mask = (labels == 0) & (scores >= fg.min() - delta)
    return scores, fg_mask, fg, bg_mask, scores[bg_mask]


def _logit_gradient(scores: Tensor, fg_mask: Tensor, bg_mask: Tensor, fg_grad: Tensor, bg_grad: Tensor) -> Tensor:
    """The gradient with respect to every logit, normalised by |P| (App. E lines 37-38)."""
    logits_grad = torch.zeros_like(scores)
    logits_grad[fg_mask] = fg_grad / fg_mask.sum()
    logits_grad[bg_mask] = bg_grad / fg_mask.sum()
    return logits_grad


def alrp_loss_loop(
    logits: Tensor, labels: Tensor, loc_errors: Tensor, delta: float = 1.0, eps: float = 1e-5
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns ``(loss_cls, loss_loc, d loss_cls / d logits, d loss_loc / d loc_errors)``."""
    scores, fg_mask, fg, bg_mask, bg = _positives_and_relevant_negatives(logits, labels, delta)
    errors = loc_errors.detach().double()
    num_fg = fg.numel()

    fg_grad = fg.new_zeros(num_fg)
    bg_grad = bg.new_zeros(bg.numel())
    rank = fg.new_zeros(num_fg)
    cls_error = fg.new_zeros(num_fg)
    cumsum_error = fg.new_zeros(num_fg)
    for i in range(num_fg):
        fg_relations = smooth_step(fg - fg[i], delta)  # lines 18-19
        fg_relations[i] = 0  # line 20
        bg_relations = smooth_step(bg - fg[i], delta)  # lines 21-22
        rank_pos = 1 + fg_relations.sum()  # line 23
        num_fp = bg_relations.sum()  # line 24
        rank[i] = rank_pos + num_fp  # line 25
        cls_error[i] = num_fp / rank[i]  # line 26
        cumsum_error[i] = errors[fg >= fg[i]].sum()  # line 14 with the unit step
        if num_fp >= eps:  # line 28
            fg_grad[i] = -(num_fp + (fg_relations * errors).sum()) / rank[i]  # line 29
            bg_grad += -fg_grad[i] * bg_relations / num_fp  # line 30

    logits_grad = _logit_gradient(scores, fg_mask, bg_mask, fg_grad, bg_grad)
    loss_cls = cls_error.mean()  # line 34
    loss_loc = (cumsum_error / rank).mean()  # line 35

    # d loss_loc / d E_loc(k) = 1/|P| sum_{i: s_k >= s_i} 1 / rank(i) (rank is a constant).
    errors_grad = torch.stack([(1.0 / rank[fg <= fg[k]]).sum() for k in range(num_fg)]) / num_fg
    return loss_cls, loss_loc, logits_grad, errors_grad


def ap_loss_loop(logits: Tensor, labels: Tensor, delta: float = 1.0, eps: float = 1e-5) -> Tuple[Tensor, Tensor]:
    """Non-interpolated AP Loss with l*(i) = 0: returns ``(loss, d loss / d logits)``."""
    scores, fg_mask, fg, bg_mask, bg = _positives_and_relevant_negatives(logits, labels, delta)
    num_fg = fg.numel()

    fg_grad = fg.new_zeros(num_fg)
    bg_grad = bg.new_zeros(bg.numel())
    errors = fg.new_zeros(num_fg)
    for i in range(num_fg):
        fg_relations = smooth_step(fg - fg[i], delta)
        fg_relations[i] = 0
        bg_relations = smooth_step(bg - fg[i], delta)
        num_fp = bg_relations.sum()
        rank = 1 + fg_relations.sum() + num_fp
        errors[i] = num_fp / rank
        if num_fp >= eps:
            fg_grad[i] = -errors[i]
            bg_grad += errors[i] * bg_relations / num_fp

    logits_grad = _logit_gradient(scores, fg_mask, bg_mask, fg_grad, bg_grad)
    return errors.mean(), logits_grad


def interpolated_ap_loss_loop(
    logits: Tensor, labels: Tensor, delta: float = 1.0, reverse_ties: bool = False
) -> Tuple[Tensor, Tensor]:
    """The official interpolated AP Loss (kemaloksuz/aLRPLoss, ``mmdet/models/losses/ap_loss.py``,
    ``APLoss.forward``): a loop over the positives in ascending score order that keeps the running
    maximum precision; no N_FP gate; the loss averages over every positive. Returns
    ``(loss, d loss / d logits)``. The official ``argsort`` leaves the order of tied positives
    unspecified: they are visited by index, or by reversed index with ``reverse_ties``."""
    scores, fg_mask, fg, bg_mask, bg = _positives_and_relevant_negatives(logits, labels, delta)
    num_fg = fg.numel()

    fg_grad = fg.new_zeros(num_fg)
    bg_grad = bg.new_zeros(bg.numel())
    precision = fg.new_zeros(num_fg)
    tie_sign = -1 if reverse_ties else 1
    max_precision = fg.new_zeros(())
    for i in sorted(range(num_fg), key=lambda k: (fg[k].item(), tie_sign * k)):
        fg_relations = smooth_step(fg - fg[i], delta)
        fg_relations[i] = 0
        bg_relations = smooth_step(bg - fg[i], delta)
        rank_positive = 1 + fg_relations.sum()
        rank = rank_positive + bg_relations.sum()
        current = rank_positive / rank
        if max_precision <= current:
            max_precision = current
            bg_grad += bg_relations / rank
        else:
            bg_grad += bg_relations / rank * (1 - max_precision) / (1 - current)
        fg_grad[i] = -(1 - max_precision)
        precision[i] = max_precision

    logits_grad = _logit_gradient(scores, fg_mask, bg_mask, fg_grad, bg_grad)
    return 1 - precision.mean(), logits_grad


def rank_sort_loss_loop(
    logits: Tensor, targets: Tensor, delta: float = 0.5, eps: float = 1e-10
) -> Tuple[Tensor, Tensor, Tensor]:
    """The official Rank & Sort Loss (kemaloksuz/RankSortLoss, ``mmdet/models/losses/ranking_losses.py``,
    ``RankSort.forward``): targets in (0, 1] positive, 0 negative, < 0 ignored; the positive itself
    counts in rank^+ with H(0) (0.5, or 1 with the unit step of ``delta = 0``); strict eps gates.
    Returns ``(ranking_loss, sorting_loss, d ranking_loss / d logits)``; the sorting loss has no
    gradient. The loop visits the positives by index (the official loop's score order changes
    nothing but the order of float additions)."""
    targets = targets.double()
    labels = torch.where(targets > 0, 1, torch.where(targets == 0, 0, -1))
    scores, fg_mask, fg, bg_mask, bg = _positives_and_relevant_negatives(logits, labels, delta)
    fg_targets = targets[fg_mask]
    num_fg = fg.numel()

    def relation(x: Tensor) -> Tensor:
        return smooth_step(x, delta) if delta > 0 else (x >= 0).double()

    fg_grad = fg.new_zeros(num_fg)
    bg_grad = bg.new_zeros(bg.numel())
    ranking_error = fg.new_zeros(num_fg)
    sorting_error = fg.new_zeros(num_fg)
    for i in range(num_fg):
        fg_relations = relation(fg - fg[i])
        bg_relations = relation(bg - fg[i])
        rank_pos = fg_relations.sum()
        num_fp = bg_relations.sum()
        ranking_error[i] = num_fp / (rank_pos + num_fp)
        current_sorting_error = (fg_relations * (1 - fg_targets)).sum() / rank_pos
        not_smaller = fg_targets >= fg_targets[i]
        target_relations = fg_relations * not_smaller
        target_sorting_error = (target_relations * (1 - fg_targets)).sum() / target_relations.sum()
        sorting_error[i] = current_sorting_error - target_sorting_error
        if num_fp > eps:
            fg_grad[i] -= ranking_error[i]
            bg_grad += bg_relations * ranking_error[i] / num_fp
        missorted = fg_relations * ~not_smaller
        sorting_pmf_denominator = missorted.sum()
        if sorting_pmf_denominator > eps:
            fg_grad[i] -= sorting_error[i]
            fg_grad += missorted * sorting_error[i] / sorting_pmf_denominator

    logits_grad = _logit_gradient(scores, fg_mask, bg_mask, fg_grad, bg_grad)
    return ranking_error.mean(), sorting_error.mean(), logits_grad
