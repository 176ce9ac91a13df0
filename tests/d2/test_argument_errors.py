"""A head's ranking loss built in Python or from a LazyConfig names its own arguments; built from a yacs config,
the config keys."""

import pytest
from detectron2.modeling import build_model

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
    with pytest.raises(ValueError, match=r"MODEL.ALRP.SB_ENABLED=True: must be False with MODEL.ALRP.CRITERION"):
        build_model(tiny_rank_sort_cfg(SB_ENABLED=True))
    with pytest.raises(ValueError, match=r"MODEL.ALRP.RPN_DELTA=-1.0: must be a number >= 1e-06 or 0"):
        build_model(tiny_rank_sort_cfg(RPN_DELTA=-1.0))
