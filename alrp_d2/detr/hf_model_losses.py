"""Hugging Face's DETR losses (transformers 5.23) without their classification terms, for ``box_terms="model"``:
one subclass per HF loss class, as HF's own files extend each other (``DFineLoss(RTDetrLoss)``), whose ``get_loss``
records each set's outputs and the indices HF's matcher gave it in place of the classification term (varifocal,
MAL, focal or cross-entropy: never computed); everything else (every Hungarian matching, once per set, the box
terms, D-FINE's FGL and DDF, DEIMv2's dense one-to-one union, the cardinality metric) is HF's own ``forward``.

HF builds its criterion inside its loss function: here each family states the criterion its function builds (the
classes, :func:`deformable_detr_criterion`, ...) and lays out the ``outputs`` the function hands it
(:func:`real_time_detr_outputs`, :func:`detr_outputs`, with HF's helpers); :func:`recorded_sets` names each
recorded set by HF's key suffix.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

from torch import Tensor, nn
from transformers.loss.loss_d_fine import DFineLoss, _set_aux_loss2
from transformers.loss.loss_deformable_detr import DeformableDetrHungarianMatcher, DeformableDetrImageLoss
from transformers.loss.loss_deimv2 import Deimv2Loss
from transformers.loss.loss_for_object_detection import HungarianMatcher, ImageLoss
from transformers.loss.loss_for_object_detection import _set_aux_loss as _set_layers_but_last
from transformers.loss.loss_lw_detr import LwDetrHungarianMatcher, LwDetrImageLoss
from transformers.loss.loss_rt_detr import RTDetrLoss
from transformers.loss.loss_rt_detr import _set_aux_loss as _set_layers

__all__ = [
    "LossCall",
    "RecordedClassification",
    "RecordedDFineLoss",
    "RecordedDeimv2Loss",
    "RecordedRTDetrLoss",
    "RecordedSet",
    "deformable_detr_criterion",
    "detr_outputs",
    "image_criterion",
    "lw_detr_criterion",
    "real_time_detr_outputs",
    "recorded_sets",
]

Indices = List[Tuple[Tensor, Tensor]]
#: The ``losses`` HF's ``ImageLoss``-family loss functions compute.
IMAGE_LOSSES = ["labels", "boxes", "cardinality"]


class RecordedSet(NamedTuple):
    """One set the criterion's ``forward`` visited: its outputs (``logits``, ``pred_boxes``, ...) and its indices."""

    outputs: Dict[str, Any]
    indices: Indices


class RecordedClassification(nn.Module):
    """The mixin of an HF DETR loss class: the term ``classification`` (its name in ``self.losses``) is not computed;
    ``get_loss`` appends the set's outputs and indices to :attr:`recorded` instead and returns no term. One criterion
    a loss call, as HF builds one."""

    classification = ""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.recorded: List[RecordedSet] = []

    def get_loss(self, loss: str, outputs: Dict[str, Any], targets: Any, indices: Indices, num_boxes: Any) -> Any:
        if loss == self.classification:
            self.recorded.append(RecordedSet(outputs, indices))
            return {}
        return super().get_loss(loss, outputs, targets, indices, num_boxes)  # type: ignore[misc]


class RecordedRTDetrLoss(RecordedClassification, RTDetrLoss):
    classification = "vfl"


class RecordedDFineLoss(RecordedClassification, DFineLoss):
    classification = "vfl"


class RecordedDeimv2Loss(RecordedClassification, Deimv2Loss):
    classification = "mal"


class RecordedDeformableDetrLoss(RecordedClassification, DeformableDetrImageLoss):
    classification = "labels"


class RecordedLwDetrLoss(RecordedClassification, LwDetrImageLoss):
    classification = "labels"


class RecordedImageLoss(RecordedClassification, ImageLoss):
    classification = "labels"


class LossCall(NamedTuple):
    """What a DETR's forward hands its loss function (``outputs``: the other arguments, by name)."""

    logits: Tensor
    pred_boxes: Tensor
    outputs_class: Tensor
    outputs_coord: Tensor
    labels: Sequence[Dict[str, Tensor]]
    config: Any
    outputs: Dict[str, Any]


def _costs(config: Any) -> Dict[str, float]:
    return {"class_cost": config.class_cost, "bbox_cost": config.bbox_cost, "giou_cost": config.giou_cost}


def deformable_detr_criterion(config: Any) -> RecordedClassification:
    """``DeformableDetrForObjectDetectionLoss``'s criterion (Deformable, Conditional, DAB-DETR)."""
    matcher = DeformableDetrHungarianMatcher(**_costs(config))
    return RecordedDeformableDetrLoss(matcher, config.num_labels, config.focal_alpha, IMAGE_LOSSES)


def lw_detr_criterion(config: Any) -> RecordedClassification:
    """``LwDetrForObjectDetectionLoss``'s criterion (LW-DETR, RF-DETR)."""
    matcher = LwDetrHungarianMatcher(**_costs(config))
    return RecordedLwDetrLoss(matcher, config.num_labels, config.focal_alpha, IMAGE_LOSSES, config.group_detr)


def image_criterion(config: Any) -> RecordedClassification:
    """``ForObjectDetectionLoss``'s criterion (DETR, YOLOS)."""
    return RecordedImageLoss(
        HungarianMatcher(**_costs(config)), config.num_labels, config.eos_coefficient, IMAGE_LOSSES
    )


def real_time_detr_outputs(
    call: LossCall,
    *,
    corners: bool,
    split_without_auxiliary: bool = True,
) -> Dict[str, Any]:
    """The ``outputs`` HF's ``RTDetrForObjectDetectionLoss`` (``corners`` False), ``DFineForObjectDetectionLoss`` and
    ``Deimv2ForObjectDetectionLoss`` (``corners`` True: boxes clamped to [0, 1], each layer with its corners and
    reference points, the last layer's as the teacher; DEIMv2 keeps the denoising queries in the last layer's set
    without ``config.auxiliary_loss``: ``split_without_auxiliary`` False) hand their criterion: the last layer's
    matching queries; with ``config.auxiliary_loss`` the other layers and the encoder's top-k
    (``auxiliary_outputs``) and each layer's denoising queries (``dn_auxiliary_outputs``)."""
    box: Callable[[Tensor], Tensor] = (lambda boxes: boxes.clamp(min=0, max=1)) if corners else (lambda boxes: boxes)
    outputs = call.outputs
    denoising = outputs.get("denoising_meta_values")
    num_dn = 0 if denoising is None else denoising["dn_num_split"][0]
    last_dn = num_dn if call.config.auxiliary_loss or split_without_auxiliary else 0
    loss_outputs: Dict[str, Any] = {"logits": call.logits[:, last_dn:], "pred_boxes": box(call.pred_boxes[:, last_dn:])}
    if not call.config.auxiliary_loss:
        return loss_outputs
    # [B, L, Q, ...] per layer: the classes, the boxes and D-FINE's corners and reference points.
    layers = {"classes": call.outputs_class, "coords": box(call.outputs_coord)}
    if corners:
        layers.update(corners=outputs["predicted_corners"], refs=outputs["initial_reference_points"])
    auxiliary = _layer_sets({name: values[:, :, num_dn:] for name, values in layers.items()}, last=False)
    auxiliary.extend(_set_layers([outputs["enc_topk_logits"]], [box(outputs["enc_topk_bboxes"])]))
    loss_outputs["auxiliary_outputs"] = auxiliary
    if denoising is not None:
        dn_layers = {name: values[:, :, :num_dn] for name, values in layers.items()}
        loss_outputs["dn_auxiliary_outputs"] = _layer_sets(dn_layers, last=True)
        loss_outputs["denoising_meta_values"] = denoising
    return loss_outputs


def _layer_sets(layers: Dict[str, Tensor], *, last: bool) -> List[Dict[str, Tensor]]:
    """The per-layer sets of [B, L, Q, ...] ``layers``, the last layer's if ``last``: RT-DETR's (HF's
    ``_set_aux_loss``), D-FINE's with ``corners`` and ``refs`` (HF's ``_set_aux_loss2``: as many as the shortest of
    the classes, corners and reference points, the last layer's corners and logits as the teacher's)."""
    end = layers["classes"].shape[1] if last else -1
    per_layer = [
        layers[name][:, :end].transpose(0, 1) for name in ("classes", "coords", "corners", "refs") if name in layers
    ]
    if "corners" not in layers:
        return _set_layers(*per_layer)
    classes, coords, corners, refs = per_layer
    return _set_aux_loss2(classes, coords, corners, refs, layers["corners"][:, -1], layers["classes"][:, -1])


def detr_outputs(call: LossCall, *, encoder: bool = False) -> Dict[str, Any]:
    """The ``outputs`` HF's ``DeformableDetrForObjectDetectionLoss`` and ``ForObjectDetectionLoss`` and, with
    ``encoder``, ``LwDetrForObjectDetectionLoss`` (the encoder's proposals, ``enc_outputs``) hand their criterion:
    the last layer; with ``config.auxiliary_loss`` the others (``auxiliary_outputs``)."""
    loss_outputs: Dict[str, Any] = {"logits": call.logits, "pred_boxes": call.pred_boxes}
    if encoder:
        outputs = call.outputs
        loss_outputs["enc_outputs"] = {
            "logits": outputs["enc_outputs_class"],
            "pred_boxes": outputs["enc_outputs_coord"],
        }
    if call.config.auxiliary_loss:
        loss_outputs["auxiliary_outputs"] = _set_layers_but_last(call.outputs_class, call.outputs_coord)
    return loss_outputs


def set_suffixes(loss_outputs: Dict[str, Any], auxiliary_prefix: str) -> Dict[int, str]:
    """HF's key suffix of every set of ``loss_outputs`` by the identity of the set's outputs: "" (the last layer),
    ``auxiliary_prefix`` and its position (``auxiliary_outputs``), ``_dn_`` and its position
    (``dn_auxiliary_outputs``), ``_enc`` (``enc_outputs``)."""
    suffixes = {id(loss_outputs): ""}
    for key, prefix in (("auxiliary_outputs", auxiliary_prefix), ("dn_auxiliary_outputs", "_dn_")):
        suffixes.update({id(outputs): f"{prefix}{i}" for i, outputs in enumerate(loss_outputs.get(key, []))})
    if "enc_outputs" in loss_outputs:
        suffixes[id(loss_outputs["enc_outputs"])] = "_enc"
    return suffixes


def recorded_sets(
    criterion: RecordedClassification, loss_outputs: Dict[str, Any], auxiliary_prefix: str
) -> List[Tuple[str, RecordedSet]]:
    """Every set ``criterion`` recorded on ``loss_outputs``, with its key suffix, in the order HF visits them; a
    RuntimeError if a set was not recorded exactly once (a transformers version that lays out its loss otherwise)."""
    suffixes = set_suffixes(loss_outputs, auxiliary_prefix)
    named = [(suffixes.get(id(recorded.outputs)), recorded) for recorded in criterion.recorded]
    found = [suffix for suffix, _ in named]
    if sorted(map(str, found)) != sorted(suffixes.values()):
        raise RuntimeError(
            f"{type(criterion).__bases__[-1].__name__} computed its {criterion.classification!r} term for the sets "
            f"{found}, the ranking loss expected {sorted(suffixes.values())}: this transformers version lays out its "
            "loss otherwise (alrp_d2.detr.hf_model_losses)"
        )
    return [(str(suffix), recorded) for suffix, recorded in named]
