"""One DDP training step with MODEL.ALRP.RANKING = "global": 2 gloo workers holding an
uneven split of a batch give the parameter gradients, loss values and self-balance sums of one
process on the whole batch (batch-independent normalisation: FrozenBN or GN)."""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace
from typing import Dict, List

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage
from torch.nn.parallel import DistributedDataParallel

from alrp_d2.engine.self_balance import SelfBalanceHook

from ..distributed_cases import spawn_workers
from .tiny_configs import instances, tiny_faster_rcnn_cfg, tiny_rank_sort_cfg, tiny_retinanet_cfg, with_masks

# Relative to the largest gradient entry of each parameter (float32 model; the reductions of
# the two workers and of DDP run in another order than one process's). Measured: <= 3e-6.
GRADIENT_TOLERANCE = 2e-5

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


def training_step(model, batch: List[Dict]) -> Dict:
    """Forward and backward of one step, and the self-balance hook's sums after it."""
    hook = SelfBalanceHook(period=100)
    with EventStorage(0) as storage:
        losses = model(batch)
        sum(losses.values()).backward()
        hook.trainer = SimpleNamespace(model=model, storage=storage, iter=0)
        hook.before_train()
        hook.after_step()
    module = model.module if isinstance(model, DistributedDataParallel) else model
    return {
        "losses": {name: value.detach() for name, value in losses.items()},
        "grads": {name: p.grad.clone() for name, p in module.named_parameters() if p.requires_grad},
        "self_balance": hook.state_dict()["sums"],
    }


def _worker(rank: int, world_size: int, name: str, state_path: str, out_dir: str) -> None:
    model = build_model(make_cfg(name))
    model.load_state_dict(torch.load(state_path))
    model.train()
    split = CASES[name]["split"]
    batch = make_batch(name)
    ddp = DistributedDataParallel(model)
    result = training_step(ddp, batch[:split] if rank == 0 else batch[split:])
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.mark.parametrize("name", list(CASES))
def test_ddp_step_with_global_ranking_equals_one_process(name, tmp_path):
    torch.manual_seed(0)
    model = build_model(make_cfg(name))
    model.train()
    state_path = str(tmp_path / "init.pt")
    torch.save(model.state_dict(), state_path)
    spawn_workers(2, _worker, name, state_path, str(tmp_path))
    workers = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    expected = training_step(model, make_batch(name))

    for result in workers:
        assert result["losses"].keys() == expected["losses"].keys()
        for loss_name, value in expected["losses"].items():
            torch.testing.assert_close(result["losses"][loss_name], value, rtol=1e-5, atol=1e-7)
        # The hook averages the workers' values: each worker's global value enters once.
        for head, state in expected["self_balance"].items():
            assert result["self_balance"][head] == pytest.approx(state, rel=1e-5)
        assert result["grads"].keys() == expected["grads"].keys()
        for param_name, grad in expected["grads"].items():
            scale = grad.abs().max().item()
            assert scale > 0, f"{param_name} has no gradient: the test would not see a difference"
            torch.testing.assert_close(
                result["grads"][param_name], grad, rtol=0, atol=GRADIENT_TOLERANCE * scale, msg=param_name
            )
