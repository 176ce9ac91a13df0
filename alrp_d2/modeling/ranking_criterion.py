"""Ranking criteria: the classification-and-localisation losses a head is trained with, as plug-ins.

A criterion is registered in :data:`RANKING_CRITERION_REGISTRY` by its class name, which MODEL.ALRP.CRITERION selects.
Every head of the project (:class:`~alrp_d2.modeling.HeadRankingLoss`) asks its criterion three things, through one
interface and never by the criterion's name:

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

from typing import Any, ClassVar, Dict, NamedTuple, Protocol, Tuple, Type

from detectron2.config import CfgNode
from detectron2.utils.registry import Registry
from torch import Tensor

from ..config_check import require_config
from .ranking_targets import PositiveTargets, RowLabels, Targets

__all__ = [
    "RANKING_CRITERION_REGISTRY",
    "CriterionOutput",
    "PositiveSource",
    "RankingCriterion",
    "build_ranking_criterion",
    "ranking_criterion_class",
]

RANKING_CRITERION_REGISTRY = Registry("RANKING_CRITERION")
RANKING_CRITERION_REGISTRY.__doc__ = """
Ranking criteria (subclasses of :class:`RankingCriterion`), selected by class name with MODEL.ALRP.CRITERION.
The registered class is built as ``cls(**cls.from_config(cfg, delta=..., tau=...))``.
"""


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


def ranking_criterion_class(name: str, key: str = "MODEL.ALRP.CRITERION") -> Type[RankingCriterion]:
    """The criterion class registered as ``name``; a ValueError naming ``key`` and the registered names otherwise."""
    registered = tuple(sorted(name for name, _ in RANKING_CRITERION_REGISTRY))
    require_config(
        name in registered,
        key,
        name,
        f"must be a registered ranking criterion, one of {registered} (a criterion of your own module is registered "
        "when the module is imported: train_net.py --import MODULE imports it in every process)",
    )
    return RANKING_CRITERION_REGISTRY.get(name)


def build_ranking_criterion(cfg: CfgNode, *, delta_key: str = "DELTA", tau_key: str = "TAU") -> RankingCriterion:
    """The criterion MODEL.ALRP.CRITERION names, with a head's delta and tau (MODEL.ALRP.<delta_key>, <tau_key>):
    delta > 0, or >= 0 for a criterion that ``allows_unit_step``; tau in [0, 1)."""
    alrp = cfg.MODEL.ALRP
    criterion = ranking_criterion_class(alrp.CRITERION)
    delta = alrp[delta_key]
    number = isinstance(delta, (int, float)) and not isinstance(delta, bool)
    if criterion.allows_unit_step:
        require_config(number and delta >= 0, f"MODEL.ALRP.{delta_key}", delta, f"must be >= 0 with {alrp.CRITERION}")
    else:
        require_config(number and delta > 0, f"MODEL.ALRP.{delta_key}", delta, "must be > 0")
    tau = alrp[tau_key]
    require_config(0.0 <= tau < 1.0, f"MODEL.ALRP.{tau_key}", tau, "must be in [0, 1)")
    return criterion(**criterion.from_config(cfg, delta=float(delta), tau=tau))
