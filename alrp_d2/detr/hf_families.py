"""The families of Hugging Face DETRs (transformers 5.23) as their loss functions see them, keyed as HF keys its loss
functions, by ``model.loss_type`` (``transformers.loss.loss_utils.LOSS_MAPPING``): the criterion each loss function
builds and the outputs it hands it (each decoder layer, the denoising queries of each layer, the encoder's proposals:
:mod:`.hf_model_losses`), the key suffixes HF gives the sets, the matcher, the classification key and the weights of
the terms.

The own-box-term modes rank the sets of :func:`ranked_rt_detr_sets` and :func:`ranked_deformable_detr_sets`
(suffixes ``_aux_{i}``, ``_dn_{i}``, ``_enc``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from torch import Tensor
from transformers.loss.loss_rt_detr import RTDetrLoss

from .box_normaliser import BoxNormalisation
from .hf_model_losses import (
    LossCall,
    RecordedClassification,
    RecordedDeimv2Loss,
    RecordedDFineLoss,
    RecordedRTDetrLoss,
    deformable_detr_criterion,
    detr_outputs,
    image_criterion,
    lw_detr_criterion,
    real_time_detr_outputs,
)
from .set_matching import MatchingCost, deformable_detr_cost, rt_detr_cost

__all__ = ["LOSS_FAMILIES", "LossCall", "LossFamily", "SetPrediction"]

Targets = Sequence[Dict[str, Tensor]]
Indices = List[Tuple[Tensor, Tensor]]


class SetPrediction(NamedTuple):
    """The predictions ranked together: one decoder layer's matching queries, its denoising queries, or the encoder's
    proposals. ``indices``: the denoising queries' given ones and, with ``box_terms="model"``, those of the model's own
    matching; ``None`` where the own-box-term modes' matching assigns them (:mod:`.set_matching`)."""

    suffix: str  # of the loss keys: "" (the last decoder layer), else the set's
    logits: Tensor  # [B, Q, C]
    boxes: Tensor  # [B, Q, 4], normalised cxcywh
    indices: Optional[Indices]


#: A loss call -> its sets of predictions.
SetsFunction = Callable[[LossCall], List[SetPrediction]]


def _layers(num_layers: int, auxiliary_loss: bool) -> range:
    """Every decoder layer with ``config.auxiliary_loss`` (HF's switch of the intermediate layers' losses), else the
    last one."""
    return range(num_layers) if auxiliary_loss else range(num_layers - 1, num_layers)


def _suffix(layer: int, num_layers: int) -> str:
    return "" if layer == num_layers - 1 else f"_aux_{layer}"


def ranked_rt_detr_sets(call: LossCall) -> List[SetPrediction]:
    """RT-DETR (v1, v2) in the own-box-term modes: per decoder layer its matching queries and, in training, its
    denoising queries (matched as HF's ``RTDetrLoss.get_cdn_matched_indices``); then the encoder's top-k proposals
    (``_enc``), also without ``config.auxiliary_loss``."""
    classes, coords = call.outputs_class.transpose(0, 1), call.outputs_coord.transpose(0, 1)
    num_layers = len(classes)
    layers = _layers(num_layers, call.config.auxiliary_loss)
    denoising = call.outputs.get("denoising_meta_values")
    num_dn = 0 if denoising is None else denoising["dn_num_split"][0]
    sets = [SetPrediction(_suffix(i, num_layers), classes[i][:, num_dn:], coords[i][:, num_dn:], None) for i in layers]
    if denoising is not None:
        dn_indices = RTDetrLoss.get_cdn_matched_indices(denoising, call.labels)
        sets += [SetPrediction(f"_dn_{i}", classes[i][:, :num_dn], coords[i][:, :num_dn], dn_indices) for i in layers]
    encoder_logits, encoder_boxes = call.outputs.get("enc_topk_logits"), call.outputs.get("enc_topk_bboxes")
    if encoder_logits is not None and encoder_boxes is not None:
        sets.append(SetPrediction("_enc", encoder_logits, encoder_boxes, None))
    return sets


def ranked_deformable_detr_sets(call: LossCall) -> List[SetPrediction]:
    """Deformable-DETR in the own-box-term modes: per decoder layer its queries (``_aux_{i}``); the two-stage encoder
    term is a forward hook (:mod:`.hf_loss_function`)."""
    num_layers = len(call.outputs_class)
    return [
        SetPrediction(_suffix(i, num_layers), call.outputs_class[i], call.outputs_coord[i], None)
        for i in _layers(num_layers, call.config.auxiliary_loss)
    ]


#: RT-DETR (v1, v2): L1 and GIoU divided by the worker's targets (its denoising pairs).
RT_DETR_BOXES = BoxNormalisation(("loss_bbox", "loss_giou"))
#: D-FINE: also FGL (its ``avg_factor``); DDF is a mean over the worker's queries, left as it is.
D_FINE_BOXES = BoxNormalisation(("loss_bbox", "loss_giou", "loss_fgl"))
#: LW-DETR, RF-DETR: the targets are all-reduced (``clamp(N / W, min=1)``, times ``group_detr``): nothing rescaled.
ALL_WORKERS_BOXES = BoxNormalisation()
#: Deformable, Conditional, DAB-DETR, DETR, YOLOS (HF's ``ImageLoss``): refused.
IMAGE_LOSS_BOXES = BoxNormalisation(
    unsupported="HF's ImageLoss divides the box terms by the worker's own targets, but once accelerate's "
    "PartialState is initialised (HF's Trainer) by accelerate's mean of the targets over the workers divided by the "
    "world size again, a normaliser the loss call does not show"
)


class LossFamily(NamedTuple):
    """What the loss function of one family of HF models computes.

    Attributes:
        model_criterion: the criterion its loss function builds of a config, its classification term recorded
            (:mod:`.hf_model_losses`).
        model_outputs: the ``outputs`` its loss function hands the criterion.
        auxiliary_prefix: HF's key suffix of the intermediate layers' sets, before their position.
        classification_key: the key of its classification term (with each set's suffix).
        weights: the weights of its unweighted ``loss_dict`` terms by key without suffix; None: weighted already.
        positional: the names of the arguments after ``outputs_coord`` that the model passes by position.
        ranked_sets: the sets of the own-box-term modes; None: only ``box_terms="model"``.
        matching_cost: the cost of HF's matcher of a config, with which the own-box-term modes match those sets.
        scores: what is ranked of a set's logits; None: the logits (sigmoid classes).
        box_normalisation: how its own loss normalises its box terms, of a config (``box_normaliser="global"``).
    """

    model_criterion: Callable[[Any], RecordedClassification]
    model_outputs: Callable[[LossCall], Dict[str, Any]]
    auxiliary_prefix: str
    classification_key: str
    weights: Optional[Callable[[Any], Dict[str, float]]] = None
    positional: Tuple[str, ...] = ()
    ranked_sets: Optional[SetsFunction] = None
    matching_cost: Optional[Callable[[Any], MatchingCost]] = None
    scores: Optional[Callable[[Tensor], Tensor]] = None
    box_normalisation: Callable[[Any], BoxNormalisation] = lambda config: IMAGE_LOSS_BOXES


def _deimv2_boxes(config: Any) -> BoxNormalisation:
    """D-FINE's, but with ``config.use_dense_one_to_one``: refused."""
    if not config.use_dense_one_to_one:
        return D_FINE_BOXES
    return BoxNormalisation(
        unsupported="DEIMv2's dense one-to-one matching (config.use_dense_one_to_one) divides its box terms by the "
        "union of every layer's matches on the worker, which its loss does not return (with use_dense_one_to_one "
        "False its loss is D-FINE's)"
    )


def no_object_log_odds(logits: Tensor) -> Tensor:
    """(..., C) ``log(p_c / p_no-object)`` of the (..., C + 1) logits of a softmax over the classes and no-object
    (DETR, YOLOS): ranked, the order of each query's classes is its softmax scores' order, and a query's score rises
    against no-object as its log-odds rise."""
    return logits[..., :-1] - logits[..., -1:]


def _detr_weights(config: Any) -> Dict[str, float]:
    return {"loss_ce": 1.0, "loss_bbox": config.bbox_loss_coefficient, "loss_giou": config.giou_loss_coefficient}


def _lw_detr_weights(config: Any) -> Dict[str, float]:
    return {**_detr_weights(config), "loss_ce": config.class_loss_coefficient}


RT_DETR = LossFamily(
    RecordedRTDetrLoss,
    functools.partial(real_time_detr_outputs, corners=False),
    "_aux_",
    "loss_vfl",
    ranked_sets=ranked_rt_detr_sets,
    matching_cost=rt_detr_cost,
    box_normalisation=lambda config: RT_DETR_BOXES,
)
DEFORMABLE_DETR = LossFamily(
    deformable_detr_criterion,
    detr_outputs,
    "_",
    "loss_ce",
    _detr_weights,
    ranked_sets=ranked_deformable_detr_sets,
    matching_cost=deformable_detr_cost,
)
CONDITIONAL_DETR = LossFamily(deformable_detr_criterion, detr_outputs, "_", "loss_ce", _detr_weights)
LW_DETR = LossFamily(
    lw_detr_criterion,
    functools.partial(detr_outputs, encoder=True),
    "_",
    "loss_ce",
    _lw_detr_weights,
    positional=("enc_outputs_class", "enc_outputs_coord"),
    box_normalisation=lambda config: ALL_WORKERS_BOXES,
)
#: DETR, YOLOS, Table Transformer (``loss_type`` "ForObjectDetection"): a softmax with a no-object class.
SOFTMAX_DETR = LossFamily(
    image_criterion,
    detr_outputs,
    "_",
    "loss_ce",
    _detr_weights,
    scores=no_object_log_odds,
)
#: The families by HF's ``model.loss_type``.
LOSS_FAMILIES: Dict[str, LossFamily] = {
    "RTDetrForObjectDetection": RT_DETR,
    "RTDetrV2ForObjectDetection": RT_DETR,
    "DFineForObjectDetection": LossFamily(
        RecordedDFineLoss,
        functools.partial(real_time_detr_outputs, corners=True),
        "_aux_",
        "loss_vfl",
        box_normalisation=lambda config: D_FINE_BOXES,
    ),
    "Deimv2ForObjectDetection": LossFamily(
        RecordedDeimv2Loss,
        functools.partial(real_time_detr_outputs, corners=True, split_without_auxiliary=False),
        "_aux_",
        "loss_mal",
        box_normalisation=_deimv2_boxes,
    ),
    "DeformableDetrForObjectDetection": DEFORMABLE_DETR,
    "ConditionalDetrForObjectDetection": CONDITIONAL_DETR,
    "DabDetrForObjectDetection": CONDITIONAL_DETR,
    "LwDetrForObjectDetection": LW_DETR,
    "RfDetrForObjectDetection": LW_DETR,
    "ForObjectDetection": SOFTMAX_DETR,
}
