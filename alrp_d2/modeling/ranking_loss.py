"""The ranking-based loss of one detection head, as a module of that head."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

import torch
from detectron2.config import CfgNode
from torch import Tensor, nn

from ..config import CLS_LOSSES, validate_alrp_config
from ..losses import alrp_loss_indexed, ap_loss_indexed, loc_error
from ..losses.global_ranking import RANKINGS, global_mean, ranking_group

__all__ = ["HeadRankingLoss", "PositiveTargets", "RankingStatistics"]


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


class RankingStatistics(NamedTuple):
    """One step of a head's ranking loss, unweighted: the two components and the summed
    magnitudes of the positives' and negatives' score gradients (their ratio is paper Fig. 3)."""

    loss_cls: Tensor
    loss_loc: Tensor
    positive_gradient_magnitude: Tensor
    negative_gradient_magnitude: Tensor


class HeadRankingLoss(nn.Module):
    """aLRP Loss (or AP Loss with a localisation loss) of one head: all (row, class) pairs of the
    per-device batch in one ranking, as the paper trains (Sec. 5, App. E).

    It owns what the head's loss needs: the classification loss (MODEL.ALRP.CLS_LOSS), delta,
    the kind and tau of E_loc, the weight of the whole loss (the RPN's 0.2, App. G.4) and the
    localisation weight, a buffer that travels with the model and its checkpoints, maintained
    by :class:`alrp_d2.engine.SelfBalanceHook` when ``self_balanced`` (Sec. 4.2) and constant
    otherwise (paper Table 3; a constant weight keeps the config's value when weights are
    loaded).

    ``ranking`` chooses the batch: "per_worker" (the paper's training) ranks this worker's
    images; "global" ranks the images of all workers of the default process group as one
    ranking (:mod:`alrp_d2.losses.global_ranking`).

    :meth:`forward` returns ``loss_<name>_cls`` and ``loss_<name>_loc`` (the latter times the
    localisation weight; ``loss_<name>_cls`` is NaN when a label is out of range, so that training
    stops with detectron2's FloatingPointError), and keeps the step's unweighted :class:`RankingStatistics` as device
    tensors until :meth:`take_statistics` reads them after the step: the loss itself makes the
    host wait only to select the relevant negatives.
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
        eps: float = 1e-5,
    ):
        """
        Args:
            name: the head's name in the loss keys and the logs ("retinanet", "rpn", "box", ...).
            cls_loss: one of :data:`alrp_d2.config.CLS_LOSSES`.
            delta: smoothness of the step function.
            loc_error_kind, tau: E_loc (see :func:`alrp_d2.losses.loc_error`).
            loc_weight: the initial (self-balanced) or constant localisation weight.
            self_balanced: whether the self-balance hook updates the localisation weight.
            loss_weight: weight of both components.
            ranking: "per_worker" or "global".
            eps: the N_FP gate of App. E line 28 (the interpolated AP Loss has none).
        """
        super().__init__()
        if cls_loss not in CLS_LOSSES:
            raise ValueError(f"cls_loss must be one of {CLS_LOSSES}, got {cls_loss!r}")
        if ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
        self.name = name
        self.cls_loss = cls_loss
        self.delta = delta
        self.loc_error_kind = loc_error_kind
        self.tau = tau
        self.self_balanced = self_balanced
        self.loss_weight = loss_weight
        self.ranking = ranking
        self.eps = eps
        self.register_buffer("loc_weight", torch.tensor(float(loc_weight)))
        self._statistics: Optional[RankingStatistics] = None

    @classmethod
    def from_config(
        cls, cfg: CfgNode, name: str, *, delta: float, tau: float, loss_weight: float = 1.0
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
        )

    @property
    def loss_names(self) -> List[str]:
        return [f"loss_{self.name}_cls", f"loss_{self.name}_loc"]

    def loc_errors(self, pred_boxes: Tensor, gt_boxes: Tensor) -> Tensor:
        """E_loc of the positives' decoded boxes (App. E line 12)."""
        return loc_error(pred_boxes, gt_boxes, self.loc_error_kind, self.tau)

    def forward(self, logits: Tensor, targets: PositiveTargets, loc_errors: Tensor) -> Dict[str, Tensor]:
        """
        Args:
            logits: (rows, K) logits of every (row, class) pair of the batch.
            targets: the positives (:class:`PositiveTargets`).
            loc_errors: (P,) differentiable localisation errors of the positives, in the order
                of ``targets`` (E_loc, or any non-negative per-positive loss with an AP loss).
        """
        group = ranking_group(self.ranking)  # per call: the process group may start after the model is built
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
        self._statistics = RankingStatistics(*(value.detach() for value in statistics))
        return {
            self.loss_names[0]: self.loss_weight * statistics.loss_cls,
            self.loss_names[1]: (self.loss_weight * self.loc_weight) * statistics.loss_loc,
        }

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
        return (
            f"name={self.name!r}, cls_loss={self.cls_loss!r}, delta={self.delta}, E_loc={self.loc_error_kind!r} "
            f"(tau {self.tau}), loss_weight={self.loss_weight}, {kind} loc_weight={self.loc_weight.item():.4g}, "
            f"ranking={self.ranking!r}"
        )
