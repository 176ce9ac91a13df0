"""The ranking-based loss of one detection head, as a module of that head."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from detectron2.config import CfgNode
from torch import Tensor, nn

from ..config import CLS_LOSSES, validate_alrp_config
from ..losses import alrp_loss_indexed, ap_loss_indexed, loc_error, rank_sort_loss_indexed
from ..losses.global_ranking import RANKINGS, global_mean, global_weighted_mean, ranking_group
from ..losses.localisation_error import paired_iou_giou

__all__ = ["HeadRankingLoss", "PositiveTargets", "RankSortTargets", "RankingStatistics"]


class PositiveTargets(NamedTuple):
    """A head's positives as ranking inputs for its (rows, classes) logits, a row being an
    (image, anchor) pair or a proposal.

    Attributes:
        row: (P,) the row of each positive.
        label: (P,) its class.
        valid: (rows, 1) bool, False for the ignored rows (every class of them).
        labels_in_range: 0-d bool, whether every row's label was a class, the background or
            "ignored"; the loss is NaN otherwise (a class id beyond the model's classes).
    """

    row: Tensor
    label: Tensor
    valid: Tensor
    labels_in_range: Tensor

    @staticmethod
    def of_labels(labels: Tensor, num_classes: int) -> PositiveTargets:
        """From detectron2's per-row labels: a class in [0, K) for positives, K for background,
        -1 for ignored. One host synchronisation: the number of positives."""
        labels = labels.reshape(-1)
        row = torch.nonzero((labels >= 0) & (labels < num_classes)).squeeze(1)
        in_range = ((labels >= -1) & (labels <= num_classes)).all()
        return PositiveTargets(row, labels[row], (labels >= 0).unsqueeze(1), in_range)

    @staticmethod
    def of_objectness(labels: Tensor) -> PositiveTargets:
        """From detectron2's RPN labels (1 object, 0 background, -1 ignored) for one
        objectness logit per row."""
        labels = labels.reshape(-1)
        row = torch.nonzero(labels == 1).squeeze(1)
        in_range = ((labels >= -1) & (labels <= 1)).all()
        return PositiveTargets(row, torch.zeros_like(row), (labels >= 0).unsqueeze(1), in_range)

    def flat_index(self, num_classes: int) -> Tensor:
        """Index of each positive's (row, label) logit in the flattened (rows, K) logits."""
        return self.row * num_classes + self.label

    @property
    def box(self) -> PositiveTargets:
        """The positives of the localisation loss: the ranking's own (see :attr:`RankSortTargets.box`)."""
        return self


class RankSortTargets(NamedTuple):
    """A head's positives for Rank & Sort Loss, from the IoU of every row's predicted box with its
    ground truth (detached), as the official RS heads compute them.

    Attributes:
        box: every foreground row: the positives of the box (and mask) loss.
        ranked: the foreground rows whose predicted box overlaps its ground truth (IoU > 0), the
            positives of the ranking. The official heads give a positive of IoU 0 the target 0, which
            their ``RankSort`` treats as a negative; so does this selection (docs/paper_notes.md,
            "Rank & Sort Loss in the heads").
        overlaps: (P_ranked,) the IoU of each ranked positive, its sorting target.
    """

    box: PositiveTargets
    ranked: PositiveTargets
    overlaps: Tensor

    @staticmethod
    def of_labels(labels: Tensor, num_classes: int, overlaps: Tensor) -> RankSortTargets:
        """From detectron2's per-row labels (a class in [0, K) for positives, K for background, -1
        for ignored) and the (rows,) IoU of every row's predicted box with its matched box (any value
        for the other rows). One host synchronisation: the two numbers of positives."""
        labels = labels.reshape(-1)
        foreground = (labels >= 0) & (labels < num_classes)
        in_range = ((labels >= -1) & (labels <= num_classes)).all()
        return RankSortTargets._select(labels, labels >= 0, foreground, overlaps.reshape(-1), in_range)

    @staticmethod
    def of_objectness(labels: Tensor, overlaps: Tensor) -> RankSortTargets:
        """From detectron2's RPN labels (1 object, 0 background, -1 ignored), one objectness logit per row."""
        labels = labels.reshape(-1)
        in_range = ((labels >= -1) & (labels <= 1)).all()
        return RankSortTargets._select(
            torch.zeros_like(labels), labels >= 0, labels == 1, overlaps.reshape(-1), in_range
        )

    @staticmethod
    def _select(
        classes: Tensor, valid: Tensor, foreground: Tensor, overlaps: Tensor, in_range: Tensor
    ) -> RankSortTargets:
        """Positives of classes ``classes`` among the (rows,) ``foreground``; ``valid`` False for ignored rows."""
        valid = valid.unsqueeze(1)
        ranked = foreground & (overlaps > 0)
        num_box, num_ranked = torch.stack([foreground.sum(), ranked.sum()]).tolist()
        box_row = torch.nonzero_static(foreground, size=num_box).squeeze(1)
        ranked_row = torch.nonzero_static(ranked, size=num_ranked).squeeze(1)
        return RankSortTargets(
            PositiveTargets(box_row, classes[box_row], valid, in_range),
            PositiveTargets(ranked_row, classes[ranked_row], valid, in_range),
            overlaps[ranked_row],
        )


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


Targets = Union[PositiveTargets, RankSortTargets]


class HeadRankingLoss(nn.Module):
    """aLRP Loss (or AP Loss with a localisation loss, or Rank & Sort Loss with its box loss) of one
    head: all (row, class) pairs of the per-device batch in one ranking, as the papers train (aLRP
    Sec. 5, App. E; RS Loss: Oksuz et al., ICCV 2021).

    It owns what the head's loss needs: the classification loss (MODEL.ALRP.CLS_LOSS), delta,
    the kind and tau of E_loc, the weight of the whole loss (the RPN's 0.2, App. G.4) and the
    localisation weight, a buffer that travels with the model and its checkpoints, maintained
    by :class:`alrp_d2.engine.SelfBalanceHook` when ``self_balanced`` (Sec. 4.2) and constant
    otherwise (paper Table 3; a constant weight keeps the config's value when weights are
    loaded).

    With ``cls_loss="rank_sort"`` the head is trained as the official RS heads: the ranking targets
    are the IoUs of the positives' predicted boxes (:class:`RankSortTargets`), the box loss of every
    positive (1 - GIoU, or 1 - IoU) is weighted by its detached best class score
    (``sigmoid(logit).max()`` over the classes of its row) and averaged with these weights, and it is
    balanced by the loss values of the step: ``loss_<name>_loc = loc_weight * lambda * L_box`` with
    ``lambda = (L_rank + L_sort) / L_box`` (detached, recomputed every step, 0 when ``L_box`` is 0), so
    that its value is ``loc_weight`` times the classification value and its gradient is ``lambda``
    times that of ``L_box``. ``loss_<name>_cls`` is ``L_rank + L_sort`` in value; its gradient is RS
    Loss's (the ranking output carries the update of both errors). Other tasks of the head (the mask
    of RS Mask R-CNN) are balanced the same way by :meth:`balance_task`.

    ``ranking`` chooses the batch: "per_worker" (the paper's training) ranks this worker's
    images; "global" ranks the images of all workers of the default process group as one
    ranking (:mod:`alrp_d2.losses.global_ranking`), and RS Loss's weighted means are those of all
    workers.

    :meth:`forward` returns ``loss_<name>_cls`` and ``loss_<name>_loc`` (the latter times the
    localisation weight; ``loss_<name>_cls`` is NaN when a label is out of range, so that training
    stops with detectron2's FloatingPointError), and keeps the step's unweighted :class:`RankingStatistics` as device
    tensors until :meth:`take_statistics` reads them after the step: the loss itself makes the
    host wait only to count the positives and to select the relevant negatives.
    """

    loc_weight: Tensor

    def __init__(
        self,
        name: str,
        *,
        cls_loss: str,
        delta: float,
        loc_error_kind: str,
        tau: float,
        loc_weight: float,
        self_balanced: bool,
        loss_weight: float = 1.0,
        ranking: str = "per_worker",
        eps: Optional[float] = None,
        balanced_tasks: Sequence[str] = (),
    ):
        """
        Args:
            name: the head's name in the loss keys and the logs ("retinanet", "rpn", "box", ...).
            cls_loss: one of :data:`alrp_d2.config.CLS_LOSSES`.
            delta: smoothness of the step function.
            loc_error_kind, tau: E_loc (see :func:`alrp_d2.losses.loc_error`); with "rank_sort" the
                box loss is 1 - GIoU ("giou") or 1 - IoU ("iou") and tau is unused.
            loc_weight: the initial (self-balanced) or constant localisation weight.
            self_balanced: whether the self-balance hook updates the localisation weight (not with
                "rank_sort", which balances by the values of every step).
            loss_weight: weight of both components.
            ranking: "per_worker" or "global".
            eps: the gate of the ranking errors: N_FP >= eps of App. E line 28 (default 1e-5; the
                interpolated AP Loss has none), or RS Loss's strict gates (default 1e-10, official).
            balanced_tasks: other tasks of the head balanced by :meth:`balance_task` ("rank_sort" only).
        """
        super().__init__()
        if cls_loss not in CLS_LOSSES:
            raise ValueError(f"cls_loss must be one of {CLS_LOSSES}, got {cls_loss!r}")
        if ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
        value_balanced = cls_loss == "rank_sort"
        if value_balanced and self_balanced:
            raise ValueError("Rank & Sort Loss balances the box loss by the values of every step: self_balanced=False")
        if balanced_tasks and not value_balanced:
            raise ValueError(f"only cls_loss 'rank_sort' balances other tasks, got {cls_loss!r}")
        self.name = name
        self.cls_loss = cls_loss
        self.delta = delta
        self.loc_error_kind = loc_error_kind
        self.tau = tau
        self.self_balanced = self_balanced
        self.loss_weight = loss_weight
        self.ranking = ranking
        self.eps = eps if eps is not None else (1e-10 if value_balanced else 1e-5)
        self.balanced_tasks = tuple(balanced_tasks)
        self.register_buffer("loc_weight", torch.tensor(float(loc_weight)))
        self._statistics: Optional[RankingStatistics] = None

    @classmethod
    def from_config(
        cls,
        cfg: CfgNode,
        name: str,
        *,
        delta: float,
        tau: float,
        loss_weight: float = 1.0,
        balanced_tasks: Sequence[str] = (),
    ) -> HeadRankingLoss:
        """The loss of head ``name`` from MODEL.ALRP, self-balanced from SB_INIT_WEIGHT or with
        the constant LOC_WEIGHT."""
        validate_alrp_config(cfg)
        alrp = cfg.MODEL.ALRP
        return cls(
            name,
            cls_loss=alrp.CLS_LOSS,
            delta=delta,
            loc_error_kind=alrp.LOC_ERROR,
            tau=tau,
            loc_weight=alrp.SB_INIT_WEIGHT if alrp.SB_ENABLED else alrp.LOC_WEIGHT,
            self_balanced=alrp.SB_ENABLED,
            loss_weight=loss_weight,
            ranking=alrp.RANKING,
            balanced_tasks=balanced_tasks,
        )

    @property
    def value_balanced(self) -> bool:
        """Whether the head is trained by Rank & Sort Loss: IoU targets, score-weighted box loss, balancing
        by the values of every step."""
        return self.cls_loss == "rank_sort"

    @property
    def loss_names(self) -> List[str]:
        return [f"loss_{self.name}_cls", f"loss_{self.name}_loc"]

    @property
    def component_names(self) -> Tuple[str, ...]:
        """The names of :attr:`RankingStatistics.components`, logged as ``sb/<name>/<component>``: RS
        Loss's ``rank``, ``sort``, the box loss's ``weight`` (loc_weight * lambda) and, per balanced
        task, its unweighted loss and weight."""
        if not self.value_balanced:
            return ()
        return ("rank", "sort", "weight") + tuple(
            f"{task}{suffix}" for task in self.balanced_tasks for suffix in ("", "_weight")
        )

    def loc_errors(self, pred_boxes: Tensor, gt_boxes: Tensor) -> Tensor:
        """E_loc of the positives' decoded boxes (App. E line 12); with RS Loss its box loss, 1 - GIoU
        (mmdetection's GIoULoss) or 1 - IoU."""
        if not self.value_balanced:
            return loc_error(pred_boxes, gt_boxes, self.loc_error_kind, self.tau)
        iou, giou = paired_iou_giou(pred_boxes, gt_boxes)
        return 1.0 - (giou if self.loc_error_kind == "giou" else iou)

    def forward(self, logits: Tensor, targets: Targets, loc_errors: Tensor) -> Dict[str, Tensor]:
        """
        Args:
            logits: (rows, K) logits of every (row, class) pair of the batch.
            targets: the positives: :class:`PositiveTargets`, or :class:`RankSortTargets` with RS Loss.
            loc_errors: (P,) differentiable localisation errors of the positives of the
                localisation loss (``targets.box``), in their order: E_loc, any non-negative
                per-positive loss with an AP loss, the box loss with RS Loss.
        """
        group = ranking_group(self.ranking)  # per call: the process group may start after the model is built
        if self.value_balanced:
            if not isinstance(targets, RankSortTargets):
                raise TypeError(f"Rank & Sort Loss needs RankSortTargets, got {type(targets).__name__}")
            return self._rank_sort(logits, targets, loc_errors, group)
        if not isinstance(targets, PositiveTargets):
            raise TypeError(f"{self.cls_loss!r} needs PositiveTargets, got {type(targets).__name__}")
        positive_index = targets.flat_index(logits.shape[-1])
        if self.cls_loss == "alrp":
            statistics = RankingStatistics(
                *alrp_loss_indexed(logits, positive_index, loc_errors, targets.valid, self.delta, self.eps, group)
            )
        else:
            # "ap_interpolated" is the official APLoss, which has no N_FP gate.
            interpolated = self.cls_loss == "ap_interpolated"
            eps = None if interpolated else self.eps
            ranking = ap_loss_indexed(logits, positive_index, targets.valid, self.delta, eps, group, interpolated)
            statistics = RankingStatistics(ranking.loss, global_mean(loc_errors, group), *ranking[1:])
        loss_cls = torch.where(targets.labels_in_range, statistics.loss_cls, torch.nan)
        statistics = statistics._replace(loss_cls=loss_cls)
        self._keep(statistics)
        return {
            self.loss_names[0]: self.loss_weight * statistics.loss_cls,
            self.loss_names[1]: (self.loss_weight * self.loc_weight) * statistics.loss_loc,
        }

    def _rank_sort(self, logits: Tensor, targets: RankSortTargets, box_losses: Tensor, group: Any) -> Dict[str, Tensor]:
        """RS Loss of the ranked positives and the balanced, score-weighted box loss of all positives."""
        ranked = targets.ranked
        terms = rank_sort_loss_indexed(
            logits, ranked.flat_index(logits.shape[-1]), targets.overlaps, ranked.valid, self.delta, self.eps, group
        )
        scores = logits.detach()[targets.box.row].float().sigmoid().amax(dim=-1)
        loss_box = global_weighted_mean(box_losses, scores, group)
        loss_cls = torch.where(targets.box.labels_in_range, terms.ranking_loss + terms.sorting_loss, torch.nan)
        weight = self.loc_weight * value_balance(loss_cls.detach(), loss_box.detach())
        components = [("rank", terms.ranking_loss), ("sort", terms.sorting_loss), ("weight", weight)]
        for task in self.balanced_tasks:
            components += [(task, torch.zeros_like(weight)), (f"{task}_weight", torch.zeros_like(weight))]
        self._keep(RankingStatistics(loss_cls, loss_box, *terms[2:], tuple(components)))
        return {
            self.loss_names[0]: self.loss_weight * loss_cls,
            self.loss_names[1]: (self.loss_weight * weight) * loss_box,
        }

    def balance_task(self, task: str, loss: Tensor) -> Tensor:
        """``loss`` of another task of the head (e.g. RS Mask R-CNN's mask loss) times
        ``(L_rank + L_sort) / loss`` of this step (detached; 0 when ``loss`` is 0), as the official RS
        heads balance it; its unweighted value and weight are logged as ``sb/<name>/<task>`` and
        ``sb/<name>/<task>_weight``. Call it after :meth:`forward` of the same step."""
        if task not in self.balanced_tasks:
            raise ValueError(f"head {self.name!r} balances the tasks {self.balanced_tasks}, not {task!r}")
        if self._statistics is None:
            raise RuntimeError(f"balance_task({task!r}) needs the forward of head {self.name!r} of the same step first")
        weight = value_balance(self._statistics.loss_cls, loss.detach())
        updates = {task: loss.detach(), f"{task}_weight": weight}
        components = tuple((name, updates.get(name, value)) for name, value in self._statistics.components)
        self._statistics = self._statistics._replace(components=components)
        return (self.loss_weight * weight) * loss

    def _keep(self, statistics: RankingStatistics) -> None:
        self._statistics = RankingStatistics(
            statistics.loss_cls.detach(),
            statistics.loss_loc.detach(),
            statistics.positive_gradient_magnitude.detach(),
            statistics.negative_gradient_magnitude.detach(),
            tuple((name, value.detach()) for name, value in statistics.components),
        )

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
        if self.value_balanced:
            kind = "balanced by the step's loss values, constant factor"
            tasks = f", balanced_tasks={self.balanced_tasks}" if self.balanced_tasks else ""
            loc = f"box loss={self.loc_error_kind!r}{tasks}"
        else:
            kind = "self-balanced" if self.self_balanced else "constant"
            loc = f"E_loc={self.loc_error_kind!r} (tau {self.tau})"
        return (
            f"name={self.name!r}, cls_loss={self.cls_loss!r}, delta={self.delta}, {loc}, "
            f"loss_weight={self.loss_weight}, {kind} loc_weight={self.loc_weight.item():.4g}, ranking={self.ranking!r}"
        )


def value_balance(value: Tensor, loss: Tensor) -> Tensor:
    """``value / loss`` (RS Loss's task-balancing coefficient), 0 where ``loss`` is 0, without a host
    synchronisation."""
    positive = loss > 0
    return torch.where(positive, value / torch.where(positive, loss, torch.ones_like(loss)), torch.zeros_like(loss))
