"""The set-prediction ranking loss as the ``loss_function`` of Hugging Face's DETR-family detectors (transformers
5.23): :func:`use_ranking_loss` switches an ``RTDetrForObjectDetection``, ``RTDetrV2ForObjectDetection`` or
``DeformableDetrForObjectDetection`` (one- or two-stage) to Rank & Sort, aLRP, AP Loss or any ranking criterion, and
the model then trains through its own ``model(pixel_values=..., labels=...)``, hence HF's ``Trainer``;
:func:`restore_loss` gives the model its own loss back.

The seam is the model's public ``loss_function`` (``PreTrainedModel.loss_function`` returns the value set there,
else ``LOSS_MAPPING[model.loss_type]``): the model's forward calls it with the logits and boxes of every decoder
layer and, for RT-DETR, the encoder's top-k proposals and the denoising meta values. What a family's call holds is
keyed as HF keys its loss, by ``model.loss_type`` (:data:`LOSS_FAMILIES`). Deformable-DETR's forward gives its loss
function no encoder output, so its two-stage encoder-proposal term (which HF's own loss omits) is added by a forward
hook on the model, from ``outputs.enc_outputs_class`` and ``enc_outputs_coord_logits``.

This is the only module of the package that imports ``transformers`` (the ``detr`` extra).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.loss.loss_deformable_detr import DeformableDetrHungarianMatcher
from transformers.loss.loss_rt_detr import RTDetrHungarianMatcher, RTDetrLoss
from transformers.models.deformable_detr.modeling_deformable_detr import DeformableDetrObjectDetectionOutput

from ..criteria import RankingCriterion
from .set_ranking_loss import SetRankingLoss

__all__ = [
    "LOSS_FAMILIES",
    "RankingLossFunction",
    "SetPrediction",
    "attach_ranking_loss",
    "restore_loss",
    "use_ranking_loss",
]

Targets = Sequence[Dict[str, Tensor]]
Indices = List[Tuple[Tensor, Tensor]]
LossOutput = Tuple[Tensor, Dict[str, Tensor], Optional[List[Dict[str, Tensor]]]]


class SetPrediction(NamedTuple):
    """The predictions ranked together: one decoder layer's matching queries, its denoising queries, or the encoder's
    proposals. ``indices`` are given for the denoising queries and ``None`` where the Hungarian matcher assigns them."""

    suffix: str  # of the loss keys: "" (last decoder layer), "_aux_{i}", "_dn_{i}" or "_enc"
    logits: Tensor  # [B, Q, C]
    boxes: Tensor  # [B, Q, 4], normalised cxcywh
    indices: Optional[Indices]


def layer_suffix(layer: int, num_layers: int) -> str:
    """The loss-key suffix of decoder layer ``layer``: none for the last one, as HF's keys."""
    return "" if layer == num_layers - 1 else f"_aux_{layer}"


def decoder_layers(num_layers: int, auxiliary_loss: bool) -> range:
    """Every decoder layer with ``config.auxiliary_loss`` (HF's switch of the intermediate layers' losses), else the
    last one."""
    return range(num_layers) if auxiliary_loss else range(num_layers - 1, num_layers)


def rt_detr_sets(
    outputs_class: Tensor, outputs_coord: Tensor, labels: Targets, config: Any, outputs: Dict[str, Any]
) -> List[SetPrediction]:
    """RT-DETR (v1, v2): per decoder layer its matching queries and, in training, its denoising queries (the first
    ``dn_num_split[0]`` queries, matched as HF's ``RTDetrLoss.get_cdn_matched_indices``); then the encoder's top-k
    proposals. ``outputs_class`` [B, L, Q, C] and ``outputs_coord`` [B, L, Q, 4]."""
    classes, coords = outputs_class.transpose(0, 1), outputs_coord.transpose(0, 1)
    num_layers = len(classes)
    layers = decoder_layers(num_layers, config.auxiliary_loss)
    denoising = outputs.get("denoising_meta_values")
    num_dn = 0 if denoising is None else denoising["dn_num_split"][0]
    predictions = [
        SetPrediction(layer_suffix(i, num_layers), classes[i][:, num_dn:], coords[i][:, num_dn:], None) for i in layers
    ]
    if denoising is not None:
        dn_indices = RTDetrLoss.get_cdn_matched_indices(denoising, labels)
        predictions += [
            SetPrediction(f"_dn_{i}", classes[i][:, :num_dn], coords[i][:, :num_dn], dn_indices) for i in layers
        ]
    encoder_logits, encoder_boxes = outputs.get("enc_topk_logits"), outputs.get("enc_topk_bboxes")
    if encoder_logits is not None and encoder_boxes is not None:
        predictions.append(SetPrediction("_enc", encoder_logits, encoder_boxes, None))
    return predictions


def deformable_detr_sets(
    outputs_class: Tensor, outputs_coord: Tensor, labels: Targets, config: Any, outputs: Dict[str, Any]
) -> List[SetPrediction]:
    """Deformable-DETR: per decoder layer its queries; ``outputs_class`` [L, B, Q, C], ``outputs_coord``
    [L, B, Q, 4]."""
    num_layers = len(outputs_class)
    return [
        SetPrediction(layer_suffix(i, num_layers), outputs_class[i], outputs_coord[i], None)
        for i in decoder_layers(num_layers, config.auxiliary_loss)
    ]


class LossFamily(NamedTuple):
    """What the loss function of one family of HF models is called with: its sets of predictions and its matcher."""

    sets: Callable[[Tensor, Tensor, Targets, Any, Dict[str, Any]], List[SetPrediction]]
    matcher: Callable[[Any], nn.Module]


RT_DETR_FAMILY = LossFamily(rt_detr_sets, RTDetrHungarianMatcher)
DEFORMABLE_DETR_FAMILY = LossFamily(
    deformable_detr_sets,
    lambda config: DeformableDetrHungarianMatcher(config.class_cost, config.bbox_cost, config.giou_cost),
)
#: The families by HF's ``model.loss_type`` (the keys of ``transformers.loss.loss_utils.LOSS_MAPPING``).
LOSS_FAMILIES: Dict[str, LossFamily] = {
    "RTDetrForObjectDetection": RT_DETR_FAMILY,
    "RTDetrV2ForObjectDetection": RT_DETR_FAMILY,
    "DeformableDetrForObjectDetection": DEFORMABLE_DETR_FAMILY,
}


def rank_sets(
    loss: SetRankingLoss, matcher: nn.Module, sets: Sequence[SetPrediction], labels: Targets
) -> Dict[str, Tensor]:
    """The terms of every set, its keys suffixed by the set's: each set matched by ``matcher`` (the denoising sets by
    their known targets) and ranked on its own by ``loss``, in the same order on every worker. The one place that
    ranks a step's sets."""
    loss_dict: Dict[str, Tensor] = {}
    for prediction in sets:
        indices = prediction.indices
        if indices is None:
            indices = matcher({"logits": prediction.logits, "pred_boxes": prediction.boxes}, labels)
        terms = loss(prediction.logits, prediction.boxes, indices, labels)
        loss_dict.update((key + prediction.suffix, value) for key, value in terms.items())
    return loss_dict


class RankingLossFunction:
    """A DETR's ``loss_function``: HF's call (``logits, labels, device, pred_boxes, config, outputs_class,
    outputs_coord`` and the family's keywords) in, HF's ``(loss, loss_dict, auxiliary_outputs)`` out.

    Every set of predictions (:class:`SetPrediction`) is matched by HF's own Hungarian matcher with the model
    config's costs and ranked on its own by :attr:`loss`; its terms enter ``loss_dict`` under their keys with the
    set's suffix, already weighted, and ``loss`` is the sum of all of them (HF's RT-DETR loss drops every key missing
    from its weight dict: here nothing is dropped). With ``ranking="global"`` the loss ranks and normalises over all
    workers: HF's ``num_boxes``, a per-worker count, is not used.
    """

    def __init__(self, loss: SetRankingLoss, family: LossFamily, config: Any):
        self.loss = loss
        self.family = family
        self.matcher = family.matcher(config)
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
        **outputs: Any,
    ) -> LossOutput:
        predictions = self.family.sets(outputs_class, outputs_coord, labels, config, outputs)
        loss_dict = rank_sets(self.loss, self.matcher, predictions, labels)
        return torch.stack(list(loss_dict.values())).sum(), loss_dict, auxiliary_outputs(predictions)

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
            terms = rank_sets(self.loss, self.matcher, [encoder], proposals)
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
    every hook :func:`use_ranking_loss` added. A model that was not switched is returned unchanged."""
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
    restore_loss(model)
    loss_function = RankingLossFunction(loss, family, model.config)
    if model.config.model_type == "deformable_detr" and model.config.two_stage:
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


def use_ranking_loss(model: PreTrainedModel, criterion: RankingCriterion, **options: Any) -> PreTrainedModel:
    """Trains ``model`` with ``SetRankingLoss(criterion, **options)`` on every set of its predictions
    (:func:`attach_ranking_loss`); with ``box_terms="fixed"`` and no box weights given, the model config's.

    Args:
        model: an ``RTDetrForObjectDetection``, ``RTDetrV2ForObjectDetection`` or
            ``DeformableDetrForObjectDetection``.
        criterion: a ranking criterion (``RankSortCriterion(delta=0.5, loc_error_kind="giou")``, or one built by
            name: ``alrp_d2.detr.set_prediction_criterion("AlrpCriterion")``).
        options: ``SetRankingLoss``'s keywords (``box_terms``, ``ranking``, ``rank_weight``, ...).

    Returns:
        ``model``, switched.
    """
    loss_family(model)
    if options.get("box_terms") == "fixed":
        options = {**config_box_weights(model), **options}
    return attach_ranking_loss(model, SetRankingLoss(criterion, **options))
