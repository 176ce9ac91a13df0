"""One DDP training step with MODEL.ALRP.RANKING = "global": 2 gloo workers holding an
uneven split of a batch give the parameter gradients, loss values and self-balance sums of one
process on the whole batch (batch-independent normalisation: FrozenBN or GN), within a float32
tolerance derived from the same steps in float64 (tests/float64_tolerance.py); a twin whose worker 1
drops one loss's gradient fails by orders of magnitude."""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace
from typing import Dict, List, Optional
from unittest import mock

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.modeling.proposal_generator import proposal_utils
from detectron2.utils.events import EventStorage
from torch.nn.parallel import DistributedDataParallel
from torchvision.ops import boxes as box_ops

from alrp_d2.engine.self_balance import SelfBalanceHook

from ..distributed_cases import spawn_workers
from ..float64_tolerance import assert_close_within, assert_fails_by, difference_in_tolerances, float32_tolerance
from .tiny_configs import instances, tiny_faster_rcnn_cfg, tiny_rank_sort_cfg, tiny_retinanet_cfg, with_masks

CASES = {
    # Images 0-3; worker 0 takes the first ``split`` images. RetinaNet: both workers have
    # positives, 1 + 3 images. Faster R-CNN: worker 1's single image has no object.
    "retinanet_frozenbn": dict(build=tiny_retinanet_cfg, norm="FrozenBN", split=1),
    "faster_rcnn_gn": dict(build=tiny_faster_rcnn_cfg, norm="GN", split=3),
    # Rank & Sort Loss: the RPN, box and mask heads of RS Mask R-CNN, and RS-ATSS.
    "rs_mask_rcnn_gn": dict(
        build=functools.partial(tiny_rank_sort_cfg, "rs_mask_rcnn_R50_FPN_1x.yaml"), norm="GN", split=3
    ),
    "rs_atss_frozenbn": dict(
        build=functools.partial(tiny_rank_sort_cfg, "rs_atss_R50_FPN_1x.yaml"), norm="FrozenBN", split=1
    ),
    # Correlation Loss on every head: per level (Spearman's soft ranks) and of all positives at once (concordance).
    "retinanet_corr_frozenbn": dict(
        build=functools.partial(tiny_retinanet_cfg, CORR_WEIGHT=0.5, CORR_KIND="spearman"), norm="FrozenBN", split=1
    ),
    "faster_rcnn_corr_gn": dict(
        build=functools.partial(tiny_faster_rcnn_cfg, CORR_WEIGHT=0.5, CORR_KIND="concordance", CORR_PER_LEVEL=False),
        norm="GN",
        split=3,
    ),
}


DTYPES = {"float32": torch.float32, "float64": torch.float64}


def make_cfg(name: str):
    case = CASES[name]
    cfg = case["build"](RANKING="global", SB_PERIOD=1)
    cfg.MODEL.RESNETS.NORM = case["norm"]
    return cfg


def make_batch(name: str) -> List[Dict]:
    """Four 64 x 96 noise images with instance masks; the last image of the R-CNN cases has no object."""
    gen = torch.Generator().manual_seed(1)
    objects = [
        instances([[8, 6, 40, 50]], [1], (64, 96)),
        instances([], [], (64, 96)),
        instances([[30, 10, 90, 60], [2, 2, 30, 30]], [0, 2], (64, 96)),
        instances([[50, 20, 80, 60]], [2], (64, 96)) if "rcnn" not in name else instances([], [], (64, 96)),
    ]
    return with_masks([{"image": torch.rand(3, 64, 96, generator=gen) * 255, "instances": inst} for inst in objects])


def build(name: str, state: Dict[str, torch.Tensor], dtype: torch.dtype):
    """The case's model in ``dtype`` with the (float32) weights ``state``, in training mode."""
    model = build_model(make_cfg(name)).to(dtype)
    model.load_state_dict(state)
    model.train()
    return model


def _nms_in_scores_dtype(boxes, scores, idxs, iou_threshold):
    """detectron2's batched_nms casts the boxes to float32, which torchvision's NMS refuses beside float64 scores."""
    return box_ops.batched_nms(boxes.to(scores.dtype), scores, idxs, iou_threshold)


def training_step(model, batch: List[Dict], dropped: Optional[str] = None) -> Dict:
    """Forward and backward of one step in the model's dtype (without the gradient of the loss ``dropped``: the
    broken twin), and the self-balance hook's sums after it."""
    dtype = next(model.parameters()).dtype
    batch = [{**image, "image": image["image"].to(dtype)} for image in batch]
    hook = SelfBalanceHook(period=100)
    with EventStorage(0) as storage, mock.patch.object(proposal_utils, "batched_nms", _nms_in_scores_dtype):
        losses = model(batch)
        sum(value * (0.0 if name == dropped else 1.0) for name, value in losses.items()).backward()
        hook.trainer = SimpleNamespace(model=model, storage=storage, iter=0)
        hook.before_train()
        hook.after_step()
    module = model.module if isinstance(model, DistributedDataParallel) else model
    return {
        "losses": {name: value.detach() for name, value in losses.items()},
        "grads": {name: p.grad.clone() for name, p in module.named_parameters() if p.requires_grad},
        "self_balance": {head: torch.tensor(sums, dtype=dtype) for head, sums in hook.state_dict()["sums"].items()},
    }


def both_dtypes(name: str, state: Dict[str, torch.Tensor], batch: List[Dict], ddp: bool) -> Dict[str, Dict]:
    """The step in float32 and in float64 (keys "float32", "float64"), from the same weights and images."""
    wrap = DistributedDataParallel if ddp else (lambda model: model)
    return {key: training_step(wrap(build(name, state, dtype)), batch) for key, dtype in DTYPES.items()}


def dropped_loss(losses: Dict) -> str:
    """The loss whose gradient worker 1 of the broken twin drops: the first classification (ranking) loss."""
    return min(name for name in losses if name.endswith("_cls"))


def _worker(rank: int, world_size: int, name: str, state_path: str, out_dir: str) -> None:
    state = torch.load(state_path)
    split = CASES[name]["split"]
    batch = make_batch(name)
    mine = batch[:split] if rank == 0 else batch[split:]
    result = both_dtypes(name, state, mine, ddp=True)
    dropped = dropped_loss(result["float32"]["losses"]) if rank == 1 else None
    result["broken"] = training_step(DistributedDataParallel(build(name, state, torch.float32)), mine, dropped)
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module", params=list(CASES))
def ddp_step(request, tmp_path_factory) -> Dict:
    """The one-process step on the whole batch and each worker's step, in float32 and float64 from the same
    weights and images, and each worker's broken float32 step."""
    name = request.param
    out_dir = tmp_path_factory.mktemp(name)
    torch.manual_seed(0)
    state = build_model(make_cfg(name)).state_dict()
    torch.save(state, out_dir / "init.pt")
    spawn_workers(2, _worker, name, str(out_dir / "init.pt"), str(out_dir))
    workers = [torch.load(out_dir / f"rank{rank}.pt") for rank in range(2)]
    return {"expected": both_dtypes(name, state, make_batch(name), ddp=False), "workers": workers}


def tolerances(step: Dict, field: str) -> Dict[str, float]:
    """Per loss, self-balance head or parameter: the float32 tolerance derived from the one process and both
    workers (tests/float64_tolerance.py)."""
    sides = [step["expected"], *step["workers"]]
    return {
        key: float32_tolerance((side["float32"][field][key], side["float64"][field][key]) for side in sides)
        for key in step["expected"]["float32"][field]
    }


def test_ddp_step_with_global_ranking_equals_one_process(ddp_step):
    expected = ddp_step["expected"]["float32"]
    for field in ("losses", "self_balance", "grads"):
        atol = tolerances(ddp_step, field)
        for worker in ddp_step["workers"]:
            # The hook averages the workers' values: each worker's global value enters once.
            result = worker["float32"][field]
            assert result.keys() == expected[field].keys()
            for key, value in expected[field].items():
                assert field != "grads" or value.abs().max() > 0, f"{key} has no gradient: the test would not see it"
                assert_close_within(result[key], value, atol[key], msg=f"{field} {key}")


def test_ddp_step_without_one_gradient_term_of_worker_1_fails(ddp_step):
    expected, atol = ddp_step["expected"]["float32"]["grads"], tolerances(ddp_step, "grads")
    for worker in ddp_step["workers"]:
        ratios = {
            key: difference_in_tolerances(worker["broken"]["grads"][key], grad, atol[key])
            for key, grad in expected.items()
        }
        worst = max(ratios, key=ratios.__getitem__)
        assert_fails_by(ratios[worst], f"gradient of {worst}")
