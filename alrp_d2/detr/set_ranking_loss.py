"""The ranking loss of one decoder layer of a DETR-family detector (docs/detr.md, "The set-prediction ranking loss").

The matched (query, class) pairs are the positives of one ranking of the layer's (query, class) logits; every other
(query, class) entry is a negative (the unmatched queries, the denoising groups' padding slots and contrastive
queries alike). A ranking criterion ranks them, as a head's criterion (its output checked, its statistics recorded,
its ``loc_factor`` honoured); the matched boxes add L1 and GIoU terms (fixed weights, or each rescaled to the ranking
loss's value as BRS-DETR does), the criterion's own localisation loss, or nothing (the model's own box terms,
:func:`alrp_d2.detr.use_ranking_loss`). All sets of a training step (the decoder layers, the denoising sets, the
encoder's proposals) are ranked in one criterion call (:meth:`SetRankingLoss.forward`), each on its own.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..criteria import (
    CorrelationTerm,
    CriterionOutput,
    CriterionSet,
    PositiveTargets,
    RankingCriterion,
    RowLabels,
    value_balance,
)
from ..criteria.output_check import check_criterion_outputs
from ..losses.global_ranking import RankingGroup, check_ranking, exchange_checked, global_mean, ranking_group
from ..losses.ranking_statistics import RankingStatistics
from .box_normaliser import check_box_normaliser
from .matched_queries import Indices, MatchedQueries, QueryBoxes, Targets, matched_sets, pair_box_losses, pair_ious

__all__ = ["BOX_TERMS", "MatchedSet", "SetRankingLoss"]

#: How the matched boxes are trained (:class:`SetRankingLoss`).
BOX_TERMS = ("value_balanced", "fixed", "own", "model")
#: (l1_weight, giou_weight) when not given: BRS-DETR's value balance (each box term equal in value to the ranking
#: loss); DETR's fixed weights; the criterion's own localisation (its GIoU inside), with the L1 term value-balanced;
#: none (the model's own box terms).
DEFAULT_BOX_WEIGHTS = {"value_balanced": (1.0, 1.0), "fixed": (5.0, 2.0), "own": (1.0, 0.0), "model": (0.0, 0.0)}


class MatchedSet(NamedTuple):
    """One set of a step's predictions as :meth:`SetRankingLoss.forward` takes it: (B, Q, C) logits, (B, Q, 4) boxes
    and the matched pairs' indices."""

    logits: Tensor
    pred_boxes: Tensor
    indices: Indices


class _Layer(NamedTuple):
    """One set's matched pairs, their (P, 2) L1 and 1 - GIoU (None with the model's box terms), its boxes as the
    criterion reads them and the criterion's inputs."""

    matched: MatchedQueries
    pair_losses: Optional[Tensor]
    source: QueryBoxes
    ranking: CriterionSet


def box_term_weights(
    box_terms: str,
    l1_weight: Optional[float],
    giou_weight: Optional[float],
    rank_weight: float,
    corr_weight: float,
) -> Dict[str, float]:
    """The weights of :class:`SetRankingLoss`'s terms, checked against ``box_terms`` (:data:`DEFAULT_BOX_WEIGHTS`
    where a box weight is None)."""
    if box_terms not in BOX_TERMS:
        raise ValueError(f"box_terms must be one of {BOX_TERMS}, got {box_terms!r}")
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
    if box_terms == "model" and (l1_weight is not None or giou_weight is not None):
        raise ValueError(
            f"l1_weight and giou_weight must be None with box_terms 'model': the model's own box terms and weights "
            f"replace them, got {l1_weight!r} and {giou_weight!r}"
        )
    if box_terms == "own" and weights["giou_weight"] != 0:
        raise ValueError(
            f"giou_weight must be 0 (or None) with box_terms 'own': the criterion's own localisation loss replaces "
            f"the GIoU term, got {giou_weight!r}"
        )
    return {name: float(value) for name, value in weights.items()}


class SetRankingLoss(nn.Module):
    """The per-layer set-prediction ranking loss (module docstring).

    ``forward`` returns per set, each already weighted (sum them all):

    * ``loss_rank``: ``rank_weight`` times the criterion's ranking loss (Rank & Sort: L_rank + L_sort, ranked by the
      IoU of each matched box, detached; aLRP: L_cls with the matched boxes' E_loc in the positives' errors; AP: the
      AP Loss);
    * ``loss_bbox`` (not with "model"): the L1 distance of the matched normalised cxcywh boxes (summed over the four,
      averaged over the matched pairs); ``box_terms`` "fixed": ``l1_weight`` times it; "value_balanced" and "own":
      ``l1_weight`` times it rescaled to the value of ``loss_rank`` (detached factor, BRS-DETR; a term of value 0
      stays 0);
    * ``loss_giou`` (only "value_balanced" and "fixed"): 1 - GIoU of the matched boxes averaged over the matched
      pairs, weighted as ``loss_bbox``;
    * ``loss_loc`` (only "own"): the criterion's own localisation loss times its ``loc_factor`` of the step (aLRP:
      1; Rank & Sort: its value balance), rescaled to the value of ``loss_rank``;
    * ``loss_corr`` (only ``corr_weight`` > 0): ``corr_weight`` times Correlation Loss of the matched pairs.

    ``ranking`` "per_worker" (BRS-DETR's) ranks this worker's images; "global" ranks the images of all workers as one
    ranking: every worker returns the loss of the whole batch and its local gradients times the world size, so that
    DistributedDataParallel's average is the gradient of the whole batch (every worker must call the loss equally
    often, in the same order), and the box terms average over the matched pairs of all workers. Without a matched
    pair on any worker every term is a zero connected to the inputs. :meth:`take_statistics` gives the criterion's
    statistics of the last call (``cls``, ``loc`` and the criterion's own values), as a head's.
    """

    def __init__(
        self,
        criterion: RankingCriterion,
        *,
        box_terms: str = "value_balanced",
        l1_weight: Optional[float] = None,
        giou_weight: Optional[float] = None,
        rank_weight: float = 1.0,
        corr_weight: float = 0.0,
        corr_kind: str = "spearman",
        ranking: str = "per_worker",
        box_normaliser: str = "model",
    ):
        """
        Args:
            criterion: the ranking criterion (e.g. ``RankSortCriterion(delta=0.5, loc_error_kind="giou")``;
                :func:`alrp_d2.detr.set_prediction_criterion` builds a registered one by name with the set-prediction
                defaults).
            box_terms: one of :data:`BOX_TERMS` (class docstring).
            l1_weight, giou_weight: the box terms' weights (>= 0); None: :data:`DEFAULT_BOX_WEIGHTS`.
            rank_weight: the ranking loss's weight (BRS-DETR: 2).
            corr_weight, corr_kind: Correlation Loss's weight (0: none) and coefficient
                (:data:`alrp_d2.losses.CORRELATION_KINDS`).
            ranking: one of :data:`alrp_d2.losses.global_ranking.RANKINGS`.
            box_normaliser: with ``box_terms="model"``, one of :data:`alrp_d2.detr.box_normaliser.BOX_NORMALISERS`:
                under DDP the model's own normaliser of its box terms, or the targets of all workers (the box terms
                a model normalises by the worker's own targets rescaled, :mod:`alrp_d2.detr.box_normaliser`);
                "model" with the other modes (they normalise over all workers already).
        """
        super().__init__()
        if not isinstance(criterion, RankingCriterion):
            raise ValueError(
                f"criterion must be a RankingCriterion (e.g. RankSortCriterion(delta=0.5, loc_error_kind='giou'), or "
                f"alrp_d2.detr.set_prediction_criterion(name)), got {criterion!r}"
            )
        weights = box_term_weights(box_terms, l1_weight, giou_weight, rank_weight, corr_weight)
        check_ranking(ranking)
        check_box_normaliser(box_normaliser, box_terms)
        self.criterion = criterion
        self.box_terms = box_terms
        self.l1_weight = weights["l1_weight"]
        self.giou_weight = weights["giou_weight"]
        self.rank_weight = weights["rank_weight"]
        self.ranking = ranking
        self.box_normaliser = box_normaliser
        self.correlation = (
            CorrelationTerm(corr_kind, weights["corr_weight"], per_level=False) if corr_weight > 0 else None
        )
        self._statistics: Optional[RankingStatistics] = None

    def forward(self, sets: Sequence[MatchedSet], targets: Targets) -> List[Dict[str, Tensor]]:
        """The terms of every set of a step (e.g. every decoder layer, denoising set and the encoder's proposals; one
        layer is a list of one): each set's matched pairs and box terms its own, all sets ranked by one call of the
        criterion (:meth:`RankingCriterion.__call__`: one call of the segmented ranking for aLRP, AP and Rank & Sort
        Loss), its output checked. :meth:`take_statistics` then gives the last set's statistics. Every worker of a
        global ranking passes as many sets.

        Args:
            sets: per set, (B, Q, C) class logits (sigmoid classes), (B, Q, 4) boxes (normalised cxcywh) and per
                image (query indices, target indices) of the matched pairs, as HF's matchers return them.
            targets: per image, ``{"class_labels": (T,), "boxes": (T, 4)}`` (normalised cxcywh).

        Returns:
            Per set, its weighted terms (class docstring).
        """
        if not sets:
            return []
        group = ranking_group(self.ranking)  # per call: the process group may start after the model is built
        layers = self._layers(sets, targets, group)
        rankings = [layer.ranking for layer in layers]
        outputs = self.criterion(rankings, group)
        check_criterion_outputs(self.criterion, outputs, rankings)
        return [self._terms(layer, output, group) for layer, output in zip(layers, outputs)]

    def _layers(self, sets: Sequence[MatchedSet], targets: Targets, group: Optional[RankingGroup]) -> List[_Layer]:
        """The validated matched pairs of every set, their box losses (only the IoUs with the model's box terms: all
        sets' pairs at once) and each set's criterion inputs."""
        matched = _validated(sets, targets, group)
        pred_boxes = [matched_set.pred_boxes for matched_set in sets]
        if self.box_terms == "model":
            ious = pair_ious(pred_boxes, matched)
            pair_losses: Sequence[Optional[Tensor]] = [None] * len(sets)
        else:
            pair_losses, ious = pair_box_losses(pred_boxes, matched)
        layers = []
        for (logits, boxes, _), pairs, losses, set_ious in zip(sets, matched, pair_losses, ious):
            source = QueryBoxes(boxes, pairs, set_ious)
            flat_logits = logits.reshape(pairs.num_rows, pairs.num_classes)
            ranked = self.criterion.targets(RowLabels(pairs.row_labels(), pairs.num_classes), source)
            loc_losses = self.criterion.localisation_losses(ranked.box, source)
            layers.append(_Layer(pairs, losses, source, CriterionSet(flat_logits, ranked, loc_losses)))
        return layers

    def _terms(self, layer: _Layer, output: CriterionOutput, group: Optional[RankingGroup]) -> Dict[str, Tensor]:
        """The weighted terms of one set from the criterion's ``output``; its statistics recorded."""
        self._statistics = output.statistics.with_values(cls=output.loss_cls, loc=output.loss_loc)
        loss_rank = self.rank_weight * output.loss_cls
        losses = {"loss_rank": loss_rank}
        if layer.pair_losses is not None:
            losses.update(self._box_terms(loss_rank, layer.pair_losses, group))
        if self.box_terms == "own":
            own = output.loc_factor * output.loss_loc
            losses["loss_loc"] = own * value_balance(loss_rank.detach(), own.detach())
        if self.correlation is not None:
            flat_logits = layer.ranking.logits
            losses["loss_corr"] = self.correlation(flat_logits, _positives(layer.matched), layer.source, group)
        return losses

    def _box_terms(self, loss_rank: Tensor, pair_losses: Tensor, group: Optional[RankingGroup]) -> Dict[str, Tensor]:
        """``loss_bbox`` and (but with "own") ``loss_giou`` from the (P, 2) L1 and 1 - GIoU of the pairs."""
        names: List[Tuple[str, float]] = [("loss_bbox", self.l1_weight)]
        if self.box_terms != "own":
            names.append(("loss_giou", self.giou_weight))
        terms = {}
        for (name, weight), mean in zip(names, _box_means(pair_losses, group).unbind()):
            scale = weight if self.box_terms == "fixed" else weight * value_balance(loss_rank.detach(), mean.detach())
            terms[name] = mean * scale
        return terms

    def take_statistics(self) -> Optional[RankingStatistics]:
        """The criterion's statistics of the last set of the last :meth:`forward` (None if there was none since the
        last call)."""
        statistics, self._statistics = self._statistics, None
        return statistics

    def extra_repr(self) -> str:
        return (
            f"criterion={self.criterion!r}, box_terms={self.box_terms!r}, l1_weight={self.l1_weight}, "
            f"giou_weight={self.giou_weight}, rank_weight={self.rank_weight}, ranking={self.ranking!r}, "
            f"box_normaliser={self.box_normaliser!r}"
        )


def _validated(sets: Sequence[MatchedSet], targets: Targets, group: Optional[RankingGroup]) -> List[MatchedQueries]:
    """:func:`matched_sets`; with a group, invalid inputs on any worker raise on every worker (no worker is left
    waiting in a collective)."""
    result: List[List[MatchedQueries]] = []

    def check() -> int:
        result.append(matched_sets(sets, targets))
        return sum(len(pairs.row) for pairs in result[0])

    exchange_checked(check, sets[0].logits.device, group)
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
