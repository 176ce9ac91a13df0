"""The set-prediction ranking loss as the ``loss_function`` of Hugging Face's DETR-family detectors (transformers
5.23): :func:`use_ranking_loss` switches a model to Rank & Sort, aLRP, AP Loss or any ranking criterion, and the model
then trains through its own ``model(pixel_values=..., labels=...)``, hence HF's ``Trainer``; :func:`restore_loss`
gives the model its own loss back.

The seam is the model's public ``loss_function`` (``PreTrainedModel.loss_function`` returns the value set there,
else ``LOSS_MAPPING[model.loss_type]``): the model's forward calls it with the logits and boxes of every decoder
layer and its family's other outputs (:mod:`.hf_families`, keyed by ``model.loss_type`` as HF keys its losses).

With ``box_terms="model"`` the criterion the model's own loss function builds runs as it is, but for its
classification terms: a subclass of HF's loss class records each set's matcher indices in their place
(:mod:`.hf_model_losses`), and the ranking terms of the same sets, with those indices, replace them. The box terms
(L1, GIoU, D-FINE's FGL and DDF, ...) are the model's own, computed by the model's own code, and each set is matched
once, as the stock model matches it. In the other modes the sets are ranked with the box terms of
:class:`SetRankingLoss`; Deformable-DETR's forward gives its loss function no encoder output, so its two-stage
encoder-proposal term (which HF's own loss omits) is added by a forward hook on the model.

This module, :mod:`.hf_families` and :mod:`.hf_model_losses` are the package's only ``transformers`` imports (the
``detr`` extra).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.models.deformable_detr.modeling_deformable_detr import DeformableDetrObjectDetectionOutput

from ..criteria import RankingCriterion
from .box_normaliser import BoxNormalisation, globally_normalised, split_key
from .hf_families import LOSS_FAMILIES, LossFamily, SetPrediction
from .hf_model_losses import LossCall, recorded_sets
from .labels_check import check_labels
from .set_matching import MatchingCost, match_sets
from .set_ranking_loss import MatchedSet, SetRankingLoss

__all__ = ["RankingLossFunction", "attach_ranking_loss", "restore_loss", "use_ranking_loss"]

Targets = Sequence[Dict[str, Tensor]]
LossOutput = Tuple[Tensor, Dict[str, Tensor], Optional[List[Dict[str, Tensor]]]]


def rank_sets(
    loss: SetRankingLoss,
    cost: Optional[MatchingCost],
    sets: Sequence[SetPrediction],
    labels: Targets,
    scores: Optional[Callable[[Tensor], Tensor]] = None,
) -> Dict[str, Tensor]:
    """The terms of every set, its keys suffixed by the set's: the sets without indices matched with ``cost`` on
    their logits (:func:`~alrp_d2.detr.set_matching.match_sets`: one host copy for all), each set's ``scores`` of its
    logits (the logits when None) ranked on its own, all sets in one :meth:`SetRankingLoss.forward` call (one ranking
    call for the whole step), in the same order on every worker. The one place that ranks a step's sets."""
    unmatched = [(prediction.logits, prediction.boxes) for prediction in sets if prediction.indices is None]
    matchings = iter(match_sets(cost, unmatched, labels) if cost is not None else [])
    matched = []
    for prediction in sets:
        indices = prediction.indices if prediction.indices is not None else next(matchings)
        ranked = prediction.logits if scores is None else scores(prediction.logits)
        matched.append(MatchedSet(ranked, prediction.boxes, indices))
    terms = loss(matched, labels)
    return {
        key + prediction.suffix: value for prediction, set_terms in zip(sets, terms) for key, value in set_terms.items()
    }


class RankingLossFunction:
    """A DETR's ``loss_function``: HF's call (``logits, labels, device, pred_boxes, config, outputs_class,
    outputs_coord`` and the family's other outputs) in, HF's ``(loss, loss_dict, auxiliary_outputs)`` out; the labels
    checked first (:func:`~alrp_d2.detr.labels_check.check_labels`).

    ``box_terms="model"``: ``loss_dict`` is the model's own, its classification keys replaced by ``loss_rank`` with
    the same suffixes (and ``loss_corr`` with ``corr_weight``); ``loss`` sums the model's weighted box terms and the
    ranking terms; with ``box_normaliser="global"`` the box terms the model divides by the worker's own targets
    rescaled to the targets of all workers (:mod:`.box_normaliser`). Other modes: every set of
    :attr:`LossFamily.ranked_sets` is matched with the cost of the model's matcher (:mod:`.set_matching`) and ranked
    by :attr:`loss` with its box terms, under the set's suffix; ``loss`` is the sum of all of them (HF's RT-DETR loss
    drops every key missing from its weight dict: here nothing is dropped).
    """

    def __init__(self, loss: SetRankingLoss, family: LossFamily, loss_type: str, config: Any):
        self.loss = loss
        self.family = family
        self.loss_type = loss_type
        self.cost = None if family.matching_cost is None else family.matching_cost(config)
        self.encoder_hook: Optional[torch.utils.hooks.RemovableHandle] = None

    def __call__(
        self,
        logits: Tensor,
        labels: Targets,
        device: torch.device,
        pred_boxes: Tensor,
        config: Any,
        outputs_class: Tensor,
        outputs_coord: Tensor,
        *positional: Any,
        **outputs: Any,
    ) -> LossOutput:
        check_labels(labels, config.num_labels)
        outputs = {**dict(zip(self.family.positional, positional)), **outputs}
        call = LossCall(logits, pred_boxes, outputs_class, outputs_coord, labels, config, outputs)
        if self.loss.box_terms == "model":
            return self.with_ranked_classification(call, device)
        assert self.family.ranked_sets is not None  # attach_ranking_loss refuses the mode otherwise
        predictions = self.family.ranked_sets(call)
        loss_dict = rank_sets(self.loss, self.cost, predictions, labels)
        return torch.stack(list(loss_dict.values())).sum(), loss_dict, auxiliary_outputs(predictions)

    def with_ranked_classification(self, call: LossCall, device: torch.device) -> LossOutput:
        """The model's own loss with its classification terms replaced by the ranking terms of the same sets: the
        criterion HF's loss function builds runs its ``forward`` (every matching, once per set, and the box terms)
        with each set's classification term recorded in place (:mod:`.hf_model_losses`); the recorded sets are then
        ranked with the indices HF's matcher gave them, all in one call."""
        family = self.family
        criterion = family.model_criterion(call.config).to(device)
        loss_outputs = family.model_outputs(call)
        box_dict = criterion(loss_outputs, call.labels)
        predictions = [
            SetPrediction(suffix, recorded.outputs["logits"], recorded.outputs["pred_boxes"], recorded.indices)
            for suffix, recorded in recorded_sets(criterion, loss_outputs, family.auxiliary_prefix)
        ]
        ranked = rank_sets(self.loss, self.cost, predictions, call.labels, family.scores)
        if self.loss.box_normaliser == "global":
            worker_terms = box_normalisation(family, self.loss_type, call.config).worker_terms
            num_targets = sum(len(label["class_labels"]) for label in call.labels)
            box_dict = globally_normalised(box_dict, predictions, num_targets, worker_terms, call.logits.device)
        weights = None if family.weights is None else family.weights(call.config)
        box_terms = [
            value * (1.0 if weights is None else weights[_unsuffixed(name, predictions)])
            for name, value in box_dict.items()
            if weights is None or _unsuffixed(name, predictions) in weights
        ]
        loss = torch.stack(box_terms + list(ranked.values())).sum()
        return loss, {**box_dict, **ranked}, loss_outputs.get("auxiliary_outputs")

    def encoder_proposal_hook(self, labels_position: int) -> Callable[..., Any]:
        """The forward hook of a two-stage Deformable-DETR that adds the ranking loss of the encoder's proposals
        (``enc_outputs_class`` [B, S, C], ``sigmoid(enc_outputs_coord_logits)``) with every target of class 0, as the
        two-stage Deformable-DETR of Zhu et al. trains its proposals (the top-k reads the class-0 logit), to
        ``output.loss`` and ``output.loss_dict`` (keys suffixed ``_enc``). ``labels_position``: the index of
        ``labels`` among the forward's positional arguments."""

        def hook(model: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> Any:
            labels = kwargs.get("labels", args[labels_position] if len(args) > labels_position else None)
            if labels is None:
                return output
            if not isinstance(output, DeformableDetrObjectDetectionOutput):
                raise TypeError(
                    "use_ranking_loss: a two-stage Deformable-DETR called with labels must return its ModelOutput "
                    f"(return_dict=True), got {type(output).__name__}"
                )
            assert output.enc_outputs_class is not None and output.enc_outputs_coord_logits is not None
            assert output.loss is not None and output.loss_dict is not None
            proposals = [{"class_labels": torch.zeros_like(t["class_labels"]), "boxes": t["boxes"]} for t in labels]
            encoder = SetPrediction("_enc", output.enc_outputs_class, output.enc_outputs_coord_logits.sigmoid(), None)
            terms = rank_sets(self.loss, self.cost, [encoder], proposals)
            output.loss = output.loss + torch.stack(list(terms.values())).sum()
            output.loss_dict.update(terms)
            return output

        return hook


def auxiliary_outputs(predictions: Sequence[SetPrediction]) -> Optional[List[Dict[str, Tensor]]]:
    """HF's ``outputs.auxiliary_outputs``: the intermediate decoder layers' and the encoder's predictions (not the
    denoising ones), ``None`` without intermediate layers."""
    auxiliary = [
        {"logits": p.logits, "pred_boxes": p.boxes} for p in predictions if p.suffix.startswith(("_aux", "_enc"))
    ]
    return auxiliary or None


def _unsuffixed(name: str, predictions: Sequence[SetPrediction]) -> str:
    """``name`` without the suffix of the set it belongs to (the longest that ends it)."""
    return split_key(name, predictions)[0]


def box_normalisation(family: LossFamily, loss_type: str, config: Any) -> BoxNormalisation:
    """How the family's own loss normalises its box terms with ``config``; a ValueError naming why where
    ``box_normaliser="global"`` is not supported."""
    normalisation = family.box_normalisation(config)
    if normalisation.unsupported:
        raise ValueError(
            f"box_normaliser='global' is not supported for {loss_type}: {normalisation.unsupported} (supported: "
            "RT-DETR v1, v2, D-FINE, DEIMv2 with use_dense_one_to_one=False; LW-DETR and RF-DETR normalise over all "
            "workers already)"
        )
    return normalisation


def loss_family(model: PreTrainedModel) -> LossFamily:
    """The model's family by its ``loss_type``; a TypeError naming the supported classes otherwise."""
    family = LOSS_FAMILIES.get(str(getattr(model, "loss_type", None)))
    if family is None:
        raise TypeError(
            f"use_ranking_loss supports {', '.join(LOSS_FAMILIES)}, got {type(model).__name__} "
            f"(loss_type {getattr(model, 'loss_type', None)!r})"
        )
    return family


def restore_loss(model: PreTrainedModel) -> PreTrainedModel:
    """Gives ``model`` its own loss back (``LOSS_MAPPING[model.loss_type]``): removes the ranking loss function and
    every hook :func:`use_ranking_loss` added. A model that was not switched is returned unchanged; anything but a
    ``PreTrainedModel`` raises a TypeError naming it."""
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"restore_loss takes a Hugging Face PreTrainedModel, got {type(model).__name__}")
    previous = model.__dict__.get("_loss_function")
    if isinstance(previous, RankingLossFunction):
        if previous.encoder_hook is not None:
            previous.encoder_hook.remove()
        # PreTrainedModel.loss_function has a public setter but no deleter: the value it set is removed where it lies.
        del model._loss_function
    return model


def attach_ranking_loss(model: PreTrainedModel, loss: SetRankingLoss) -> PreTrainedModel:
    """Trains ``model`` with ``loss`` on every set of its predictions (:class:`RankingLossFunction`), replacing a
    ranking loss attached before. The loss is not saved by ``save_pretrained``: attach it again after
    ``from_pretrained``."""
    family = loss_family(model)
    if loss.box_terms != "model" and family.ranked_sets is None:
        supported = sorted(name for name, other in LOSS_FAMILIES.items() if other.ranked_sets is not None)
        raise ValueError(
            f"{type(model).__name__} takes box_terms='model' (its own box terms), got {loss.box_terms!r}; the other "
            f"modes support {', '.join(supported)}"
        )
    if loss.box_normaliser == "global":
        box_normalisation(family, model.loss_type, model.config)
    restore_loss(model)
    loss_function = RankingLossFunction(loss, family, model.loss_type, model.config)
    config = model.config
    if loss.box_terms != "model" and config.model_type == "deformable_detr" and config.two_stage:
        parameters = list(inspect.signature(model.forward).parameters)
        loss_function.encoder_hook = model.register_forward_hook(
            loss_function.encoder_proposal_hook(parameters.index("labels")), with_kwargs=True
        )
    model.loss_function = loss_function
    return model


def config_box_weights(model: PreTrainedModel) -> Dict[str, float]:
    """The L1 and GIoU weights of the model's config (RT-DETR ``weight_loss_bbox`` / ``weight_loss_giou``,
    Deformable-DETR ``bbox_loss_coefficient`` / ``giou_loss_coefficient``): the fixed box weights' defaults."""
    config = model.config
    if model.config.model_type == "deformable_detr":
        return {"l1_weight": config.bbox_loss_coefficient, "giou_weight": config.giou_loss_coefficient}
    return {"l1_weight": config.weight_loss_bbox, "giou_weight": config.weight_loss_giou}


def use_ranking_loss(
    model: PreTrainedModel, criterion: RankingCriterion, *, box_terms: str = "model", **options: Any
) -> PreTrainedModel:
    """Trains ``model`` with ``SetRankingLoss(criterion, box_terms=box_terms, **options)`` on every set of its
    predictions (:func:`attach_ranking_loss`); with ``box_terms="fixed"`` and no box weights given, the model config's.

    Args:
        model: a model of :data:`~alrp_d2.detr.hf_families.LOSS_FAMILIES`.
        criterion: a ranking criterion (``RankSortCriterion(delta=0.5, loc_error_kind="giou")``, or one built by
            name: ``alrp_d2.detr.set_prediction_criterion("AlrpCriterion")``).
        box_terms: "model" (every model): the ranking terms replace the model's classification terms, its box terms
            stay its own; "value_balanced", "fixed" or "own" (``RTDetrForObjectDetection``,
            ``RTDetrV2ForObjectDetection``, ``DeformableDetrForObjectDetection``): :class:`SetRankingLoss`'s box
            terms in place of the model's whole loss.
        options: ``SetRankingLoss``'s other keywords (``ranking``, ``rank_weight``, ``box_normaliser``, ...).

    Returns:
        ``model``, switched.
    """
    family = loss_family(model)
    if box_terms == "fixed" and family.ranked_sets is not None:  # the others are refused by attach_ranking_loss
        options = {**config_box_weights(model), **options}
    return attach_ranking_loss(model, SetRankingLoss(criterion, box_terms=box_terms, **options))
