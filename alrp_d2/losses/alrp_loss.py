"""aLRP Loss (paper Sec. 4, Eq. 9-13; App. E Alg. 2)."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

from torch import Tensor

from .error_driven import (
    ErrorDrivenRankingLoss,
    check_hyperparameters,
    nan_unless_finite,
    output_dtype,
    zero_connected,
)
from .global_ranking import RankingGroup
from .ranking_inputs import RankingInputs, RankingSet, set_values
from .ranking_statistics import RankingStatistics
from .relation_sums import PositiveRanking

__all__ = ["AlrpLossTerms", "alrp_loss", "alrp_loss_indexed", "alrp_loss_sets", "alrp_loss_terms"]


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


def alrp_loss_indexed(
    logits: Tensor,
    positive_index: Tensor,
    loc_errors: Tensor,
    valid: Optional[Tensor] = None,
    delta: float = 1.0,
    eps: float = 1e-5,
    group: Optional[RankingGroup] = None,
    path: str = "auto",
) -> AlrpLossTerms:
    """aLRP Loss over one ranking of all positives and negatives.

    With ``rank``, ``N_FP`` and the smoothed ``H`` of App. E:

    * ``loss_cls = 1/|P| sum_i N_FP(i) / rank(i)`` (Eq. 11). Backpropagating it gives the
      logits the error-driven gradient of the whole aLRP Loss: ``l(i)`` of Eq. 10 with target
      ``l*(i) = E_loc(i) / rank(i)`` (Eq. 12, App. G), so positive ``i`` gets
      ``-(N_FP(i) + sum_{k != i} E_loc(k) H(x_ik)) / rank(i) / |P|`` (Eq. 13; docs/paper_notes.md,
      "Positive gradient") and the negatives share it through ``H(x_ij) / N_FP(i)`` (App. E lines 28-30).
    * ``loss_loc = 1/|P| sum_i (sum_{k: s_k >= s_i} E_loc(k)) / rank(i)`` with the unit-step
      cumulative sum of App. E line 14 (tied scores count together) and ``rank`` treated as a
      constant, so it carries the gradient to ``loc_errors`` only (App. F.1).

    The inputs are not validated (:func:`alrp_loss_terms` validates labels); a NaN or infinite
    logit makes ``loss_cls`` NaN and a NaN localisation error makes ``loss_loc`` NaN, without
    a host synchronisation. One synchronisation selects the relevant negatives.

    Args:
        logits: classification logits of any shape (M entries).
        positive_index: (P,) distinct indices of the positives into the flattened logits.
        loc_errors: (P,) differentiable, non-negative E_loc of the positives, in the order of
            ``positive_index`` (see :func:`alrp_d2.losses.loc_error`).
        valid: None, or a bool tensor broadcastable to ``logits.shape``: False for ignored
            examples (e.g. ``(anchors, 1)`` for (anchors, classes) logits).
        delta: smoothness of H.
        eps: positives with N_FP(i) < eps get no score gradient (App. E line 28).
        group: rank the examples of all workers of this group as one ranking (see
            :mod:`alrp_d2.losses.global_ranking`): every worker returns the global components,
            and its logits and ``loc_errors`` receive their gradients times the world size,
            so that DDP's average is the global gradient. None: this worker's examples.
        path: the implementation of the ranking statistics, ``"auto"`` (``scan`` on the CPU, ``dense`` on other
            devices), ``"scan"`` or ``"dense"`` (:mod:`alrp_d2.losses.ranking_path`; the same values either way).

    Without positives (of any worker) both components are zeros connected to their inputs' graphs.
    """
    check_hyperparameters(delta, eps)
    return _alrp_loss(RankingInputs.indexed(logits, positive_index, valid, group, path), loc_errors, delta, eps)


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


def alrp_loss_sets(
    sets: Sequence[RankingSet],
    delta: float = 1.0,
    eps: float = 1e-5,
    group: Optional[RankingGroup] = None,
    path: str = "auto",
) -> AlrpLossTerms:
    """:func:`alrp_loss_indexed` of every set of ``sets`` (their ``positive_values``: the E_loc of the positives).

    Every field of the result is (S,): each set's value of its own ranking, all sets ranked in one call
    (:mod:`alrp_d2.losses.segmented_path`; ``path`` as for :func:`alrp_loss_indexed`).
    """
    check_hyperparameters(delta, eps)
    inputs = RankingInputs.of_sets(sets, group, path)
    return _alrp_loss(inputs, set_values(sets, "localisation errors"), delta, eps)


def alrp_loss_terms(
    logits: Tensor,
    labels: Tensor,
    loc_errors: Tensor,
    delta: float = 1.0,
    eps: float = 1e-5,
    group: Optional[RankingGroup] = None,
    path: str = "auto",
) -> AlrpLossTerms:
    """:func:`alrp_loss_indexed` with ``labels`` (M,) 1 positive, 0 negative, -1 ignored, and the
    (P,) ``loc_errors`` of the positives in the order in which they appear in ``logits`` (M,).
    The inputs are validated: shapes, label values, non-finite logits or errors
    (:class:`~alrp_d2.losses.NonFiniteInputError`) and negative errors raise."""
    check_hyperparameters(delta, eps)
    return _alrp_loss(RankingInputs.labelled(logits, labels, loc_errors, group, path), loc_errors, delta, eps)


def alrp_loss(
    logits: Tensor, labels: Tensor, loc_errors: Tensor, delta: float = 1.0, eps: float = 1e-5, path: str = "auto"
) -> Tuple[Tensor, Tensor]:
    """aLRP Loss as ``(loss_cls, loss_loc)``; see :func:`alrp_loss_terms`."""
    terms = alrp_loss_terms(logits, labels, loc_errors, delta, eps, path=path)
    return terms.loss_cls, terms.loss_loc
