"""The ranking loss of one detection head, as a module of that head: its criterion, its weights and the statistics
of its last step."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import torch
from detectron2.config import CfgNode
from torch import Tensor, nn

from ..checks.errors import naming_config_keys, require_argument
from ..checks.hyperparameter_ranges import loc_weight_problem, weight_problem
from ..criteria.config_keys import HEAD_KEYS, HeadKeys
from ..criteria.correlation_term import correlation_terms
from ..criteria.output_check import check_criterion_outputs
from ..criteria.ranking_criterion import (
    CriterionOutput,
    CriterionSet,
    PositiveSource,
    PositiveTerm,
    RankingCriterion,
)
from ..criteria.registry import build_ranking_criterion
from ..criteria.targets import PositiveTargets, RowLabels
from ..losses.global_ranking import RANKINGS, ranking_group
from ..losses.ranking_statistics import RankingStatistics

__all__ = ["HeadLoss", "HeadRankingLoss", "LOGIT_RANGE"]

#: The statistics of the step's logits that every head logs (``sb/<head>/logit_min``, ``logit_max``).
LOGIT_RANGE: Tuple[str, ...] = ("logit_min", "logit_max")


def logit_range(logits: Tensor) -> Dict[str, Tensor]:
    """The smallest and largest of the step's logits, 0-d device tensors (one pass, no M-sized temporary; 0 and 0
    without logits)."""
    if logits.numel() == 0:
        zero = logits.new_zeros((), dtype=torch.float32)
        return dict(zip(LOGIT_RANGE, (zero, zero)))
    return dict(zip(LOGIT_RANGE, torch.aminmax(logits.detach())))


class HeadLoss(NamedTuple):
    """What a head's ranking loss returns for one step.

    Attributes:
        losses: ``loss_<name>_cls``, ``loss_<name>_loc`` and one entry per additive term.
        positives: the positives of the localisation loss (``targets.box`` of the criterion).
        output: the criterion's output of the step (``loss_cls`` NaN when a label was out of range), from which it
            weights the head's other tasks (:meth:`HeadRankingLoss.balance_task`,
            :attr:`~alrp_d2.criteria.CriterionOutput.positive_weights`).
        statistics: the step's record, with the balanced tasks' values once :meth:`HeadRankingLoss.balance_task`
            has added them.
    """

    losses: Dict[str, Tensor]
    positives: PositiveTargets
    output: CriterionOutput
    statistics: RankingStatistics


class HeadRankingLoss(nn.Module):
    """The ranking loss of one head: all (row, class) pairs of the per-device batch in one ranking, as the papers
    train (aLRP Sec. 5, App. E; RS Loss: Oksuz et al., ICCV 2021), by a ranking criterion
    (:class:`~alrp_d2.criteria.RankingCriterion`, MODEL.ALRP.CRITERION), plus the additive terms on its positives.

    It keeps what is the head's: its name in the loss keys and logs, the weight of the whole loss (the RPN's 0.2,
    App. G.4), the localisation weight (a buffer that travels with the model and its checkpoints, maintained by
    :class:`alrp_d2.engine.SelfBalanceHook` when ``self_balanced`` (Sec. 4.2) and constant otherwise (paper Table
    3; a constant weight keeps the config's value when weights are loaded)), the tasks its criterion balances, and
    the statistics of its last step until :meth:`take_statistics` reads them after the step.

    ``ranking`` chooses the batch: "per_worker" (the paper's training) ranks this worker's images; "global" ranks
    the images of all workers of the default process group as one ranking (:mod:`alrp_d2.losses.global_ranking`).

    :meth:`forward` returns ``loss_<name>_cls`` (NaN when a label is out of range, so that training stops with
    detectron2's FloatingPointError) and ``loss_<name>_loc`` (times the localisation weight and the criterion's
    ``loc_factor`` of the step).
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
            loc_weight: the initial (self-balanced) or constant localisation weight, > 0.
            self_balanced: whether the self-balance hook updates the localisation weight (only with a criterion that
                ``allows_self_balance``).
            loss_weight: weight of both components.
            ranking: "per_worker" or "global".
            balanced_tasks: other tasks of the head weighted by the criterion (:meth:`balance_task`; a criterion that
                ``balances_tasks`` only).
            terms: losses added on the head's positives.
        """
        super().__init__()
        owner = f"{type(self).__name__}[{name!r}]"
        criterion_name = type(criterion).__name__
        require_argument(ranking in RANKINGS, owner, "ranking", ranking, f"must be one of {RANKINGS}")
        problem = loc_weight_problem(loc_weight)
        require_argument(problem is None, owner, "loc_weight", loc_weight, str(problem))
        problem = weight_problem(loss_weight)
        require_argument(problem is None, owner, "loss_weight", loss_weight, str(problem))
        require_argument(
            not self_balanced or criterion.allows_self_balance,
            owner,
            "self_balanced",
            self_balanced,
            f"{criterion_name} balances the localisation loss itself: the head's weight must be constant",
        )
        require_argument(
            not balanced_tasks or criterion.balances_tasks,
            owner,
            "balanced_tasks",
            tuple(balanced_tasks),
            f"{criterion_name} does not balance other tasks (its balances_tasks is False)",
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
        keys: HeadKeys = HEAD_KEYS,
        loss_weight: float = 1.0,
        balanced_tasks: Sequence[str] = (),
        argument_keys: Mapping[str, str] = MappingProxyType({}),
    ) -> HeadRankingLoss:
        """The loss of head ``name`` from MODEL.ALRP: the criterion of MODEL.ALRP.CRITERION with the head's delta and
        tau (``keys``), self-balanced from SB_INIT_WEIGHT or with the constant LOC_WEIGHT, and the Correlation Loss
        term of MODEL.ALRP.CORR_WEIGHT > 0. The constructor's errors name the keys of its arguments, and
        ``argument_keys`` those of the caller's (``loss_weight``, ``balanced_tasks``)."""
        alrp = cfg.MODEL.ALRP
        criterion = build_ranking_criterion(cfg, keys)
        loc_weight_key = "MODEL.ALRP.SB_INIT_WEIGHT" if alrp.SB_ENABLED else "MODEL.ALRP.LOC_WEIGHT"
        own_keys = {
            "loc_weight": loc_weight_key,
            "self_balanced": "MODEL.ALRP.SB_ENABLED",
            "ranking": "MODEL.ALRP.RANKING",
        }
        terms = correlation_terms(cfg)
        with naming_config_keys(cfg, {**own_keys, **argument_keys}):
            return cls(
                name,
                criterion=criterion,
                loc_weight=alrp.SB_INIT_WEIGHT if alrp.SB_ENABLED else alrp.LOC_WEIGHT,
                self_balanced=alrp.SB_ENABLED,
                loss_weight=loss_weight,
                ranking=alrp.RANKING,
                balanced_tasks=balanced_tasks,
                terms=terms,
            )

    @property
    def component_names(self) -> Tuple[str, ...]:
        """The names of the values of the head's :class:`~alrp_d2.losses.RankingStatistics`, logged as
        ``sb/<name>/<component>``: ``cls`` and ``loc`` (unweighted), the criterion's (Rank & Sort Loss's ``rank``,
        ``sort`` and its balancing ``weight``), per balanced task its unweighted loss and weight, and the smallest and
        largest logit of the step (``logit_min``, ``logit_max``: saturated scores, ``CollapseCheckHook``)."""
        return ("cls", "loc") + self.criterion.component_names + self._task_component_names + LOGIT_RANGE

    @property
    def _task_component_names(self) -> Tuple[str, ...]:
        return tuple(f"{task}{suffix}" for task in self.balanced_tasks for suffix in ("", "_weight"))

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
        loc_losses = self.criterion.localisation_losses(positives, source)
        sets = [CriterionSet(logits, targets, loc_losses)]
        outputs = self.criterion(sets, group)
        check_criterion_outputs(self.criterion, outputs, sets)
        output = outputs[0]
        output = output._replace(loss_cls=torch.where(positives.labels_in_range, output.loss_cls, torch.nan))
        statistics = output.statistics.with_values(cls=output.loss_cls, loc=output.loss_loc, **logit_range(logits))
        if not self.balanced_tasks:
            self._statistics = statistics  # complete; else once balance_task has added every task
        losses = {
            f"loss_{self.name}_cls": self.loss_weight * output.loss_cls,
            f"loss_{self.name}_loc": (self.loss_weight * self.loc_weight * output.loc_factor) * output.loss_loc,
        }
        for term in self.terms:
            losses[f"loss_{self.name}_{term.name}"] = term(logits, positives, source, group)
        return HeadLoss(losses, positives, output, statistics)

    def balance_task(self, task: str, loss: Tensor, step: HeadLoss) -> Tuple[Tensor, HeadLoss]:
        """``loss`` of another task of the head (e.g. RS Mask R-CNN's mask loss) times the criterion's weight of it
        given the head's ``step`` (:meth:`~alrp_d2.criteria.RankingCriterion.task_weight`; Rank & Sort Loss:
        ``(L_rank + L_sort) / loss``, as the official RS heads), and ``step`` whose record holds the task's
        unweighted value and weight (logged as ``sb/<name>/<task>`` and ``sb/<name>/<task>_weight``). The record
        with every balanced task is the step's statistics (:meth:`take_statistics`)."""
        if task not in self.balanced_tasks:
            raise ValueError(f"head {self.name!r} balances the tasks {self.balanced_tasks}, not {task!r}")
        weight = self.criterion.task_weight(step.output, loss)
        step = step._replace(statistics=step.statistics.with_values(**{task: loss, f"{task}_weight": weight}))
        if all(name in step.statistics.values for name in self._task_component_names):
            self._statistics = step.statistics
        return (self.loss_weight * weight) * loss, step

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
        kind = "self-balanced" if self.self_balanced else "constant"
        tasks = f", balanced_tasks={self.balanced_tasks}" if self.balanced_tasks else ""
        terms = f", terms={self.terms}" if self.terms else ""
        return (
            f"name={self.name!r}, criterion={self.criterion!r}, loss_weight={self.loss_weight}, "
            f"{kind} loc_weight={self.loc_weight.item():.4g}, ranking={self.ranking!r}{tasks}{terms}"
        )
