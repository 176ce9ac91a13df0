"""Self-balance (paper Sec. 4.2, App. F.3): arithmetic on known per-step values, exact resume, and
the statistics the hook logs."""

from types import SimpleNamespace

import pytest
import torch
from detectron2.utils.events import EventStorage
from torch import nn

from alrp_d2.criteria import AlrpCriterion
from alrp_d2.engine.self_balance import SelfBalanceHook, self_balanced_weight
from alrp_d2.losses import RankingStatistics
from alrp_d2.modeling import HeadRankingLoss

# (L_cls, L_loc) of two heads at iterations 0..6.
VALUES = {
    "retinanet": [(0.9, 0.05), (0.8, 0.10), (0.7, 0.15), (0.6, 0.20), (0.5, 0.25), (0.4, 0.30), (0.3, 0.35)],
    "rpn": [(0.5, 0.5), (0.4, 0.4), (0.3, 0.1), (0.2, 0.2), (0.1, 0.3), (0.2, 0.4), (0.3, 0.5)],
}


class ScriptedLoss(HeadRankingLoss):
    """A head's ranking loss whose statistics are given values (gradient magnitudes 2 and 3)."""

    def __init__(self, name: str, self_balanced: bool):
        super().__init__(
            name,
            criterion=AlrpCriterion(delta=1.0, loc_error_kind="giou", tau=0.5),
            loc_weight=50.0,
            self_balanced=self_balanced,
        )
        self.iteration = 0

    def take_statistics(self):
        cls_value, loc_value = VALUES[self.name][self.iteration]
        return RankingStatistics.of(
            torch.tensor(2.0),
            torch.tensor(3.0),
            cls=torch.tensor(cls_value),
            loc=torch.tensor(loc_value),
            logit_min=torch.tensor(-4.0),
            logit_max=torch.tensor(3.0),
        )


class TwoHeads(nn.Module):
    def __init__(self, self_balanced=True):
        super().__init__()
        self.first = ScriptedLoss("retinanet", self_balanced)
        self.second = ScriptedLoss("rpn", self_balanced)


def run(hook, model, storage, iterations):
    hook.trainer = SimpleNamespace(model=model, storage=storage, iter=0)
    hook.before_train()
    weights = []
    for iteration in iterations:
        hook.trainer.iter = iteration
        storage.iter = iteration
        model.first.iteration = model.second.iteration = iteration
        hook.after_step()
        weights.append({loss.name: loss.loc_weight.item() for loss in (model.first, model.second)})
    return weights


def expected_weight(name, start, stop):
    cls_sum = sum(v[0] for v in VALUES[name][start:stop])
    loc_sum = sum(v[1] for v in VALUES[name][start:stop])
    return (cls_sum + loc_sum) / loc_sum


def test_weight_is_ratio_of_period_means():
    assert self_balanced_weight(3.0, 1.0, 50.0) == 4.0
    assert self_balanced_weight(2.0, 0.0, 7.5) == 7.5  # no localisation loss: keep the weight


def test_hook_closes_periods_on_known_values():
    model, hook = TwoHeads(), SelfBalanceHook(period=3)
    with EventStorage() as storage:
        weights = run(hook, model, storage, range(7))
        logged = storage.history("sb/retinanet/weight").values()
        components = storage.history("sb/rpn/loc").values()
        ratios = storage.history("rpn/grad_ratio").values()
    for name in VALUES:
        assert [w[name] for w in weights[:2]] == [50.0, 50.0]
        assert weights[2][name] == pytest.approx(expected_weight(name, 0, 3))
        assert weights[4][name] == pytest.approx(expected_weight(name, 0, 3))
        assert weights[5][name] == pytest.approx(expected_weight(name, 3, 6))
    assert [value for value, _ in logged] == pytest.approx([w["retinanet"] for w in weights])
    assert [value for value, _ in components] == pytest.approx([loc for _, loc in VALUES["rpn"]])
    assert [value for value, _ in ratios] == pytest.approx([1.5] * 7)


def test_resume_mid_period_reproduces_uninterrupted_run():
    with EventStorage() as storage:
        uninterrupted = run(SelfBalanceHook(period=3), TwoHeads(), storage, range(7))
    first_hook, first_model = SelfBalanceHook(period=3), TwoHeads()
    with EventStorage() as storage:
        run(first_hook, first_model, storage, range(4))
    state = first_hook.state_dict()
    assert state["sums"]["retinanet"][1] == pytest.approx(VALUES["retinanet"][3][1])
    resumed_hook, resumed_model = SelfBalanceHook(period=3), TwoHeads()
    resumed_model.load_state_dict(first_model.state_dict())  # the weights are buffers of the model
    resumed_hook.load_state_dict(state)
    with EventStorage(start_iter=4) as storage:
        resumed = run(resumed_hook, resumed_model, storage, range(4, 7))
    for after_resume, without_stop in zip(resumed, uninterrupted[4:]):
        assert after_resume == pytest.approx(without_stop)


def test_constant_weights_are_left_alone_and_keep_the_config_value():
    model, hook = TwoHeads(self_balanced=False), SelfBalanceHook(period=2)
    with EventStorage() as storage:
        weights = run(hook, model, storage, range(4))
        assert "sb/rpn/cls" in storage.latest() and "sb/rpn/weight" not in storage.latest()
    assert all(w == {"retinanet": 50.0, "rpn": 50.0} for w in weights)
    balanced = TwoHeads()
    balanced.first.set_loc_weight(3.0)
    model.load_state_dict(balanced.state_dict())
    assert model.first.loc_weight.item() == 50.0


def test_logging_only_without_a_period():
    model, hook = TwoHeads(), SelfBalanceHook(period=None)
    with EventStorage() as storage:
        weights = run(hook, model, storage, range(3))
        assert storage.latest()["sb/retinanet/cls"][0] == pytest.approx(VALUES["retinanet"][2][0])
    assert all(w == {"retinanet": 50.0, "rpn": 50.0} for w in weights)


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="period"):
        SelfBalanceHook(period=0)
