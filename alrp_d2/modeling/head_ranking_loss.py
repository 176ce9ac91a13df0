"""The ranking loss of one detection head, as a module of that head: its criterion, its weights and the statistics
of its last step."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import torch
from detectron2.config import CfgNode
from torch import Tensor, nn

from ..config_check import require_config
from ..criteria.correlation_term import correlation_terms
from ..criteria.rank_sort import value_balance
from ..criteria.ranking_criterion import PositiveSource, PositiveTerm, RankingCriterion
from ..criteria.registry import build_ranking_criterion
from ..criteria.targets import PositiveTargets, RowLabels
from ..losses.global_ranking import RANKINGS, ranking_group

__all__ = ["HeadLoss", "HeadRankingLoss", "RankingStatistics"]


class RankingStatistics(NamedTuple):
    """One step of a head's ranking loss, unweighted: the two components and the summed
    magnitudes of the positives' and negatives' score gradients (their ratio is paper Fig. 3),
    and further named values of the step (``components``, in the order of
    :attr:`HeadRankingLoss.component_names`)."""

    loss_cls: Tensor
    loss_loc: Tensor
    positive_gradient_magnitude: Tensor
    negative_gradient_magnitude: Tensor
    components: Tuple[Tuple[str, Tensor], ...] = ()


class HeadLoss(NamedTuple):
    """What a head's ranking loss returns for one step.

    Attributes:
        losses: ``loss_<name>_cls``, ``loss_<name>_loc`` and one entry per additive term.
        positives: the positives of the localisation loss (``targets.box`` of the criterion).
        task_value: the detached classification value of the step, which a ``value_balanced`` criterion balances
            the head's other tasks against (:meth:`HeadRankingLoss.balance_task`).
    """

    losses: Dict[str, Tensor]
    positives: PositiveTargets
    task_value: Tensor


class HeadRankingLoss(nn.Module):
    """The ranking loss of one head: all (row, class) pairs of the per-device batch in one ranking, as the papers
    train (aLRP Sec. 5, App. E; RS Loss: Oksuz et al., ICCV 2021), by a ranking criterion
    (:class:`~alrp_d2.criteria.RankingCriterion`, MODEL.ALRP.CRITERION), plus the additive terms on its positives.

    It keeps what is the head's: its name in the loss keys and logs, the weight of the whole loss (the RPN's 0.2,
    App. G.4), the localisation weight (a buffer that travels with the model and its checkpoints, maintained by
    :class:`alrp_d2.engine.SelfBalanceHook` when ``self_balanced`` (Sec. 4.2) and constant otherwise (paper Table
    3; a constant weight keeps the config's value when weights are loaded)), the tasks it balances, and the
    statistics of its last step until :meth:`take_statistics` reads them after the step.

    ``ranking`` chooses the batch: "per_worker" (the paper's training) ranks this worker's images; "global" ranks
    the images of all workers of the default process group as one ranking (:mod:`alrp_d2.losses.global_ranking`).

    :meth:`forward` returns ``loss_<name>_cls`` (NaN when a label is out of range, so that training stops with
    detectron2's FloatingPointError) and ``loss_<name>_loc`` (times the localisation weight and, with a
    ``value_balanced`` criterion, its balancing factor of the step).
    """

    loc_weight: Tensor

    def __init__(
        self,
        name: str,
        *,
        criterion: RankingCriterion,
        loc_weight: float,
        self_balanced: bool,
        loss_weight: float = 1.0,
        ranking: str = "per_worker",
        balanced_tasks: Sequence[str] = (),
        terms: Sequence[PositiveTerm] = (),
    ):
        """
        Args:
            name: the head's name in the loss keys and the logs ("retinanet", "rpn", "box", ...).
            criterion: the ranking criterion.
            loc_weight: the initial (self-balanced) or constant localisation weight.
            self_balanced: whether the self-balance hook updates the localisation weight (not with a
                ``value_balanced`` criterion, which balances by the values of every step).
            loss_weight: weight of both components.
            ranking: "per_worker" or "global".
            balanced_tasks: other tasks of the head balanced by :meth:`balance_task` (a ``value_balanced``
                criterion only).
            terms: losses added on the head's positives.
        """
        super().__init__()
        if ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
        criterion_name = type(criterion).__name__
        if criterion.value_balanced and self_balanced:
            raise ValueError(
                f"{criterion_name} balances the localisation loss by the values of every step: self_balanced must be "
                "False (MODEL.ALRP.SB_ENABLED False)"
            )
        if balanced_tasks and not criterion.value_balanced:
            raise ValueError(
                f"head {name!r} balances the tasks {tuple(balanced_tasks)} by its criterion's values, which "
                f"{criterion_name} does not give: use a value-balanced criterion (MODEL.ALRP.CRITERION "
                "'RankSortCriterion' with MODEL.ROI_MASK_HEAD.NAME 'RankSortMaskHead')"
            )
        self.name = name
        self.criterion = criterion
        self.self_balanced = self_balanced
        self.loss_weight = loss_weight
        self.ranking = ranking
        self.balanced_tasks = tuple(balanced_tasks)
        self.terms = tuple(terms)
        self.register_buffer("loc_weight", torch.tensor(float(loc_weight)))
        self._statistics: Optional[RankingStatistics] = None

    @classmethod
    def from_config(
        cls,
        cfg: CfgNode,
        name: str,
        *,
        delta_key: str = "DELTA",
        tau_key: str = "TAU",
        loss_weight: float = 1.0,
        balanced_tasks: Sequence[str] = (),
    ) -> HeadRankingLoss:
        """The loss of head ``name`` from MODEL.ALRP: the criterion of MODEL.ALRP.CRITERION with the head's delta and
        tau (MODEL.ALRP.<delta_key>, <tau_key>), self-balanced from SB_INIT_WEIGHT or with the constant LOC_WEIGHT,
        and the Correlation Loss term of MODEL.ALRP.CORR_WEIGHT > 0."""
        alrp = cfg.MODEL.ALRP
        for key in ("SB_INIT_WEIGHT", "LOC_WEIGHT"):
            require_config(alrp[key] > 0, f"MODEL.ALRP.{key}", alrp[key], "must be > 0")
        return cls(
            name,
            criterion=build_ranking_criterion(cfg, delta_key=delta_key, tau_key=tau_key),
            loc_weight=alrp.SB_INIT_WEIGHT if alrp.SB_ENABLED else alrp.LOC_WEIGHT,
            self_balanced=alrp.SB_ENABLED,
            loss_weight=loss_weight,
            ranking=alrp.RANKING,
            balanced_tasks=balanced_tasks,
            terms=correlation_terms(cfg),
        )

    @property
    def component_names(self) -> Tuple[str, ...]:
        """The names of :attr:`RankingStatistics.components`, logged as ``sb/<name>/<component>``: the criterion's
        (Rank & Sort Loss's ``rank``, ``sort``), with a ``value_balanced`` criterion the box loss's ``weight``
        (loc_weight times the step's factor) and, per balanced task, its unweighted loss and weight."""
        if not self.criterion.value_balanced:
            return self.criterion.component_names
        tasks = tuple(f"{task}{suffix}" for task in self.balanced_tasks for suffix in ("", "_weight"))
        return self.criterion.component_names + ("weight",) + tasks

    def forward(self, logits: Tensor, rows: RowLabels, source: PositiveSource) -> HeadLoss:
        """
        Args:
            logits: (rows, K) logits of every (row, class) pair of the batch.
            rows: the labels of the rows.
            source: the head's boxes of the rows.
        """
        group = ranking_group(self.ranking)  # per call: the process group may start after the model is built
        targets = self.criterion.targets(rows, source)
        positives = targets.box
        output = self.criterion(logits, targets, self.criterion.localisation_losses(positives, source), group)
        loss_cls = torch.where(positives.labels_in_range, output.loss_cls, torch.nan)
        loc_weight = self.loc_weight * output.loc_factor
        components = output.components
        if self.criterion.value_balanced:
            components += (("weight", loc_weight),) + tuple(
                (f"{task}{suffix}", torch.zeros_like(loc_weight))
                for task in self.balanced_tasks
                for suffix in ("", "_weight")
            )
        self._statistics = RankingStatistics(
            loss_cls.detach(),
            output.loss_loc.detach(),
            output.positive_gradient_magnitude.detach(),
            output.negative_gradient_magnitude.detach(),
            tuple((name, value.detach()) for name, value in components),
        )
        losses = {
            f"loss_{self.name}_cls": self.loss_weight * loss_cls,
            f"loss_{self.name}_loc": (self.loss_weight * loc_weight) * output.loss_loc,
        }
        for term in self.terms:
            losses[f"loss_{self.name}_{term.name}"] = term(logits, positives, source, group)
        return HeadLoss(losses, positives, loss_cls.detach())

    def balance_task(self, task: str, loss: Tensor, task_value: Tensor) -> Tensor:
        """``loss`` of another task of the head (e.g. RS Mask R-CNN's mask loss) times ``task_value / loss``
        (detached; 0 when ``loss`` is 0), ``task_value`` being :attr:`HeadLoss.task_value` of the same step, as the
        official RS heads balance it; its unweighted value and weight are logged as ``sb/<name>/<task>`` and
        ``sb/<name>/<task>_weight``."""
        if task not in self.balanced_tasks:
            raise ValueError(f"head {self.name!r} balances the tasks {self.balanced_tasks}, not {task!r}")
        weight = value_balance(task_value, loss.detach())
        if self._statistics is not None:
            updates = {task: loss.detach(), f"{task}_weight": weight}
            components = tuple((name, updates.get(name, value)) for name, value in self._statistics.components)
            self._statistics = self._statistics._replace(components=components)
        return (self.loss_weight * weight) * loss

    def take_statistics(self) -> Optional[RankingStatistics]:
        """The statistics of the last :meth:`forward` (None if there was none since the last
        call), as device tensors; reading their values is left to the caller."""
        statistics, self._statistics = self._statistics, None
        return statistics

    def set_loc_weight(self, value: float) -> None:
        self.loc_weight.fill_(value)

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        """A constant localisation weight is the config's: the stored value is not loaded."""
        if not self.self_balanced and prefix + "loc_weight" in state_dict:
            state_dict = {**state_dict, prefix + "loc_weight": self.loc_weight.clone()}
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        if self.criterion.value_balanced:
            kind = "balanced by the step's loss values, constant factor"
        else:
            kind = "self-balanced" if self.self_balanced else "constant"
        tasks = f", balanced_tasks={self.balanced_tasks}" if self.balanced_tasks else ""
        terms = f", terms={self.terms}" if self.terms else ""
        return (
            f"name={self.name!r}, criterion={self.criterion!r}, loss_weight={self.loss_weight}, "
            f"{kind} loc_weight={self.loc_weight.item():.4g}, ranking={self.ranking!r}{tasks}{terms}"
        )
