"""Self-balance (paper Sec. 4.2, App. F.3): arithmetic on known storage values and exact resume."""

from types import SimpleNamespace

import pytest
from detectron2.utils.events import EventStorage
from torch import nn

from alrp_d2.engine.self_balance import LocalisationWeight, SelfBalanceHook, self_balanced_weight
from alrp_d2.modeling import DetectionRankingLoss

# (L_cls, L_loc) written by two heads at iterations 0..6.
VALUES = {
    "alrp": [(0.9, 0.05), (0.8, 0.10), (0.7, 0.15), (0.6, 0.20), (0.5, 0.25), (0.4, 0.30), (0.3, 0.35)],
    "rpn_alrp": [(0.5, 0.5), (0.4, 0.4), (0.3, 0.1), (0.2, 0.2), (0.1, 0.3), (0.2, 0.4), (0.3, 0.5)],
}


class TwoHeads(nn.Module):
    def __init__(self, self_balanced=True):
        super().__init__()
        self.first = nn.Module()
        self.second = nn.Module()
        for module, name in ((self.first, "alrp"), (self.second, "rpn_alrp")):
            module.ranking_loss = DetectionRankingLoss(
                name=name, cls_loss="alrp", delta=1.0, loc_weight=LocalisationWeight(name, 50.0, self_balanced)
            )


def run(hook, model, storage, iterations):
    hook.trainer = SimpleNamespace(model=model, storage=storage, iter=0)
    hook.before_train()
    weights = []
    for iteration in iterations:
        hook.trainer.iter = iteration
        storage.iter = iteration
        for name, values in VALUES.items():
            cls_value, loc_value = values[iteration]
            storage.put_scalars(**{f"sb/{name}/cls": cls_value, f"sb/{name}/loc": loc_value})
        hook.after_step()
        weights.append(
            {name: w.ranking_loss.loc_weight.value for name, w in (("alrp", model.first), ("rpn_alrp", model.second))}
        )
    return weights


def expected_weight(name, start, stop):
    cls_sum = sum(v[0] for v in VALUES[name][start:stop])
    loc_sum = sum(v[1] for v in VALUES[name][start:stop])
    return (cls_sum + loc_sum) / loc_sum


def test_weight_is_ratio_of_period_means():
    assert self_balanced_weight(3.0, 1.0, 50.0) == 4.0
    assert self_balanced_weight(2.0, 0.0, 7.5) == 7.5  # no localisation loss: keep the weight


def test_hook_closes_periods_on_known_storage_values():
    model, hook = TwoHeads(), SelfBalanceHook(period=3)
    with EventStorage() as storage:
        weights = run(hook, model, storage, range(7))
        logged = storage.history("sb/alrp/weight").values()
    for name in VALUES:
        assert [w[name] for w in weights[:2]] == [50.0, 50.0]
        assert weights[2][name] == pytest.approx(expected_weight(name, 0, 3))
        assert weights[4][name] == pytest.approx(expected_weight(name, 0, 3))
        assert weights[5][name] == pytest.approx(expected_weight(name, 3, 6))
    assert [value for value, _ in logged] == [w["alrp"] for w in weights]


def test_resume_mid_period_reproduces_uninterrupted_run():
    with EventStorage() as storage:
        uninterrupted = run(SelfBalanceHook(period=3), TwoHeads(), storage, range(7))
    first_hook = SelfBalanceHook(period=3)
    with EventStorage() as storage:
        run(first_hook, TwoHeads(), storage, range(4))
    state = first_hook.state_dict()
    assert state["heads"]["alrp"]["sum_loc"] == pytest.approx(VALUES["alrp"][3][1])
    resumed_hook = SelfBalanceHook(period=3)
    resumed_hook.load_state_dict(state)
    with EventStorage(start_iter=4) as storage:
        resumed = run(resumed_hook, TwoHeads(), storage, range(4, 7))
    for after_resume, without_stop in zip(resumed, uninterrupted[4:]):
        assert after_resume == pytest.approx(without_stop)


def test_constant_weights_are_left_alone():
    model, hook = TwoHeads(self_balanced=False), SelfBalanceHook(period=2)
    with EventStorage() as storage:
        weights = run(hook, model, storage, range(4))
    assert all(w == {"alrp": 50.0, "rpn_alrp": 50.0} for w in weights)


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="period"):
        SelfBalanceHook(period=0)
