"""The set-prediction ranking loss as the ``loss_function`` of Hugging Face's DETR-family detectors (transformers
5.23): :func:`use_ranking_loss` switches an ``RTDetrForObjectDetection``, ``RTDetrV2ForObjectDetection`` or
``DeformableDetrForObjectDetection`` (one- or two-stage) to Rank & Sort, aLRP, AP Loss or any registered criterion,
and the model then trains through its own ``model(pixel_values=..., labels=...)``, hence HF's ``Trainer``.

The seam is the model's ``loss_function`` (``PreTrainedModel.loss_function`` returns ``model._loss_function`` when it
is set, else ``LOSS_MAPPING[model.loss_type]``): the model's forward calls it with the logits and boxes of every
decoder layer and, for RT-DETR, the encoder's top-k proposals and the denoising meta values. Deformable-DETR's forward
gives its loss function no encoder output, so its two-stage encoder-proposal term (which HF's own loss omits) is added
by a forward hook on the model, from ``outputs.enc_outputs_class`` and ``enc_outputs_coord_logits``.

This is the only module of the package that imports ``transformers`` (the ``detr`` extra).
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from transformers import (
    DeformableDetrForObjectDetection,
    PreTrainedModel,
    RTDetrForObjectDetection,
    RTDetrV2ForObjectDetection,
)
from transformers.loss.loss_deformable_detr import DeformableDetrHungarianMatcher
from transformers.loss.loss_rt_detr import RTDetrHungarianMatcher, RTDetrLoss
from transformers.models.deformable_detr.modeling_deformable_detr import DeformableDetrObjectDetectionOutput

from .set_ranking_loss import SetRankingLoss

__all__ = ["RankingLossFunction", "SetPrediction", "use_ranking_loss"]

Indices = List[Tuple[Tensor, Tensor]]
Targets = Sequence[Dict[str, Tensor]]

RT_DETR_MODELS = (RTDetrForObjectDetection, RTDetrV2ForObjectDetection)


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


def rt_detr_predictions(
    outputs_class: Tensor,
    outputs_coord: Tensor,
    enc_topk_logits: Optional[Tensor],
    enc_topk_bboxes: Optional[Tensor],
    denoising_meta_values: Optional[Dict[str, Any]],
    labels: Targets,
    auxiliary_loss: bool,
) -> List[SetPrediction]:
    """RT-DETR (v1, v2): per decoder layer its matching queries and, in training, its denoising queries (the first
    ``dn_num_split[0]`` queries, matched as HF's ``RTDetrLoss.get_cdn_matched_indices``); then the encoder's top-k
    proposals. ``outputs_class`` [B, L, Q, C] and ``outputs_coord`` [B, L, Q, 4]."""
    classes, coords = outputs_class.transpose(0, 1), outputs_coord.transpose(0, 1)
    num_layers = len(classes)
    layers = decoder_layers(num_layers, auxiliary_loss)
    num_dn = 0 if denoising_meta_values is None else denoising_meta_values["dn_num_split"][0]
    predictions = [
        SetPrediction(layer_suffix(i, num_layers), classes[i][:, num_dn:], coords[i][:, num_dn:], None) for i in layers
    ]
    if denoising_meta_values is not None:
        dn_indices = RTDetrLoss.get_cdn_matched_indices(denoising_meta_values, labels)
        predictions += [
            SetPrediction(f"_dn_{i}", classes[i][:, :num_dn], coords[i][:, :num_dn], dn_indices) for i in layers
        ]
    if enc_topk_logits is not None and enc_topk_bboxes is not None:
        predictions.append(SetPrediction("_enc", enc_topk_logits, enc_topk_bboxes, None))
    return predictions


def deformable_detr_predictions(
    outputs_class: Tensor, outputs_coord: Tensor, auxiliary_loss: bool
) -> List[SetPrediction]:
    """Deformable-DETR: per decoder layer its queries; ``outputs_class`` [L, B, Q, C], ``outputs_coord``
    [L, B, Q, 4]."""
    num_layers = len(outputs_class)
    return [
        SetPrediction(layer_suffix(i, num_layers), outputs_class[i], outputs_coord[i], None)
        for i in decoder_layers(num_layers, auxiliary_loss)
    ]


class RankingLossFunction(nn.Module):
    """A DETR's ``loss_function``: HF's call (``logits, labels, device, pred_boxes, config, outputs_class,
    outputs_coord``, and RT-DETR's keywords) in, HF's ``(loss, loss_dict, auxiliary_outputs)`` out.

    Every set of predictions (:class:`SetPrediction`) is matched by HF's own Hungarian matcher with the model
    config's costs (the denoising queries by their known targets) and ranked on its own by :attr:`loss`; its terms
    enter ``loss_dict`` under their keys with the set's suffix, already weighted, and ``loss`` is the sum of all of
    them (HF's RT-DETR loss drops every key missing from its weight dict: here nothing is dropped). With
    ``ranking="global"`` the loss ranks and normalises over all workers: HF's ``num_boxes``, a per-worker count, is
    not used.
    """

    def __init__(self, loss: SetRankingLoss, matcher: nn.Module, rt_detr: bool):
        super().__init__()
        self.loss = loss
        self.matcher = matcher
        self.rt_detr = rt_detr
        self.encoder_hook: Optional[torch.utils.hooks.RemovableHandle] = None

    def forward(
        self,
        logits: Tensor,
        labels: Targets,
        device: torch.device,
        pred_boxes: Tensor,
        config: Any,
        outputs_class: Tensor,
        outputs_coord: Tensor,
        enc_topk_logits: Optional[Tensor] = None,
        enc_topk_bboxes: Optional[Tensor] = None,
        denoising_meta_values: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> Tuple[Tensor, Dict[str, Tensor], Optional[List[Dict[str, Tensor]]]]:
        if self.rt_detr:
            predictions = rt_detr_predictions(
                outputs_class,
                outputs_coord,
                enc_topk_logits,
                enc_topk_bboxes,
                denoising_meta_values,
                labels,
                config.auxiliary_loss,
            )
        else:
            predictions = deformable_detr_predictions(outputs_class, outputs_coord, config.auxiliary_loss)
        loss_dict = self.set_losses(predictions, labels)
        return torch.stack(list(loss_dict.values())).sum(), loss_dict, self.auxiliary_outputs(predictions)

    def set_losses(self, predictions: Sequence[SetPrediction], labels: Targets) -> Dict[str, Tensor]:
        """The terms of every set, its keys suffixed by the set's (each set ranked on its own, in the same order on
        every worker)."""
        loss_dict: Dict[str, Tensor] = {}
        for prediction in predictions:
            indices = prediction.indices
            if indices is None:
                indices = self.matcher({"logits": prediction.logits, "pred_boxes": prediction.boxes}, labels)
            terms = self.loss(prediction.logits, prediction.boxes, indices, labels)
            loss_dict.update((key + prediction.suffix, value) for key, value in terms.items())
        return loss_dict

    @staticmethod
    def auxiliary_outputs(predictions: Sequence[SetPrediction]) -> Optional[List[Dict[str, Tensor]]]:
        """HF's ``outputs.auxiliary_outputs``: the intermediate decoder layers' and the encoder's predictions (not
        the denoising ones), ``None`` without intermediate layers."""
        auxiliary = [
            {"logits": p.logits, "pred_boxes": p.boxes} for p in predictions if p.suffix.startswith(("_aux", "_enc"))
        ]
        return auxiliary or None

    def add_encoder_proposal_term(
        self, model: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any
    ) -> Any:
        """The forward hook of a two-stage Deformable-DETR: adds the ranking loss of the encoder's proposals
        (``enc_outputs_class`` [B, S, C], ``sigmoid(enc_outputs_coord_logits)``) with every target of class 0, as
        the two-stage Deformable-DETR of Zhu et al. trains its proposals (the top-k reads the class-0 logit), to
        ``output.loss`` and ``output.loss_dict`` (keys suffixed ``_enc``)."""
        labels = inspect.signature(model.forward).bind_partial(*args, **kwargs).arguments.get("labels")
        if labels is None:
            return output
        if not isinstance(output, DeformableDetrObjectDetectionOutput):
            raise TypeError(
                "use_ranking_loss: a two-stage Deformable-DETR called with labels must return its ModelOutput "
                f"(return_dict=True), got {type(output).__name__}"
            )
        logits, coord_logits, loss, loss_dict = (
            output.enc_outputs_class,
            output.enc_outputs_coord_logits,
            output.loss,
            output.loss_dict,
        )
        assert logits is not None and coord_logits is not None and loss is not None and loss_dict is not None
        proposals = [
            {"class_labels": torch.zeros_like(target["class_labels"]), "boxes": target["boxes"]} for target in labels
        ]
        terms = self.set_losses([SetPrediction("_enc", logits, coord_logits.sigmoid(), None)], proposals)
        output.loss = loss + torch.stack(list(terms.values())).sum()
        loss_dict.update(terms)
        return output


def config_box_weights(model: PreTrainedModel) -> Dict[str, float]:
    """The L1 and GIoU weights of the model's config (RT-DETR ``weight_loss_bbox`` / ``weight_loss_giou``,
    Deformable-DETR ``bbox_loss_coefficient`` / ``giou_loss_coefficient``): the fixed box weights' defaults."""
    config = model.config
    if isinstance(model, RT_DETR_MODELS):
        return {"l1_weight": config.weight_loss_bbox, "giou_weight": config.weight_loss_giou}
    return {"l1_weight": config.bbox_loss_coefficient, "giou_weight": config.giou_loss_coefficient}


def use_ranking_loss(model: PreTrainedModel, criterion: Any = "RankSortCriterion", **options: Any) -> PreTrainedModel:
    """Trains ``model`` with the set-prediction ranking loss: sets its ``loss_function`` to a
    :class:`RankingLossFunction` holding ``SetRankingLoss(criterion, **options)`` and HF's Hungarian matcher of the
    model's config, and, for a two-stage Deformable-DETR, hooks the encoder-proposal term. Calling it again replaces
    the previous loss. The loss is not saved by ``save_pretrained``: call it again after ``from_pretrained``.

    Args:
        model: an ``RTDetrForObjectDetection``, ``RTDetrV2ForObjectDetection`` or
            ``DeformableDetrForObjectDetection``.
        criterion: a criterion registered by name (``"RankSortCriterion"``, ``"AlrpCriterion"``, ``"APCriterion"``,
            ``"InterpolatedAPCriterion"``, a user's) or an instance.
        options: ``SetRankingLoss``'s keywords (``box_terms``, ``ranking``, ``delta``, ...).

    Returns:
        ``model``, switched.
    """
    if isinstance(model, RT_DETR_MODELS):
        matcher: nn.Module = RTDetrHungarianMatcher(model.config)
    elif isinstance(model, DeformableDetrForObjectDetection):
        config = model.config
        matcher = DeformableDetrHungarianMatcher(config.class_cost, config.bbox_cost, config.giou_cost)
    else:
        raise TypeError(
            "use_ranking_loss supports RTDetrForObjectDetection, RTDetrV2ForObjectDetection and "
            f"DeformableDetrForObjectDetection, got {type(model).__name__}"
        )
    previous = getattr(model, "_loss_function", None)
    if isinstance(previous, RankingLossFunction) and previous.encoder_hook is not None:
        previous.encoder_hook.remove()
    if options.get("box_terms") == "fixed":
        options = {**config_box_weights(model), **options}
    loss_function = RankingLossFunction(
        SetRankingLoss(criterion, **options), matcher, rt_detr=isinstance(model, RT_DETR_MODELS)
    ).to(model.device)
    if isinstance(model, DeformableDetrForObjectDetection) and model.config.two_stage:
        loss_function.encoder_hook = model.register_forward_hook(
            loss_function.add_encoder_proposal_term, with_kwargs=True
        )
    model._loss_function = loss_function  # a submodule: it follows model.to() and model.train()
    return model
