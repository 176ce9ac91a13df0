"""``SetRankingLoss.forward_sets``: every set of a DETR step ranked by one criterion call (the segmented ranking)
equals the sets ranked one by one through the criterion's own call, values and gradients in float64 to 1e-6, for
each criterion with a one-call variant, with decoder layers, a denoising set, a set without a matched pair and a set
without a query; a criterion without the variant is called once per set; its outputs are checked."""

from __future__ import annotations

from typing import Dict, List

import pytest
import torch

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.criteria.output_check import CriterionOutputError
from alrp_d2.detr import SetRankingLoss, set_prediction_criterion

from .detr_step_cases import CRITERIA, per_set, per_set_criterion, step_sets

#: The loss options each criterion is checked with (every box_terms mode but "model" is seen at least once).
OPTIONS = {
    "RankSortCriterion": [{}, {"box_terms": "own", "corr_weight": 0.5}],
    "AlrpCriterion": [{"box_terms": "own"}],
    "APCriterion": [{"box_terms": "fixed"}],
    "InterpolatedAPCriterion": [{"rank_weight": 2.0}],
}
CASES = [(name, options) for name in CRITERIA for options in OPTIONS[name]]


def leaves(sets):
    return [
        s._replace(logits=s.logits.clone().requires_grad_(True), pred_boxes=s.pred_boxes.clone().requires_grad_(True))
        for s in sets
    ]


def gradients(terms: List[Dict[str, torch.Tensor]], sets) -> List[torch.Tensor]:
    total = sum(value for set_terms in terms for value in set_terms.values())
    inputs = [tensor for s in sets for tensor in (s.logits, s.pred_boxes)]
    return list(torch.autograd.grad(total, inputs, allow_unused=True, materialize_grads=True))


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{i}" for n, o in OPTIONS.items() for i in range(len(o))])
@pytest.mark.parametrize("num_targets", [[3, 2, 0], [0, 0]], ids=["objects", "no_objects"])
def test_one_call_equals_the_sets_ranked_one_by_one(name, options, num_targets):
    sets, first = step_sets(seed=3, num_targets=num_targets)
    one_call = SetRankingLoss(set_prediction_criterion(name), **options)
    by_set = SetRankingLoss(per_set_criterion(name), **options)
    ours, theirs = leaves(sets), leaves(sets)
    terms = one_call.forward_sets(ours, first.targets)
    expected = [by_set(*s, first.targets) for s in theirs]
    assert [sorted(t) for t in terms] == [sorted(t) for t in expected]
    for set_terms, set_expected in zip(terms, expected):
        for key, value in set_expected.items():
            assert_close(set_terms[key], value)
    for actual, wanted in zip(gradients(terms, ours), gradients(expected, theirs)):
        assert_close(actual, wanted)
    statistics, expected_statistics = one_call.take_statistics(), by_set.take_statistics()
    assert statistics is not None and expected_statistics is not None
    assert sorted(statistics.values) == sorted(expected_statistics.values)
    for key, value in expected_statistics.values.items():
        assert_close(statistics.values[key], value)
    assert_close(statistics.positive_gradient_magnitude, expected_statistics.positive_gradient_magnitude)
    if sum(num_targets):
        assert float(terms[0]["loss_rank"].detach()) > 0 and float(terms[-1]["loss_rank"].detach()) > 0


def test_a_criterion_without_the_one_call_variant_is_called_once_per_set():
    calls = []

    class Counted(RankSortCriterion):
        def __call__(self, *args):  # type: ignore[override]
            calls.append(len(args[0]))
            return super().__call__(*args)

    sets, first = step_sets(seed=1, num_targets=[2, 1])
    SetRankingLoss(per_set(Counted(loc_error_kind="giou"))).forward_sets(sets, first.targets)
    assert len(calls) == len(sets)
    calls.clear()
    SetRankingLoss(Counted(loc_error_kind="giou")).forward_sets(sets, first.targets)
    assert calls == []


def test_the_one_call_outputs_are_checked():
    class OneShort(RankSortCriterion):
        def rank_sets(self, sets, group):  # type: ignore[override]
            return super().rank_sets(sets, group)[:-1]

    sets, first = step_sets(seed=1, num_targets=[2, 1])
    with pytest.raises(CriterionOutputError, match=r"OneShort returned a list of 4 from rank_sets of 5 sets"):
        SetRankingLoss(OneShort(loc_error_kind="giou")).forward_sets(sets, first.targets)

    class Detached(RankSortCriterion):
        def rank_sets(self, sets, group):  # type: ignore[override]
            return [output._replace(loss_cls=output.loss_cls.detach()) for output in super().rank_sets(sets, group)]

    with pytest.raises(CriterionOutputError, match="Detached returned loss_cls without a gradient"):
        SetRankingLoss(Detached(loc_error_kind="giou")).forward_sets(leaves(sets), first.targets)
    assert SetRankingLoss(RankSortCriterion(loc_error_kind="giou")).forward_sets([], first.targets) == []
