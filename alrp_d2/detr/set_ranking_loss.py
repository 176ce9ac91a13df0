"""The ranking loss of one decoder layer of a DETR-family detector (docs/detr.md, "The set-prediction ranking loss").

The matched (query, class) pairs are the positives of one ranking of the layer's (query, class) logits; every other
(query, class) entry is a negative (the unmatched queries, the denoising groups' padding slots and contrastive
queries alike). Any registered ranking criterion ranks them; the matched boxes add L1 and GIoU terms (fixed weights,
or each rescaled to the ranking loss's value as BRS-DETR does) or the criterion's own localisation loss.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..criteria import (
    CorrelationTerm,
    PositiveTargets,
    RankingCriterion,
    RowLabels,
    ranking_criterion_class,
    value_balance,
)
from ..losses.global_ranking import RankingGroup, exchange_checked, global_mean, ranking_group
from .matched_queries import Indices, MatchedQueries, QueryBoxes, Targets, matched_queries, pair_box_losses

__all__ = ["BOX_TERMS", "RANKINGS", "SetRankingLoss"]

#: How the matched boxes are trained (:class:`SetRankingLoss`).
BOX_TERMS = ("value_balanced", "fixed", "own")
#: One ranking of each layer over all workers, or one per worker (BRS-DETR's).
RANKINGS = ("global", "local")
#: (l1_weight, giou_weight) when not given: DETR's fixed weights; BRS-DETR's value balance (each box term equal in
#: value to the ranking loss); the criterion's own localisation (its GIoU inside), with the L1 term value-balanced.
DEFAULT_BOX_WEIGHTS = {"fixed": (5.0, 2.0), "value_balanced": (1.0, 1.0), "own": (1.0, 0.0)}
#: Hyperparameters of the project's criteria a set-prediction loss fixes when they are not given: GIoU errors, and
#: tau 0 in aLRP's E_loc = (1 - GIoU) / 2 / (1 - tau) (a Hungarian matching has no IoU threshold). Each applies only
#: to a criterion whose constructor takes it.
CRITERION_DEFAULTS: Dict[str, Any] = {"loc_error_kind": "giou", "loc_loss": "giou", "tau": 0.0}


class SetRankingLoss(nn.Module):
    """The per-layer set-prediction ranking loss (module docstring).

    ``forward`` returns, each already weighted (sum them all):

    * ``loss_rank``: ``rank_weight`` times the criterion's ranking loss (Rank & Sort: L_rank + L_sort, ranked by the
      IoU of each matched box, detached; aLRP: L_cls with the matched boxes' E_loc in the positives' errors; AP: the
      AP Loss);
    * ``loss_bbox``: the L1 distance of the matched normalised cxcywh boxes (summed over the four, averaged over the
      matched pairs); ``box_terms`` "fixed": ``l1_weight`` times it; "value_balanced" and "own": ``l1_weight`` times
      it rescaled to the value of ``loss_rank`` (detached factor, BRS-DETR);
    * ``loss_giou``: 1 - GIoU of the matched boxes averaged over the matched pairs, weighted as ``loss_bbox`` (not
      with "own");
    * ``loss_loc`` (only "own"): the criterion's own localisation loss (aLRP: L_loc), rescaled to the value of
      ``loss_rank``;
    * ``loss_corr`` (only ``corr_weight`` > 0): ``corr_weight`` times Correlation Loss of the matched pairs.

    The box terms average over the matched pairs of all workers when a process group is initialised. With
    ``ranking`` "global" (and > 1 workers) every worker returns the loss of the whole batch and its local gradients
    times the world size, so that DistributedDataParallel's average is the gradient of the whole batch; every worker
    must call the loss equally often, in the same order. Without a matched pair on any worker every term is a zero
    connected to the inputs.
    """

    def __init__(
        self,
        criterion: Union[str, RankingCriterion] = "RankSortCriterion",
        *,
        box_terms: str = "value_balanced",
        l1_weight: Optional[float] = None,
        giou_weight: Optional[float] = None,
        rank_weight: float = 1.0,
        corr_weight: float = 0.0,
        corr_kind: str = "spearman",
        ranking: str = "global",
        **criterion_options: Any,
    ):
        """
        Args:
            criterion: a registered criterion's name (``alrp_d2.criteria.RANKING_CRITERION_REGISTRY``), built with
                ``criterion_options`` and :data:`CRITERION_DEFAULTS`; or a criterion (then no options).
            box_terms: one of :data:`BOX_TERMS` (class docstring).
            l1_weight, giou_weight: the box terms' weights (>= 0); None: :data:`DEFAULT_BOX_WEIGHTS`.
            rank_weight: the ranking loss's weight (BRS-DETR: 2).
            corr_weight, corr_kind: Correlation Loss's weight (0: none) and coefficient
                (:data:`alrp_d2.losses.CORRELATION_KINDS`).
            ranking: one of :data:`RANKINGS`.
        """
        super().__init__()
        if box_terms not in BOX_TERMS:
            raise ValueError(f"box_terms must be one of {BOX_TERMS}, got {box_terms!r}")
        if ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {ranking!r}")
        default_l1, default_giou = DEFAULT_BOX_WEIGHTS[box_terms]
        weights = {
            "l1_weight": default_l1 if l1_weight is None else l1_weight,
            "giou_weight": default_giou if giou_weight is None else giou_weight,
            "rank_weight": rank_weight,
            "corr_weight": corr_weight,
        }
        for name, value in weights.items():
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if box_terms == "own" and weights["giou_weight"] != 0:
            raise ValueError(
                f"giou_weight must be 0 (or None) with box_terms 'own': the criterion's own localisation loss replaces "
                f"the GIoU term, got {giou_weight!r}"
            )
        self.criterion = _criterion(criterion, criterion_options)
        self.box_terms = box_terms
        self.l1_weight = float(weights["l1_weight"])
        self.giou_weight = float(weights["giou_weight"])
        self.rank_weight = float(rank_weight)
        self.ranking = ranking
        self.correlation = CorrelationTerm(corr_kind, float(corr_weight), per_level=False) if corr_weight > 0 else None

    def forward(self, logits: Tensor, pred_boxes: Tensor, indices: Indices, targets: Targets) -> Dict[str, Tensor]:
        """
        Args:
            logits: (B, Q, C) the layer's class logits (sigmoid classes).
            pred_boxes: (B, Q, 4) its boxes, normalised cxcywh.
            indices: per image, (query indices, target indices) of the matched pairs, as HF's matchers return them.
            targets: per image, ``{"class_labels": (T,), "boxes": (T, 4)}`` (normalised cxcywh).

        Returns:
            The weighted terms (class docstring).
        """
        group = ranking_group("global") if self.ranking == "global" else None
        matched = _validated(logits, pred_boxes, indices, targets, group)
        l1, giou, ious = pair_box_losses(pred_boxes, matched)
        source = QueryBoxes(pred_boxes, matched, ious)
        flat_logits = logits.reshape(matched.num_rows, matched.num_classes)
        ranked = self.criterion.targets(RowLabels(matched.row_labels(), matched.num_classes), source)
        output = self.criterion(flat_logits, ranked, self.criterion.localisation_losses(ranked.box, source), group)
        loss_rank = self.rank_weight * output.loss_cls
        losses = {"loss_rank": loss_rank}
        box_means = _box_means(torch.stack([l1, giou], dim=1), group)
        names: List[Tuple[str, float]] = [("loss_bbox", self.l1_weight)]
        if self.box_terms != "own":
            names.append(("loss_giou", self.giou_weight))
        for (name, weight), mean in zip(names, box_means.unbind()):
            scale = weight if self.box_terms == "fixed" else weight * value_balance(loss_rank.detach(), mean.detach())
            losses[name] = mean * scale
        if self.box_terms == "own":
            losses["loss_loc"] = output.loss_loc * value_balance(loss_rank.detach(), output.loss_loc.detach())
        if self.correlation is not None:
            losses["loss_corr"] = self.correlation(flat_logits, _positives(matched), source, group)
        return losses

    def extra_repr(self) -> str:
        return (
            f"criterion={self.criterion!r}, box_terms={self.box_terms!r}, l1_weight={self.l1_weight}, "
            f"giou_weight={self.giou_weight}, rank_weight={self.rank_weight}, ranking={self.ranking!r}"
        )


def _criterion(criterion: Union[str, RankingCriterion], options: Dict[str, Any]) -> RankingCriterion:
    """The criterion named ``criterion`` built with ``options`` over :data:`CRITERION_DEFAULTS`, or ``criterion``."""
    if isinstance(criterion, RankingCriterion):
        if options:
            raise ValueError(
                f"criterion options {sorted(options)} need a criterion name, not the criterion {criterion}"
            )
        return criterion
    if not isinstance(criterion, str):
        raise ValueError(f"criterion must be a registered criterion's name or a RankingCriterion, got {criterion!r}")
    cls = ranking_criterion_class(criterion, "criterion")
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {name: value for name, value in CRITERION_DEFAULTS.items() if name in accepted}
    try:
        return cls(**{**defaults, **options})
    except TypeError as error:
        raise ValueError(f"criterion {criterion} does not take the options {sorted(options)}: {error}") from None


def _validated(
    logits: Tensor, pred_boxes: Tensor, indices: Indices, targets: Targets, group: Optional[RankingGroup]
) -> MatchedQueries:
    """:func:`matched_queries`; with a group, invalid inputs on any worker raise on every worker (no worker is left
    waiting in a collective)."""
    result: List[MatchedQueries] = []

    def check() -> int:
        result.append(matched_queries(logits, pred_boxes, indices, targets))
        return len(result[0].row)

    exchange_checked(check, logits.device, group)
    return result[0]


def _box_means(values: Tensor, group: Optional[RankingGroup]) -> Tensor:
    """(K,) the mean of each column of the (P, K) per-pair ``values`` over the matched pairs: of all workers with a
    ranking group (the global value; the local gradient times the world size); otherwise this worker's sum over the
    number of pairs averaged over the workers of an initialised process group, at least 1 (BRS-DETR's and DETR's
    normaliser)."""
    if group is not None:
        return torch.stack([global_mean(column, group) for column in values.unbind(1)])
    count = torch.tensor(float(len(values)), dtype=torch.float64, device=values.device)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(count)
        count = count / dist.get_world_size()
    return values.sum(dim=0) / count.clamp_min(1.0).to(values.dtype)


def _positives(matched: MatchedQueries) -> PositiveTargets:
    """The matched pairs as the additive terms read positives."""
    valid = torch.ones(matched.num_rows, 1, dtype=torch.bool, device=matched.row.device)
    return PositiveTargets(matched.row, matched.label, valid, torch.ones((), dtype=torch.bool, device=valid.device))
