"""Shared by the tests of ``box_normaliser`` (tests/hf/test_hf_box_normaliser.py; on 2 workers in
tests/hf/test_hf_global_ranking.py): the own box terms of a tiny RT-DETR v2 or D-FINE computed by the model's loss
function on the outputs of one training forward (every decoder layer, the denoising groups, the encoder's top-k,
D-FINE's corners), on some of its images, in float64, with their gradients.

HF's D-FINE cannot compute its FGL targets in float64 (``translate_gt`` writes float64 weights into a float32 tensor,
transformers 5.23): here they are computed from the float64 distances rounded to float32, the same constants (detached,
per matched pair) on every side of a comparison."""

from __future__ import annotations

from typing import Any, Dict, Optional
from unittest import mock

import torch
import torch.distributed as dist
from transformers.loss import loss_d_fine

from alrp_d2.detr import set_prediction_criterion, use_ranking_loss
from alrp_d2.detr.hf_families import LOSS_FAMILIES

from ..float64_tolerance import (
    FLOAT64_ATOL,
    FLOAT64_RTOL,
    assert_close_float64,
    assert_fails_by,
    difference_in_tolerances,
)
from .tiny_detrs import fixed_batch, seeded_forward, tiny_detr

BATCH_SIZE = 2  # 2 and 1 objects
WHOLE_BATCH = slice(0, BATCH_SIZE)
MODELS = ("rt_detr_v2", "d_fine")
#: Rescaled keys of each model (every other key of a model is rescaled or left alone by its family's table).
RESCALED = {
    "rt_detr_v2": {"loss_bbox", "loss_giou_aux_0", "loss_bbox_aux_1", "loss_giou_dn_0", "loss_bbox_dn_1"},
    "d_fine": {"loss_bbox", "loss_giou_aux_1", "loss_fgl_aux_0", "loss_fgl_dn_0", "loss_bbox_dn_1"},
}
#: The loss function's inputs read from a forward's output, by the name it takes them under.
OUTPUTS = {
    "outputs_class": "intermediate_logits",
    "outputs_coord": "intermediate_reference_points",
    "enc_topk_logits": "enc_topk_logits",
    "enc_topk_bboxes": "enc_topk_bboxes",
}
#: D-FINE's, of which the corners are differentiated.
CORNERS = {"predicted_corners": "intermediate_predicted_corners"}
REFERENCE_POINTS = {"initial_reference_points": "initial_reference_points"}


def leaf_names(name: str) -> Dict[str, str]:
    return {**OUTPUTS, **CORNERS} if name == "d_fine" else OUTPUTS


def loss_inputs(name: str, images: slice = WHOLE_BATCH) -> Dict[str, Any]:
    """The inputs of the tiny model ``name``'s loss function from one training forward of ``images`` of the fixed
    batch."""
    batch = fixed_batch(BATCH_SIZE)
    with torch.no_grad():
        outputs = seeded_forward(
            tiny_detr(name), {"pixel_values": batch["pixel_values"][images], "labels": batch["labels"][images]}
        )
    fields = {**leaf_names(name), **(REFERENCE_POINTS if name == "d_fine" else {})}
    inputs = {argument: getattr(outputs, field) for argument, field in fields.items()}
    return {**inputs, "denoising_meta_values": outputs.denoising_meta_values}


def float32_translate_gt(gt: torch.Tensor, *arguments: Any) -> Any:
    """HF's ``translate_gt`` of ``gt`` rounded to float32 (module docstring)."""
    return HF_TRANSLATE_GT(gt.float(), *arguments)


HF_TRANSLATE_GT = loss_d_fine.translate_gt


def is_rescaled(model: Any, key: str) -> bool:
    """Whether the family divides ``key`` by the worker's own targets (its ``worker_terms``)."""
    terms = LOSS_FAMILIES[model.loss_type].box_normalisation(model.config).worker_terms
    return key.split("_aux")[0].split("_dn")[0] in terms


def box_terms(
    name: str, inputs: Dict[str, Any], images: slice, box_normaliser: str, label_images: Optional[slice] = None
) -> Dict[str, torch.Tensor]:
    """The box terms of the model's loss function on ``images`` of ``inputs`` (float64), ``box_terms="model"`` and
    ``box_normaliser``: every key's value, and the gradients of the rescaled ones (``grad.{key}.{input}``). The
    labels: ``label_images`` of the fixed batch (None: ``images``)."""
    model = use_ranking_loss(
        tiny_detr(name), set_prediction_criterion("RankSortCriterion"), box_terms="model", box_normaliser=box_normaliser
    )
    leaves = {argument: inputs[argument][images].double().requires_grad_(True) for argument in leaf_names(name)}
    meta = inputs["denoising_meta_values"]
    meta = {**meta, "dn_positive_idx": meta["dn_positive_idx"][images]}
    labels = fixed_batch(BATCH_SIZE)["labels"][images if label_images is None else label_images]
    labels = [{**label, "boxes": label["boxes"].double()} for label in labels]
    constants = {argument: inputs[argument][images].double() for argument in REFERENCE_POINTS if argument in inputs}
    last_logits, last_boxes = leaves["outputs_class"][:, -1], leaves["outputs_coord"][:, -1]
    with mock.patch.object(loss_d_fine, "translate_gt", float32_translate_gt):
        _, loss_dict, _ = model.loss_function(
            last_logits,
            labels,
            model.device,
            last_boxes,
            model.config,
            **leaves,
            **constants,
            denoising_meta_values=meta,
        )
    result = {key: value.detach() for key, value in loss_dict.items() if not key.startswith("loss_rank")}
    for key, value in loss_dict.items():
        if is_rescaled(model, key):
            gradients = torch.autograd.grad(value, list(leaves.values()), retain_graph=True, allow_unused=True)
            for argument, leaf, gradient in zip(leaves, leaves.values(), gradients):
                result[f"grad.{key}.{argument}"] = torch.zeros_like(leaf) if gradient is None else gradient
    return result


def whole_batch_cases() -> Dict[str, Dict[str, Dict[str, Any]]]:
    """Per model of :data:`MODELS`: the loss function's ``inputs`` and its box terms on the whole batch with the
    model's normaliser (``expected``)."""
    cases = {}
    for name in MODELS:
        inputs = loss_inputs(name)
        cases[name] = {"inputs": inputs, "expected": box_terms(name, inputs, WHOLE_BATCH, "model")}
    return cases


def check_worker(name: str, images: slice, expected: Dict[str, torch.Tensor], inputs: Dict[str, Any]) -> None:
    """On a worker of ``images``: with ``box_normaliser="global"`` each rescaled term's gradient over the world size
    and its value averaged over the workers equal ``expected`` (one process's, the whole batch); the other terms equal
    the model's; with the model's normaliser the gradients differ (the twin)."""
    world_size = dist.get_world_size()
    result, model_normalised = (box_terms(name, inputs, images, normaliser) for normaliser in ("global", "model"))
    assert result.keys() == expected.keys(), (name, sorted(result.keys() ^ expected.keys()))
    rescaled = sorted({key.split(".")[1] for key in result if key.startswith("grad.")})
    assert RESCALED[name] <= set(rescaled) and "loss_ddf_aux_0" not in rescaled, (name, rescaled)
    values = torch.stack([result[key] for key in rescaled])
    dist.all_reduce(values)
    for key, value in zip(rescaled, values / world_size):
        assert_close_float64(value, expected[key], msg=lambda message, key=key: f"{name} {key}: {message}")
    broken = 0.0
    for key, value in result.items():
        if key.startswith("grad."):
            share = expected[key][images]
            assert_close_float64(value / world_size, share, msg=lambda message, key=key: f"{name} {key}: {message}")
            atol = FLOAT64_RTOL * share.abs().max().item() + FLOAT64_ATOL
            broken = max(broken, difference_in_tolerances(model_normalised[key] / world_size, share, atol))
        elif key not in rescaled:  # normalised otherwise: left as it is
            assert torch.equal(value, model_normalised[key]), (name, key)
    assert_fails_by(broken, f"{name}: the model's own normaliser")


def check_own_denoising_groups(name: str, images: slice) -> None:
    """On a worker of ``images`` with its own training forward (its own denoising groups ``g_w``: 2 and 1 objects
    give 4 and 8 groups): with ``box_normaliser="global"`` the rescaled denoising terms' gradients are the model's
    times ``d_w W / D``, ``d_w = t_w g_w`` the worker's denoising pairs, ``D`` their sum over the workers; with the
    targets' factor ``t_w W / N`` they differ (the twin)."""
    world_size = dist.get_world_size()
    inputs = loss_inputs(name, images)
    result, model_normalised = (
        box_terms(name, inputs, slice(0, 1), normaliser, label_images=images) for normaliser in ("global", "model")
    )
    targets = len(fixed_batch(BATCH_SIZE)["labels"][images][0]["class_labels"])
    local = torch.tensor([targets, targets * inputs["denoising_meta_values"]["dn_num_group"]], dtype=torch.float64)
    groups = [torch.zeros(2, dtype=torch.float64) for _ in range(world_size)]
    dist.all_gather(groups, local)
    assert len({float(g[1] / g[0]) for g in groups}) == world_size, groups  # each worker its own groups
    total = torch.stack(groups).sum(0)
    pairs_factor, targets_factor = local[1] * world_size / total[1], local[0] * world_size / total[0]
    denoising = [key for key in result if key.startswith("grad.") and "_dn_" in key]
    assert len(denoising) >= 2, sorted(result)
    broken = 0.0
    for key in denoising:
        expected = model_normalised[key] * pairs_factor
        assert_close_float64(result[key], expected, msg=lambda message, key=key: f"{name} {key}: {message}")
        atol = FLOAT64_RTOL * expected.abs().max().item() + FLOAT64_ATOL
        broken = max(broken, difference_in_tolerances(model_normalised[key] * targets_factor, expected, atol))
    assert_fails_by(broken, f"{name}: the targets' factor on the denoising sets")
