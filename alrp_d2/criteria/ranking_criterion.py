"""Ranking criteria: the classification-and-localisation losses a head is trained with, as plug-ins.

A criterion is registered in :data:`RANKING_CRITERION_REGISTRY` by its class name, which MODEL.ALRP.CRITERION selects.
Every head of the project (:class:`~alrp_d2.modeling.HeadRankingLoss`) asks its criterion three things, through one
interface and never by the criterion's name (this package imports no detectron2):

1. :meth:`RankingCriterion.targets`: the positives of the ranking from the head's row labels, reading of the head's
   boxes what the criterion needs (:class:`PositiveSource`);
2. :meth:`RankingCriterion.localisation_losses`: the per-positive localisation loss (E_loc of the decoded boxes,
   an encoded-delta loss, 1 - GIoU, or nothing);
3. :meth:`RankingCriterion.__call__`: the loss of the ranking and of the localisation, unweighted, with the
   statistics the self-balance hook logs (:class:`CriterionOutput`).

Balancing is the criterion's too: a criterion with ``value_balanced`` False has its localisation loss weighted by
the head's localisation weight (self-balanced or constant); one with ``value_balanced`` True returns the factor that
balances it by the loss values of the step (Rank & Sort Loss), which the head also applies to its other tasks.

"Write your own criterion" in docs/criteria.md shows a criterion registered from a user's module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Dict, NamedTuple, Protocol, Tuple

from torch import Tensor

from .targets import PositiveTargets, RowLabels, Targets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["CriterionOutput", "PositiveSource", "PositiveTerm", "RankingCriterion"]


class PositiveSource(Protocol):
    """What a head knows of the boxes of its rows (an (image, anchor) pair of a dense head, a proposal of a box
    head), read by the criteria and the additive terms for the positives they choose."""

    def decoded_boxes(self, positives: PositiveTargets) -> Tuple[Tensor, Tensor]:
        """(P, 4) the positives' predicted boxes (differentiable) and (P, 4) their localisation targets."""
        ...

    def encoded_box_loss(self, positives: PositiveTargets) -> Tensor:
        """(P,) the head's loss of the positives' encoded deltas (Smooth L1, averaged over the four)."""
        ...

    def row_overlaps(self) -> Tensor:
        """(rows,) the IoU of every row's predicted box with its matched box, detached (any value for the rows
        that are not positive)."""
        ...

    @property
    def num_levels(self) -> int:
        """The number of pyramid levels of the rows (1 for a head without levels)."""
        ...

    def levels(self, positives: PositiveTargets) -> Tensor:
        """(P,) the pyramid level of each positive, in [0, num_levels)."""
        ...


class PositiveTerm(Protocol):
    """A loss added to a head's ranking loss, computed on its positives (Correlation Loss,
    :class:`~alrp_d2.criteria.CorrelationTerm`): ``loss_<head>_<name>``."""

    name: str

    def __call__(self, logits: Tensor, positives: PositiveTargets, source: PositiveSource, group: Any) -> Tensor:
        """The weighted term from the (rows, K) logits, the head's positives and its boxes."""
        ...


class CriterionOutput(NamedTuple):
    """One step of a criterion on one head, unweighted.

    Attributes:
        loss_cls: the ranking loss; its gradient is the criterion's update of the logits.
        loss_loc: the localisation loss.
        loc_factor: the factor of ``loss_loc`` on top of the head's localisation weight: 1, or with a
            ``value_balanced`` criterion its balancing coefficient of this step (detached).
        positive_gradient_magnitude, negative_gradient_magnitude: the summed magnitudes of the positives' and the
            negatives' score gradients (their ratio is aLRP paper Fig. 3).
        components: further named values of the step, in the order of :attr:`RankingCriterion.component_names`.
    """

    loss_cls: Tensor
    loss_loc: Tensor
    loc_factor: Tensor
    positive_gradient_magnitude: Tensor
    negative_gradient_magnitude: Tensor
    components: Tuple[Tuple[str, Tensor], ...] = ()


class RankingCriterion:
    """Base class of the ranking criteria. A subclass is registered in :data:`RANKING_CRITERION_REGISTRY`, takes
    its hyperparameters as keyword arguments, reads them from a config in ``from_config(cfg, delta=..., tau=...)``
    (the head's delta and tau: MODEL.ALRP.DELTA and TAU, or the RPN's) and implements :meth:`localisation_losses` and
    :meth:`__call__`; :meth:`targets` defaults to the labelled positives."""

    #: Whether delta may be 0 (the unit step) in the configs (MODEL.ALRP.DELTA, RPN_DELTA).
    allows_unit_step: ClassVar[bool] = False
    #: Whether the criterion balances the localisation loss (and a head's other tasks) by the loss values of every
    #: step, instead of the head's self-balanced or constant localisation weight.
    value_balanced: ClassVar[bool] = False
    #: The names of :attr:`CriterionOutput.components`, logged as ``sb/<head>/<name>``.
    component_names: ClassVar[Tuple[str, ...]] = ()

    def __init__(self, *, delta: float):
        """
        Args:
            delta: smoothness of the step function of the ranking.
        """
        self.delta = delta

    @classmethod
    def from_config(cls, cfg: CfgNode, *, delta: float, tau: float) -> Dict[str, Any]:
        return {"delta": delta}

    def targets(self, rows: RowLabels, source: PositiveSource) -> Targets:
        """The positives of the ranking (and of the localisation loss: ``targets.box``) from the head's labels."""
        return PositiveTargets.of_rows(rows)

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        """(P,) the differentiable localisation loss of each of ``positives`` (the ``box`` positives of
        :meth:`targets`), in their order."""
        raise NotImplementedError

    def __call__(self, logits: Tensor, targets: Targets, loc_losses: Tensor, group: Any) -> CriterionOutput:
        """
        Args:
            logits: (rows, K) logits of every (row, class) pair of the batch.
            targets: what :meth:`targets` returned.
            loc_losses: what :meth:`localisation_losses` returned.
            group: the :class:`~alrp_d2.losses.RankingGroup` of a global ranking, or None.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({settings})"
