"""HF's DETR losses normalise by each worker's own box count; a model switched by ``use_ranking_loss`` ranks and
normalises over all workers. On 2 gloo workers, each with one image (2 and 1 objects), every worker's loss terms equal
one process's on both images, and the workers' gradients, averaged as DDP does, equal its gradients (in float64:
tests/float64_tolerance.py):

* two-stage Deformable-DETR end to end (the parameters' gradients), in eval mode so that an image's predictions do
  not depend on the other images of its batch (BatchNorm's running statistics);
* RT-DETR's loss function on the outputs of one training forward (every decoder layer, the denoising groups, the
  encoder's top-k): the gradients of those outputs. (HF's RT-DETR itself is not separable over the images of a
  batch in its backward pass, in eval mode too, so that its parameters' gradients cannot be compared this way.)
* D-FINE with its own box terms (``box_terms="model"``) in eval mode: the ranking terms of every set (its box terms
  keep HF's per-worker normaliser);
* RT-DETR v2's and D-FINE's own box terms with ``box_normaliser="global"`` on the outputs of one training forward:
  the rescaled terms' gradients and values (tests/hf/box_normaliser_cases.py, ``check_worker``), and on each worker's
  own forward (its own denoising groups) the denoising terms' factor (``check_own_denoising_groups``).
"""

from __future__ import annotations

from typing import Any, Dict

import torch
import torch.distributed as dist

from alrp_d2.detr import set_prediction_criterion, use_ranking_loss

from ..distributed_cases import spawn_workers
from ..float64_tolerance import assert_close_float64
from . import box_normaliser_cases
from .tiny_detrs import fixed_batch, seeded_forward, tiny_detr

WORLD_SIZE = 2
OUTPUTS = ("outputs_class", "outputs_coord", "enc_topk_logits", "enc_topk_bboxes")


def own_part(batch: Dict[str, Any], rank: int) -> Dict[str, Any]:
    return {"pixel_values": batch["pixel_values"][rank : rank + 1], "labels": batch["labels"][rank : rank + 1]}


def in_float64(batch: Dict[str, Any]) -> Dict[str, Any]:
    """``batch`` with float64 pixels and boxes."""
    labels = [{**label, "boxes": label["boxes"].double()} for label in batch["labels"]]
    return {"pixel_values": batch["pixel_values"].double(), "labels": labels}


def deformable_detr_result(batch: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The loss terms of ``batch`` and the parameters' gradients of the tiny two-stage Deformable-DETR (float64)."""
    model = use_ranking_loss(
        tiny_detr("deformable_detr_two_stage"),
        set_prediction_criterion("RankSortCriterion"),
        box_terms="value_balanced",
        ranking="global",
    )
    model = model.eval().double()
    outputs = model(**in_float64(batch))
    outputs.loss.backward()
    gradients = {f"grad.{n}": p.grad for n, p in model.named_parameters() if p.grad is not None}
    return {"loss": outputs.loss.detach(), **{k: v.detach() for k, v in outputs.loss_dict.items()}, **gradients}


def d_fine_ranking_terms(batch: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The ranking terms of ``batch`` of the tiny D-FINE trained with its own box terms and a global ranking."""
    criterion = set_prediction_criterion("RankSortCriterion")
    model = use_ranking_loss(tiny_detr("d_fine"), criterion, box_terms="model", ranking="global").eval().double()
    with torch.no_grad():
        outputs = model(**in_float64(batch))
    return {key: value for key, value in outputs.loss_dict.items() if key.startswith("loss_rank")}


def rt_detr_outputs() -> Dict[str, Any]:
    """The inputs of RT-DETR's loss function from one training forward of the fixed batch (with denoising)."""
    model = tiny_detr("rt_detr")
    with torch.no_grad():
        outputs = seeded_forward(model, fixed_batch(WORLD_SIZE))
    return {
        "outputs_class": outputs.intermediate_logits,
        "outputs_coord": outputs.intermediate_reference_points,
        "enc_topk_logits": outputs.enc_topk_logits,
        "enc_topk_bboxes": outputs.enc_topk_bboxes,
        "denoising_meta_values": outputs.denoising_meta_values,
    }


def rt_detr_result(outputs: Dict[str, Any], images: slice) -> Dict[str, torch.Tensor]:
    """RT-DETR's loss terms on ``images`` of ``outputs`` and their gradients."""
    criterion = set_prediction_criterion("RankSortCriterion")
    model = use_ranking_loss(tiny_detr("rt_detr"), criterion, box_terms="value_balanced", ranking="global")
    leaves = {name: outputs[name][images].double().requires_grad_(True) for name in OUTPUTS}
    meta = outputs["denoising_meta_values"]
    meta = {**meta, "dn_positive_idx": meta["dn_positive_idx"][images]}
    labels = in_float64(fixed_batch(WORLD_SIZE))["labels"][images]
    last_logits, last_boxes = leaves["outputs_class"][:, -1], leaves["outputs_coord"][:, -1]
    loss, loss_dict, _ = model.loss_function(
        last_logits, labels, model.device, last_boxes, model.config, **leaves, denoising_meta_values=meta
    )
    gradients = torch.autograd.grad(loss, list(leaves.values()))
    return {
        "loss": loss.detach(),
        **{k: v.detach() for k, v in loss_dict.items()},
        **{f"grad.{name}": grad for name, grad in zip(leaves, gradients)},
    }


def assert_equal(result: Dict[str, torch.Tensor], expected: Dict[str, torch.Tensor], model: str) -> None:
    assert result.keys() == expected.keys(), (model, sorted(result.keys() ^ expected.keys()))
    for key, value in result.items():
        assert_close_float64(value, expected[key], msg=lambda message, key=key: f"{model} {key}: {message}")


def worker(
    rank: int, world_size: int, expected: Dict[str, Dict[str, torch.Tensor]], outputs: Dict[str, Any], cases: Dict
) -> None:
    deformable = deformable_detr_result(own_part(fixed_batch(WORLD_SIZE), rank))
    for key, value in deformable.items():
        if key.startswith("grad."):
            dist.all_reduce(value)
            value /= world_size
    assert_equal(deformable, expected["deformable_detr_two_stage"], "deformable_detr_two_stage")
    assert_equal(d_fine_ranking_terms(own_part(fixed_batch(WORLD_SIZE), rank)), expected["d_fine"], "d_fine")
    images = slice(rank, rank + 1)
    rt_detr = rt_detr_result(outputs, images)
    expected_rt_detr = {
        key: value[images] if key.startswith("grad.") else value for key, value in expected["rt_detr"].items()
    }
    for name in OUTPUTS:  # this worker's share of DDP's average of the global gradient
        rt_detr[f"grad.{name}"] /= world_size
    assert_equal(rt_detr, expected_rt_detr, "rt_detr")
    for name, case in cases.items():
        box_normaliser_cases.check_worker(name, images, case["expected"], case["inputs"])
        box_normaliser_cases.check_own_denoising_groups(name, images)


def test_two_workers_rank_and_normalise_as_one_process():
    outputs = rt_detr_outputs()
    expected = {
        "deformable_detr_two_stage": deformable_detr_result(fixed_batch(WORLD_SIZE)),
        "d_fine": d_fine_ranking_terms(fixed_batch(WORLD_SIZE)),
        "rt_detr": rt_detr_result(outputs, slice(0, WORLD_SIZE)),
    }
    spawn_workers(WORLD_SIZE, worker, expected, outputs, box_normaliser_cases.whole_batch_cases())
