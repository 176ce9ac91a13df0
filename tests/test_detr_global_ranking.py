"""The set-prediction loss ranked over 2 gloo workers, each holding some images of the layer: with ranking "global"
every worker's values equal one process on the whole batch and the workers' gradients, averaged as DDP does, equal
its gradients; with "per_worker" each worker's loss is the loss of its own images."""

from __future__ import annotations

import os
from typing import Dict, List

import pytest
import torch

from alrp_d2.detr import MatchedSet, SetRankingLoss, set_prediction_criterion

from .detr_cases import Layer, make_layer, part
from .detr_step_cases import per_set_criterion, ranked_step, step_part, step_sets
from .distributed_cases import spawn_workers

WORLD_SIZE = 2
#: A step's sets ranked in one call of ``SetRankingLoss``: the images and worker 0's share.
STEP = (dict(seed=3, num_targets=[3, 2, 0, 1]), 2)
#: (layer, the images of worker 0), the rest are worker 1's: a worker without objects, uneven shares, denoising groups.
LAYERS = [
    (dict(seed=1, num_targets=[3, 2, 4, 1]), 2),
    (dict(seed=2, num_targets=[0, 0, 3, 2]), 2),
    (dict(seed=5, num_targets=[3, 4, 2], tied=True), 1),
    (dict(seed=7, num_targets=[2, 3, 0, 1], dn_groups=2), 2),
]
OPTIONS: Dict[str, Dict] = {
    "rank_sort": dict(criterion="RankSortCriterion", rank_weight=2.0),
    "rank_sort_fixed": dict(criterion="RankSortCriterion", box_terms="fixed"),
    "alrp_own_corr": dict(criterion="AlrpCriterion", box_terms="own", corr_weight=0.5),
    "ap": dict(criterion="APCriterion"),
    "rank_sort_own": dict(criterion="RankSortCriterion", box_terms="own"),
    "ap_own": dict(criterion="APCriterion", box_terms="own"),
}


def run(layer: Layer, options: Dict, ranking: str) -> Dict[str, torch.Tensor]:
    options = dict(options)
    loss = SetRankingLoss(set_prediction_criterion(options.pop("criterion")), ranking=ranking, **options)
    logits = layer.logits.clone().requires_grad_(True)
    pred_boxes = layer.pred_boxes.clone().requires_grad_(True)
    (losses,) = loss([MatchedSet(logits, pred_boxes, layer.indices)], layer.targets)
    logits_grad, boxes_grad = torch.autograd.grad(sum(losses.values()), [logits, pred_boxes])
    return {**{name: value.detach() for name, value in losses.items()}, "logits": logits_grad, "boxes": boxes_grad}


def _worker(rank: int, world_size: int, out_dir: str) -> None:
    results: List = []
    for case, split in LAYERS:
        layer = make_layer(**case)
        mine = part(layer, slice(0, split) if rank == 0 else slice(split, None))
        for options in OPTIONS.values():
            results.append({ranking: run(mine, options, ranking) for ranking in ("global", "per_worker")})
    sets, first = step_sets(**STEP[0])
    mine, targets = step_part(sets, first.targets, slice(0, STEP[1]) if rank == 0 else slice(STEP[1], None))
    for options in OPTIONS.values():
        criterion, rest = set_prediction_criterion(options["criterion"]), dict(options)
        del rest["criterion"]
        results.append(ranked_step(mine, targets, criterion, ranking="global", **rest))
    layer = part(make_layer(**LAYERS[0][0]), slice(0, 2) if rank == 0 else slice(2, None))
    if rank == 1:
        layer = layer._replace(indices=[(torch.tensor([99]), torch.tensor([0])), layer.indices[1]])
    try:
        SetRankingLoss(set_prediction_criterion("RankSortCriterion"), ranking="global")(
            [MatchedSet(layer.logits, layer.pred_boxes, layer.indices)], layer.targets
        )
        results.append("no error")
    except (ValueError, FloatingPointError) as error:
        results.append(str(error))
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def worker_results(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("detr_global"))
    spawn_workers(WORLD_SIZE, _worker, out_dir)
    return [torch.load(os.path.join(out_dir, f"rank{rank}.pt")) for rank in range(WORLD_SIZE)]


def cases():
    for layer_number in range(len(LAYERS)):
        for name in OPTIONS:
            yield pytest.param(layer_number, name, id=f"layer{layer_number}-{name}")


@pytest.mark.parametrize("layer_number, name", cases())
def test_global_ranking_equals_one_process_on_the_whole_batch(worker_results, layer_number, name):
    case, _ = LAYERS[layer_number]
    expected = run(make_layer(**case), OPTIONS[name], "global")
    index = layer_number * len(OPTIONS) + list(OPTIONS).index(name)
    per_worker = [results[index]["global"] for results in worker_results]
    for key in expected:
        if key in ("logits", "boxes"):
            gathered = torch.cat([result[key] for result in per_worker]) / WORLD_SIZE
            torch.testing.assert_close(gathered, expected[key], rtol=1e-6, atol=1e-9)
        else:
            for result in per_worker:
                torch.testing.assert_close(result[key], expected[key], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("layer_number", range(len(LAYERS)))
def test_per_worker_ranking_is_each_workers_own_loss(worker_results, layer_number):
    case, split = LAYERS[layer_number]
    layer = make_layer(**case)
    index = layer_number * len(OPTIONS) + list(OPTIONS).index("rank_sort")
    for rank, images in enumerate([slice(0, split), slice(split, None)]):
        expected = run(part(layer, images), OPTIONS["rank_sort"], "per_worker")
        for key, value in expected.items():
            torch.testing.assert_close(worker_results[rank][index]["per_worker"][key], value, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("layer_number", range(len(LAYERS)))
def test_per_worker_fixed_box_terms_divide_by_the_workers_mean_number_of_pairs(worker_results, layer_number):
    case, split = LAYERS[layer_number]
    layer = make_layer(**case)
    index = layer_number * len(OPTIONS) + list(OPTIONS).index("rank_sort_fixed")
    shares = [part(layer, images) for images in (slice(0, split), slice(split, None))]
    counts = [sum(len(query) for query, _ in share.indices) for share in shares]
    mean_count = max(sum(counts) / WORLD_SIZE, 1.0)
    for rank, share in enumerate(shares):
        alone = run(share, OPTIONS["rank_sort_fixed"], "per_worker")
        for key in ("loss_bbox", "loss_giou"):
            expected = alone[key] * max(counts[rank], 1) / mean_count
            torch.testing.assert_close(worker_results[rank][index]["per_worker"][key], expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", OPTIONS)
def test_one_call_over_workers_equals_one_process_ranking_set_by_set(worker_results, name):
    """Every set of a step (decoder layers, a denoising set, a set without a matched pair, one without a query) in
    one call of a global ranking on 2 workers equals one process ranking the sets of all images one by one."""
    options = dict(OPTIONS[name])
    sets, first = step_sets(**STEP[0])
    expected = ranked_step(sets, first.targets, per_set_criterion(options.pop("criterion")), **options)
    index = len(LAYERS) * len(OPTIONS) + list(OPTIONS).index(name)
    per_worker = [results[index] for results in worker_results]
    for set_number, set_expected in enumerate(expected):
        for key, value in set_expected.items():
            if key in ("logits", "boxes"):
                gathered = torch.cat([result[set_number][key] for result in per_worker]) / WORLD_SIZE
                torch.testing.assert_close(gathered, value, rtol=1e-6, atol=1e-9, msg=f"set {set_number} {key}")
            else:
                for result in per_worker:
                    torch.testing.assert_close(result[set_number][key], value, rtol=1e-6, atol=1e-9)


def test_bad_input_on_one_worker_raises_on_every_worker(worker_results):
    assert worker_results[0][-1] == "ranking loss inputs of worker(s) [1] are invalid"
    assert worker_results[1][-1].startswith("indices[0]: query index 99 out of range [0, Q = 12)")
