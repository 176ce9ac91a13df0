"""aLRP Loss (paper Sec. 4, Eq. 9-13; App. E Alg. 2)."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

from torch import Tensor

from .error_driven import (
    ErrorDrivenRankingLoss,
    check_hyperparameters,
    nan_unless_finite,
    output_dtype,
    zero_connected,
)
from .global_ranking import RankingGroup
from .ranking_inputs import AnySet, RankingInputs
from .ranking_statistics import RankingStatistics
from .relation_sums import PositiveRanking

__all__ = ["AlrpLossTerms", "alrp_loss"]


class AlrpLossTerms(NamedTuple):
    """The two components of aLRP Loss (Eq. 11) and the summed score-gradient magnitudes."""

    loss_cls: Tensor
    loss_loc: Tensor
    positive_gradient_magnitude: Tensor
    negative_gradient_magnitude: Tensor

    @property
    def statistics(self) -> RankingStatistics:
        """The step's record: ``cls`` and ``loc``."""
        return RankingStatistics.of(
            self.positive_gradient_magnitude, self.negative_gradient_magnitude, cls=self.loss_cls, loc=self.loss_loc
        )


def alrp_loss(
    sets: Sequence[AnySet],
    delta: float = 1.0,
    eps: float = 1e-5,
    group: Optional[RankingGroup] = None,
    path: str = "auto",
) -> AlrpLossTerms:
    """aLRP Loss of every set of ``sets``, each its own ranking of all its positives and negatives; every field of the
    result is (S,), one value a set. A set's ``positive_values`` are its positives' E_loc (:class:`RankingSet`: in the
    order of ``positive_index``; :class:`LabelledSet`: in the order in which they appear in its logits).

    With ``rank``, ``N_FP`` and the smoothed ``H`` of App. E, for each set:

    * ``loss_cls = 1/|P| sum_i N_FP(i) / rank(i)`` (Eq. 11). Backpropagating it gives the
      logits the error-driven gradient of the whole aLRP Loss: ``l(i)`` of Eq. 10 with target
      ``l*(i) = E_loc(i) / rank(i)`` (Eq. 12, App. G), so positive ``i`` gets
      ``-(N_FP(i) + sum_{k != i} E_loc(k) H(x_ik)) / rank(i) / |P|`` (Eq. 13; docs/paper_notes.md,
      "Positive gradient") and the negatives share it through ``H(x_ij) / N_FP(i)`` (App. E lines 28-30).
    * ``loss_loc = 1/|P| sum_i (sum_{k: s_k >= s_i} E_loc(k)) / rank(i)`` with the unit-step
      cumulative sum of App. E line 14 (tied scores count together) and ``rank`` treated as a
      constant, so it carries the gradient to the E_loc only (App. F.1).

    A :class:`RankingSet` is not validated: a NaN or infinite logit makes its ``loss_cls`` NaN and a NaN
    localisation error its ``loss_loc``, without a host synchronisation (one synchronisation selects the relevant
    negatives). A :class:`LabelledSet` is validated: shapes, label values, non-finite logits or errors
    (:class:`~alrp_d2.losses.NonFiniteInputError`) and negative errors raise.

    Args:
        sets: the rankings; one set is a list of one. Several sets are ranked in one call
            (:mod:`alrp_d2.losses.segmented_path`), no logit of one set compared with another's.
        delta: smoothness of H.
        eps: positives with N_FP(i) < eps get no score gradient (App. E line 28).
        group: rank the examples of all workers of this group as one ranking (see
            :mod:`alrp_d2.losses.global_ranking`): every worker returns the global components,
            and its logits and E_loc receive their gradients times the world size,
            so that DDP's average is the global gradient. None: this worker's examples.
        path: the implementation of the ranking statistics, ``"auto"`` (``scan`` on the CPU, ``dense`` on other
            devices), ``"scan"`` or ``"dense"`` (:mod:`alrp_d2.losses.ranking_path`; the same values either way).

    Without positives (of any worker) both components are zeros connected to their inputs' graphs.
    """
    check_hyperparameters(delta, eps)
    inputs, loc_errors = RankingInputs.of_sets(sets, group, path, "localisation errors")
    assert loc_errors is not None
    return _alrp_loss(inputs, loc_errors, delta, eps)


def _alrp_loss(inputs: RankingInputs, loc_errors: Tensor, delta: float, eps: float) -> AlrpLossTerms:
    logits = inputs.logits
    dtype = output_dtype(logits)

    def without_positives(zero: Tensor) -> AlrpLossTerms:
        loc_zero = inputs.path.zeros(zero_connected(loc_errors, dtype))
        return AlrpLossTerms(zero, loc_zero, zero.detach(), zero.detach())

    def from_ranking(ranking: PositiveRanking) -> AlrpLossTerms:
        sorted_errors = ranking.sorted_positive_values(loc_errors).double()
        num_false_positives, rank = ranking.num_false_positives, ranking.rank
        # l(i) - l*(i) = (N_FP(i) + E_loc(i) + sum_{k != i} E_loc(k) H(x_ik)) / rank(i) - E_loc(i) / rank(i)
        update = (num_false_positives + ranking.positive_relation_sum(sorted_errors.detach())) / rank
        loss_cls, positive_magnitude, negative_magnitude = ErrorDrivenRankingLoss.apply(
            logits, ranking, update, num_false_positives / rank, eps
        )
        # 1/|P| sum_i (sum_{k: s_k >= s_i} E_loc(k)) / rank(i) = 1/|P| sum_k E_loc(k) sum_{i: s_i <= s_k} 1 / rank(i)
        loss_loc = ranking.reduction.dot_mean(sorted_errors, ranking.at_or_below_sums(rank.reciprocal()))
        return AlrpLossTerms(
            nan_unless_finite(loss_cls, logits), loss_loc.to(dtype), positive_magnitude, negative_magnitude
        )

    return inputs.loss_terms(delta, loc_errors, without_positives, from_ranking)
