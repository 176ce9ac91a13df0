"""Ranking criteria: the classification-and-localisation losses a head is trained with, as plug-ins.

A criterion is registered in :data:`RANKING_CRITERION_REGISTRY` by its class name, which MODEL.ALRP.CRITERION selects.
Every head of the project (:class:`~alrp_d2.modeling.HeadRankingLoss`) asks its criterion three things, through one
interface and never by the criterion's name (this package imports no detectron2):

1. :meth:`RankingCriterion.targets`: the positives of the ranking from the head's row labels, reading of the head's
   boxes what the criterion needs (:class:`PositiveSource`);
2. :meth:`RankingCriterion.localisation_losses`: the per-positive localisation loss (E_loc of the decoded boxes,
   an encoded-delta loss, 1 - GIoU, or nothing);
3. :meth:`RankingCriterion.__call__`: for every set it is given (:class:`CriterionSet`, one ranking each), the loss of
   the ranking and of the localisation, unweighted, with the statistics the self-balance hook logs
   (:class:`CriterionOutput`).

The one ranking method, :meth:`RankingCriterion.__call__`, is the one every path calls and the one a user's criterion
overrides: a detection head passes one set (its batch; RS Mask R-CNN's mask loss reads the box head's output), a
DETR step all its sets (every decoder layer, denoising set and the encoder's proposals, each its own ranking), which
aLRP, AP and Rank & Sort Loss rank in one call of the segmented ranking (:func:`alrp_d2.losses.rank_sort_loss`). Every
caller checks its output (:mod:`.output_check`).

Balancing is the criterion's too: the head weights the localisation loss by its localisation weight (self-balanced
or constant) times the criterion's ``loc_factor`` of the step (1, or Rank & Sort Loss's balancing by the loss values
of the step); a criterion that :attr:`~RankingCriterion.balances_tasks` also weights a head's other tasks
(:meth:`RankingCriterion.task_weight`) and says the weight of each positive in them
(:attr:`CriterionOutput.positive_weights`).

"Write your own criterion" in docs/criteria.md shows a criterion registered from a user's module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple

from torch import Tensor

from ..losses.ranking_inputs import RankingSet
from ..losses.ranking_statistics import RankingStatistics
from .config_keys import HeadKeys
from .targets import PositiveTargets, RowLabels, Targets

if TYPE_CHECKING:
    from detectron2.config import CfgNode

__all__ = ["CriterionOutput", "CriterionSet", "PositiveSource", "PositiveTerm", "RankingCriterion", "set_fields"]


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
        loc_factor: the factor of ``loss_loc`` on top of the head's localisation weight (detached): 1, or the
            criterion's own balancing coefficient of this step (Rank & Sort Loss's ``L_rank + L_sort`` over ``L_box``).
        statistics: the step's record for the self-balance hook (:class:`~alrp_d2.losses.RankingStatistics`), with
            the values :attr:`RankingCriterion.component_names` names (the head adds ``cls`` and ``loc``).
        positive_weights: (P,) the detached weights of the ``box`` positives of :meth:`RankingCriterion.targets`
            in the head's other tasks (RS Mask R-CNN's masks: the best class score of each), or None: equal weights.
    """

    loss_cls: Tensor
    loss_loc: Tensor
    loc_factor: Tensor
    statistics: RankingStatistics
    positive_weights: Optional[Tensor] = None


class CriterionSet(NamedTuple):
    """One ranking of :meth:`RankingCriterion.__call__`.

    Attributes:
        logits: (rows, K) logits of every (row, class) pair of the set.
        targets: what :meth:`RankingCriterion.targets` returned for the set.
        loc_losses: what :meth:`RankingCriterion.localisation_losses` returned for it.
    """

    logits: Tensor
    targets: Targets
    loc_losses: Tensor

    def ranking(self, positive_values: Optional[Tensor] = None) -> RankingSet:
        """The set as the ranking losses take it: the positives of its ranking (``targets.ranked``: Rank & Sort
        Loss's overlapping ones) with their ``positive_values``."""
        positives = self.targets.ranked
        return RankingSet(self.logits, positives.flat_index(self.logits.shape[-1]), positive_values, positives.valid)


def set_fields(*fields: Tensor) -> List[Tuple[Tensor, ...]]:
    """Per set, its entry of every (S,) field of the ranking losses' result (one ``unbind`` a field; a view of the
    only entry of one set)."""
    return list(zip(*(field.unbind() if len(field) != 1 else (field.reshape(()),) for field in fields)))


class RankingCriterion:
    """Base class of the ranking criteria. A subclass is registered in :data:`RANKING_CRITERION_REGISTRY`, takes
    its hyperparameters as keyword arguments (a ValueError names a bad one), reads them from a config in
    :meth:`from_config` (naming the config keys) and implements :meth:`localisation_losses` and :meth:`__call__`;
    :meth:`targets` defaults to the labelled positives. Everything a head, the ROI heads and the LazyConfig helpers
    know of a criterion is asked here, never by its name."""

    #: Whether the head's localisation weight may be self-balanced (aLRP paper Sec. 4.2); False for a criterion
    #: that balances its localisation loss itself (``CriterionOutput.loc_factor``), whose head weight is constant.
    allows_self_balance: ClassVar[bool] = True
    #: Whether the criterion balances a head's other tasks (RS Mask R-CNN's mask loss, :meth:`task_weight`).
    balances_tasks: ClassVar[bool] = False
    #: The names of the values the criterion adds to :attr:`CriterionOutput.statistics`, logged as
    #: ``sb/<head>/<name>``.
    component_names: ClassVar[Tuple[str, ...]] = ()

    @classmethod
    def from_config(cls, cfg: CfgNode, keys: HeadKeys) -> Dict[str, Any]:
        """The constructor's arguments from a config: under MODEL.ALRP, the head's ``keys`` (MODEL.ALRP.DELTA and
        TAU, or the RPN's RPN_DELTA and RPN_TAU) and the criterion's own keys, unchecked: the constructor checks
        them, and its errors name the keys of :meth:`config_keys`."""
        return {}

    @classmethod
    def config_keys(cls, keys: HeadKeys) -> Dict[str, str]:
        """The config key of each constructor argument :meth:`from_config` reads (argument -> key), by which the
        constructor's error about an argument names its key in a YAML run: the head's delta and tau (``keys``) and
        MODEL.ALRP.LOC_ERROR."""
        return {
            "delta": f"MODEL.ALRP.{keys.delta}",
            "tau": f"MODEL.ALRP.{keys.tau}",
            "loc_error_kind": "MODEL.ALRP.LOC_ERROR",
        }

    def targets(self, rows: RowLabels, source: PositiveSource) -> Targets:
        """The positives of the ranking (and of the localisation loss: ``targets.box``) from the head's labels."""
        return PositiveTargets.of_rows(rows)

    def localisation_losses(self, positives: PositiveTargets, source: PositiveSource) -> Tensor:
        """(P,) the differentiable localisation loss of each of ``positives`` (the ``box`` positives of
        :meth:`targets`), in their order."""
        raise NotImplementedError

    def __call__(self, sets: Sequence[CriterionSet], group: Any) -> List[CriterionOutput]:
        """The output of every set of ``sets``, in their order, each set ranked on its own (no logit of one set is
        compared with another's): one set from a detection head, every set of a step from a DETR. Every worker of a
        ``group`` passes as many sets.

        Args:
            sets: per set, its (rows, K) logits, what :meth:`targets` and :meth:`localisation_losses` returned.
            group: the :class:`~alrp_d2.losses.RankingGroup` of a global ranking, or None.
        """
        raise NotImplementedError

    def task_weight(self, output: CriterionOutput, task_loss: Tensor) -> Tensor:
        """The detached weight of ``task_loss``, another task of the head (RS Mask R-CNN's mask loss), given the
        criterion's ``output`` of the same step; only for a criterion that :attr:`balances_tasks`."""
        raise NotImplementedError(f"{type(self).__name__} does not balance a head's other tasks")

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({settings})"
