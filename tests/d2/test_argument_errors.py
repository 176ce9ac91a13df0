"""A head's ranking loss built in Python or from a LazyConfig names its own arguments; built from a yacs config,
the config keys (one check, the constructor's; ``naming_config_keys`` names the key)."""

import pickle

import pytest
from detectron2.config import CfgNode, configurable
from detectron2.modeling import build_model

from alrp_d2.checks.errors import ArgumentError, built_naming_config_keys, naming_config_keys, require_argument
from alrp_d2.criteria import AlrpCriterion, RankSortCriterion
from alrp_d2.modeling import HeadRankingLoss

from .tiny_configs import tiny_rank_sort_cfg


def head(criterion, **arguments):
    return HeadRankingLoss("box", criterion=criterion, **{"loc_weight": 1.0, "self_balanced": False, **arguments})


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"self_balanced": True}, r"HeadRankingLoss\['box'\]\(self_balanced=True\): RankSortCriterion balances"),
        ({"loc_weight": 0.0}, r"HeadRankingLoss\['box'\]\(loc_weight=0.0\): must be a number in \[1e-06, 10000\]"),
        ({"ranking": "all"}, r"HeadRankingLoss\['box'\]\(ranking='all'\): must be one of"),
    ],
)
def test_head_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        head(RankSortCriterion(delta=0.5, loc_error_kind="giou"), **arguments)


def test_balanced_tasks_need_a_criterion_that_balances_them():
    with pytest.raises(ValueError, match=r"\(balanced_tasks=\('mask',\)\): AlrpCriterion does not balance"):
        head(AlrpCriterion(delta=1.0, loc_error_kind="giou", tau=0.5), balanced_tasks=["mask"])


def test_the_yacs_config_names_its_keys():
    with pytest.raises(ValueError, match=r"MODEL.ALRP.SB_ENABLED=True: RankSortCriterion balances the localisation"):
        build_model(tiny_rank_sort_cfg(SB_ENABLED=True))
    with pytest.raises(ValueError, match=r"MODEL.ALRP.RPN_DELTA=-1.0: must be a number >= 1e-06 or 0"):
        build_model(tiny_rank_sort_cfg(RPN_DELTA=-1.0))


class Damped:
    """A constructor with one checked argument, built from a config through ``@configurable``."""

    @built_naming_config_keys({"factor": "MODEL.DAMPING.FACTOR"})
    @configurable
    def __init__(self, *, factor: float, name: str = "damped"):
        require_argument(0 < factor <= 1, "Damped", "factor", factor, "must be in (0, 1]")
        require_argument(name.isidentifier(), "Damped", "name", name, "must be an identifier")

    @classmethod
    def from_config(cls, cfg):
        return {"factor": cfg.MODEL.DAMPING.FACTOR, "name": cfg.MODEL.DAMPING.NAME}


def damping(factor, name="damped"):
    return CfgNode({"MODEL": {"DAMPING": {"FACTOR": factor, "NAME": name}}})


def test_an_argument_error_names_the_config_key_it_came_from():
    """Within ``naming_config_keys`` an argument it maps names its key and the config's value; another argument's
    error, and the same error outside, name the argument."""
    cfg = {"MODEL": {"ALRP": {"SB_INIT_WEIGHT": 0.0}}}
    with pytest.raises(ValueError, match=r"^Invalid config value MODEL.ALRP.SB_INIT_WEIGHT=0.0: must be a number in"):
        with naming_config_keys(cfg, {"loc_weight": "MODEL.ALRP.SB_INIT_WEIGHT"}):
            head(AlrpCriterion(delta=1.0, loc_error_kind="giou", tau=0.5), loc_weight=0.0)
    with pytest.raises(ArgumentError, match=r"^Invalid argument HeadRankingLoss\['box'\]\(ranking='all'\)"):
        with naming_config_keys(cfg, {"loc_weight": "MODEL.ALRP.SB_INIT_WEIGHT"}):
            head(AlrpCriterion(delta=1.0, loc_error_kind="giou", tau=0.5), ranking="all")
    error = ArgumentError("Damped", "factor", 2.0, "must be in (0, 1]")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)  # an error of a worker reaches the launcher


def test_a_configurable_constructor_names_the_keys_when_built_from_a_config():
    with pytest.raises(ValueError, match=r"^Invalid config value MODEL.DAMPING.FACTOR=2.0: must be in \(0, 1\]"):
        Damped(damping(2.0))
    with pytest.raises(ArgumentError, match=r"^Invalid argument Damped\(name='a b'\): must be an identifier"):
        Damped(damping(0.5, "a b"))
    with pytest.raises(ArgumentError, match=r"^Invalid argument Damped\(factor=2.0\)"):
        Damped(factor=2.0)
    Damped(damping(0.5))
