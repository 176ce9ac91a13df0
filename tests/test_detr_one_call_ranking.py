"""``SetRankingLoss``: every set of a DETR step ranked by one criterion call (the segmented ranking) equals the sets
ranked one by one (a call a set), values and gradients in float64 to 1e-6, for each criterion, with decoder layers, a
denoising set, a set without a matched pair and a set without a query; a user's criterion that overrides ``__call__``
ranks every set; its outputs are checked."""

from __future__ import annotations

from typing import Dict, List

import pytest
import torch

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.criteria.output_check import CriterionOutputError
from alrp_d2.detr import SetRankingLoss, set_prediction_criterion

from .detr_step_cases import CRITERIA, step_sets
from .user_criteria import zeroed

#: The loss options each criterion is checked with (every box_terms mode is seen at least once).
OPTIONS = {
    "RankSortCriterion": [{}, {"box_terms": "own", "corr_weight": 0.5}, {"box_terms": "model"}],
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
    by_set = SetRankingLoss(set_prediction_criterion(name), **options)
    ours, theirs = leaves(sets), leaves(sets)
    terms = one_call(ours, first.targets)
    expected = [set_terms for s in theirs for set_terms in by_set([s], first.targets)]
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


def test_the_criterion_a_user_overrides_ranks_every_set_in_one_call():
    calls = []

    class Counted(RankSortCriterion):
        def __call__(self, sets, group):  # type: ignore[override]
            calls.append(len(sets))
            return super().__call__(sets, group)

    sets, first = step_sets(seed=1, num_targets=[2, 1])
    SetRankingLoss(Counted(loc_error_kind="giou"))(sets, first.targets)
    SetRankingLoss(Counted(loc_error_kind="giou"))(sets[:1], first.targets)
    assert calls == [len(sets), 1]
    stock = SetRankingLoss(RankSortCriterion(loc_error_kind="giou"))(sets, first.targets)
    zeroed_terms = SetRankingLoss(zeroed(RankSortCriterion(loc_error_kind="giou")))(sets, first.targets)
    assert float(stock[0]["loss_rank"]) > 0
    assert all(float(set_terms["loss_rank"]) == 0 for set_terms in zeroed_terms)
    assert float(zeroed_terms[0]["loss_bbox"]) == 0  # value-balanced to the zeroed ranking loss, as the stock one's


def test_a_bad_set_among_several_raises_naming_its_image():
    sets, first = step_sets(seed=1, num_targets=[2, 1])
    query, target = sets[1].indices[1]
    bad = sets[1]._replace(indices=[sets[1].indices[0], (torch.full_like(query, 12), target)])
    loss = SetRankingLoss(RankSortCriterion(loc_error_kind="giou"))
    with pytest.raises(ValueError, match=r"indices\[1\]: query index 12 out of range \[0, Q = 12\)"):
        loss([sets[0], bad, *sets[2:]], first.targets)
    repeated = sets[1]._replace(indices=[(query.repeat(2), target.repeat(2)) for query, target in sets[1].indices])
    with pytest.raises(ValueError, match=r"indices\[0\]: query \d+ is matched more than once"):
        loss([sets[0], repeated], first.targets)


def test_the_outputs_are_checked():
    class OneShort(RankSortCriterion):
        def __call__(self, sets, group):  # type: ignore[override]
            return super().__call__(sets, group)[:-1]

    sets, first = step_sets(seed=1, num_targets=[2, 1])
    with pytest.raises(CriterionOutputError, match=r"OneShort returned a list of 4 for 5 sets"):
        SetRankingLoss(OneShort(loc_error_kind="giou"))(sets, first.targets)

    class Detached(RankSortCriterion):
        def __call__(self, sets, group):  # type: ignore[override]
            return [output._replace(loss_cls=output.loss_cls.detach()) for output in super().__call__(sets, group)]

    class Vector(RankSortCriterion):
        def __call__(self, sets, group):  # type: ignore[override]
            return [output._replace(loss_cls=output.loss_cls.reshape(1)) for output in super().__call__(sets, group)]

    class Untyped(RankSortCriterion):
        def __call__(self, sets, group):  # type: ignore[override]
            return [output._replace(statistics={}) for output in super().__call__(sets, group)]

    with pytest.raises(CriterionOutputError, match="Detached returned loss_cls without a gradient"):
        SetRankingLoss(Detached(loc_error_kind="giou"))(leaves(sets), first.targets)
    with pytest.raises(CriterionOutputError, match=r"Vector returned loss_cls as a tensor of shape \(1,\)"):
        SetRankingLoss(Vector(loc_error_kind="giou"))(sets, first.targets)
    with pytest.raises(CriterionOutputError, match="Untyped returned statistics as a dict: it must be"):
        SetRankingLoss(Untyped(loc_error_kind="giou"))(sets, first.targets)
    assert SetRankingLoss(RankSortCriterion(loc_error_kind="giou"))([], first.targets) == []
