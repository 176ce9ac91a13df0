"""The criteria built in Python (or from a LazyConfig) name the argument that is wrong, not a yacs key."""

import pytest

from alrp_d2.criteria import AlrpCriterion, APCriterion, CorrelationTerm, RankSortCriterion

CASES = [
    (
        lambda: AlrpCriterion(delta=0.0, loc_error_kind="giou", tau=0.5),
        r"AlrpCriterion\(delta=0.0\): must be a number >= 1e-06",
    ),
    (lambda: AlrpCriterion(delta=1.0, loc_error_kind="l1", tau=0.5), r"AlrpCriterion\(loc_error_kind='l1'\)"),
    (lambda: AlrpCriterion(delta=1.0, loc_error_kind="giou", tau=1.0), r"AlrpCriterion\(tau=1.0\): must be a"),
    (
        lambda: APCriterion(delta=1.0, loc_loss="l2", loc_error_kind="giou", tau=0.5),
        r"APCriterion\(loc_loss='l2'\): must be one of \('giou', 'smooth_l1'\)",
    ),
    (
        lambda: RankSortCriterion(delta=-0.5, loc_error_kind="giou"),
        r"RankSortCriterion\(delta=-0.5\): must be a number >= 1e-06 or 0",
    ),
    (lambda: CorrelationTerm("kendall", 0.1), r"CorrelationTerm\(kind='kendall'\)"),
]


@pytest.mark.parametrize("build, message", CASES)
def test_a_bad_argument_is_named(build, message):
    with pytest.raises(ValueError, match=message) as error:
        build()
    assert "MODEL." not in str(error.value)


def test_rank_sort_takes_the_unit_step():
    assert RankSortCriterion(delta=0.0, loc_error_kind="iou").delta == 0.0
