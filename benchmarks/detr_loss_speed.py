"""Speed of the losses of all layers of one training step of a DETR-family detector (docs/detr.md, "Speed"):
ours (alrp_d2.detr.SetRankingLoss with Rank & Sort Loss and aLRP Loss) against Hugging Face's RT-DETR losses
(varifocal and focal, transformers' ``RTDetrLoss``) and BRL's ``BucketedRankSort`` on the same inputs, matching
included and apart.

    git --git-dir PATH/BucketedRankingBasedLosses.git archive HEAD mmdet/models/losses/ranking_losses.py \\
        | tar -x -C /tmp/brl                                   # or any clone of blisgard/BucketedRankingBasedLosses
    python benchmarks/detr_loss_speed.py --brl-repo /tmp/brl   # or BRL_REPO=/tmp/brl python benchmarks/...
    python benchmarks/detr_loss_speed.py --device cuda ...     # on a GPU
    BENCH_THREADS=2 python benchmarks/detr_loss_speed.py --scales 16:900 --repeats 5 ...
    python benchmarks/detr_loss_speed.py --previous-repo /tmp/previous   # git archive COMMIT | tar -x -C /tmp/previous

One step (RT-DETR's and DINO's layout): 80 classes, 6 decoder layers and the encoder's top-k proposals (7 layers of
``Q`` queries, each matched by HF's ``RTDetrHungarianMatcher``: scipy's Hungarian algorithm) and the 6 decoder layers
of the denoising queries (``--dn-queries``, 200 by default: as many groups of 2 x the largest number of targets of an
image as fit; positives fixed by the groups, as HF's ``get_cdn_matched_indices``). Each image has 1 to 20 targets
(seeded). Logits near the prior-probability initialisation (N(-4.6, 1), the expensive case for a ranking loss: every
negative is relevant). Every row computes the losses of all 13 layers and their backward pass:

* ``match``: the 7 Hungarian matchings alone, by HF's matcher; ``ours match``: the same 7 by the own-box-term modes'
  matching (``alrp_d2.detr.set_matching.match_sets``: each image's cost against its own targets, one host copy);
* ``ours RS``: SetRankingLoss(set_prediction_criterion("RankSortCriterion")), box terms value-balanced
  (BRS-DETR's choice), the 13 sets of the step in one ``SetRankingLoss`` call as the DETR adapters rank them;
* ``ours aLRP``: SetRankingLoss(set_prediction_criterion("AlrpCriterion"), box_terms="own"), in one call too;
* ``... per set``: the same loss called set by set (``SetRankingLoss.forward`` of a list of one: one ranking call a
  set);
* ``HF VFL``: ``RTDetrLoss.loss_labels_vfl`` and ``loss_boxes`` with RT-DETR's weights, the number of boxes as HF
  computes it; ``HF focal``: Deformable-DETR's (``DeformableDetrImageLoss``: focal loss, weights 2, 5, 2);
* ``BRL RS``: BRS-DETR's per-layer loss with BRL's ``BucketedRankSort`` at delta 0.5 on the (B * Q * C) targets with
  the matched pairs' IoUs, and the same value-balanced box terms as ours (loaded at run time from ``--brl-repo`` or
  ``$BRL_REPO``; left out without it);
* ``... + match``: the row with the 7 matchings of the step;
* ``HF loss fn``: what an RT-DETR model trained by its own loss runs, transformers' ``RTDetrForObjectDetectionLoss``
  on the step laid out as the model's forward hands it (the denoising queries in front of each decoder layer's, the
  encoder's top-k, ``denoising_meta_values``): its matchings, varifocal and box losses;
* ``ours RS model``: what ``use_ranking_loss(model, RankSortCriterion(delta=0.5, loc_error_kind="giou"),
  box_terms="model")`` runs on the same call (``RankingLossFunction``): HF's criterion with each set's varifocal term
  left out (its matching recorded), every set ranked in its place.

Then the small models of ``benchmarks/hf_detr_models.py`` (``--models``: RT-DETR v2 R18 and D-FINE-S, random init,
``--model-scales`` images:px): ``benchmarks/detr_switched_cost.py``'s rows, the switched model's loss function and
training step against the stock model's (and ``--previous-repo``'s switched model's).

The ``ours RS`` / ``ours aLRP`` rows time ``SetRankingLoss`` with its own box terms (the modes other than
``box_terms="model"``, and ``HuggingFaceDETR``'s); ``ours RS model`` the model's own loss with the ranking in place of
its classification term.

Time: every row once as warm-up, then the rows take turns in one process (a change of the machine's load hits all
alike); the medians of ``--repeats`` rounds of the wall-clock time and of the process's CPU time. On a machine shared
with other work, the CPU time (which does not count the time the process waits for a core) is the steadier figure, and
the ratios are taken from it; with ``--device cuda``, from the wall-clock time (synchronised).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from alrp_d2.criteria import RankSortCriterion  # noqa: E402
from alrp_d2.detr import MatchedSet, SetRankingLoss, set_prediction_criterion  # noqa: E402
from alrp_d2.detr.matched_queries import matched_sets, pair_box_losses  # noqa: E402
from alrp_d2.detr.set_matching import match_sets, rt_detr_cost  # noqa: E402
from benchmarks.detr_switched_cost import SCALES as MODEL_SCALES  # noqa: E402
from benchmarks.detr_switched_cost import load_previous_package, print_rows  # noqa: E402
from benchmarks.hf_detr_models import MODELS  # noqa: E402
from benchmarks.loss_speed import load_average, set_threads, synchronise  # noqa: E402
from benchmarks.reference_losses import RANKING_LOSSES_FILE, load_reference  # noqa: E402

SCALES = ["4:300", "16:300", "4:900", "16:900"]
NUM_CLASSES = 80
DECODER_LAYERS = 6
MAX_TARGETS = 20

Indices = List[Tuple[Tensor, Tensor]]
LayerLoss = Callable[[Tensor, Tensor, Indices, List[Dict[str, Tensor]], float], Tensor]
#: One layer of a step: logits, boxes, matched indices, the number of boxes its loss normalises by.
StepLayer = Tuple[Tensor, Tensor, Indices, float]
StepLoss = Callable[[List[StepLayer], List[Dict[str, Tensor]]], Tensor]


class Step(NamedTuple):
    """The outputs of one training step: the matched layers (decoder and encoder), the denoising layers."""

    matched: List[Tuple[Tensor, Tensor]]
    denoising: List[Tuple[Tensor, Tensor]]
    targets: List[Dict[str, Tensor]]
    dn_indices: Indices
    dn_groups: int


def _boxes(count: int, gen: torch.Generator) -> Tensor:
    return torch.cat(
        [torch.rand(count, 2, generator=gen) * 0.8 + 0.1, torch.rand(count, 2, generator=gen) * 0.3 + 0.02], 1
    )


def _layer(batch: int, queries: int, gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor]:
    logits = torch.randn(batch, queries, NUM_CLASSES, generator=gen) - 4.6
    boxes = _boxes(batch * queries, gen).reshape(batch, queries, 4)
    return logits.to(device).requires_grad_(True), boxes.to(device).requires_grad_(True)


def make_targets(batch: int, gen: torch.Generator, device: str) -> List[Dict[str, Tensor]]:
    """1 to ``MAX_TARGETS`` targets an image (HF's ``class_labels`` and normalised cx, cy, w, h ``boxes``)."""
    counts = torch.randint(1, MAX_TARGETS + 1, (batch,), generator=gen).tolist()
    return [
        {
            "class_labels": torch.randint(0, NUM_CLASSES, (count,), generator=gen).to(device),
            "boxes": _boxes(count, gen).to(device),
        }
        for count in counts
    ]


def make_step(batch: int, queries: int, dn_queries: int, device: str, seed: int = 0) -> Step:
    gen = torch.Generator().manual_seed(seed)
    targets = make_targets(batch, gen, device)
    counts = [len(target["class_labels"]) for target in targets]
    slot = 2 * max(counts)
    groups = max(1, dn_queries // slot)
    dn_indices = [
        (torch.cat([group * slot + torch.arange(count) for group in range(groups)]), torch.arange(count).repeat(groups))
        for count in counts
    ]
    matched = [_layer(batch, queries, gen, device) for _ in range(DECODER_LAYERS + 1)]
    denoising = [_layer(batch, groups * slot, gen, device) for _ in range(DECODER_LAYERS)]
    return Step(matched, denoising, targets, dn_indices, groups)


def hf_matcher_and_losses():
    """transformers' RT-DETR config, matcher, and its RT-DETR loss (varifocal) and Deformable-DETR loss (focal)
    modules with their default configurations (RT-DETR's own focal path, ``RTDetrLoss.loss_labels_focal``, fails in
    transformers 5.23: it passes integer targets to ``binary_cross_entropy_with_logits``)."""
    from transformers import RTDetrConfig
    from transformers.loss.loss_deformable_detr import DeformableDetrImageLoss
    from transformers.loss.loss_rt_detr import RTDetrHungarianMatcher, RTDetrLoss

    config = RTDetrConfig(num_labels=NUM_CLASSES, decoder_layers=DECODER_LAYERS)
    focal = DeformableDetrImageLoss(None, NUM_CLASSES, 0.25, ["labels", "boxes"])
    return config, RTDetrHungarianMatcher(config), RTDetrLoss(config), focal


def model_loss_runner(step: Step, loss_function: Callable, config) -> Callable:
    """Forward and backward of an RT-DETR ``loss_function`` (HF's call) on ``step`` laid out as the model's forward
    hands it: each decoder layer's denoising queries in front of its matching ones, the encoder's top-k apart."""
    dn = step.denoising[0][0].shape[1]
    queries = step.matched[0][0].shape[1]
    meta = {
        "dn_positive_idx": [positions for positions, _ in step.dn_indices],
        "dn_num_group": step.dn_groups,
        "dn_num_split": [dn, queries],
    }
    layers = list(zip(step.denoising, step.matched[:DECODER_LAYERS]))
    encoder_logits, encoder_boxes = step.matched[DECODER_LAYERS]

    def run() -> None:
        classes = torch.stack([torch.cat([dn_logits, logits], 1) for (dn_logits, _), (logits, _) in layers], 1)
        coords = torch.stack([torch.cat([dn_boxes, boxes], 1) for (_, dn_boxes), (_, boxes) in layers], 1)
        loss, _, _ = loss_function(
            classes[:, -1],
            step.targets,
            classes.device,
            coords[:, -1],
            config,
            classes,
            coords,
            enc_topk_logits=encoder_logits,
            enc_topk_bboxes=encoder_boxes,
            denoising_meta_values=meta,
        )
        loss.backward()
        for logits, boxes in step.matched + step.denoising:
            logits.grad = boxes.grad = None

    return run


def model_loss_functions(config) -> Dict[str, Callable]:
    """HF's RT-DETR loss function, and ours with Rank & Sort Loss in place of its varifocal term
    (``use_ranking_loss(model, RankSortCriterion(delta=0.5, loc_error_kind="giou"), box_terms="model")``)."""
    from transformers.loss.loss_rt_detr import RTDetrForObjectDetectionLoss

    from alrp_d2.detr.hf_families import LOSS_FAMILIES
    from alrp_d2.detr.hf_loss_function import RankingLossFunction

    ranking = SetRankingLoss(RankSortCriterion(delta=0.5, loc_error_kind="giou"), box_terms="model")
    loss_type = "RTDetrForObjectDetection"
    ours = RankingLossFunction(ranking, LOSS_FAMILIES[loss_type], loss_type, config)
    return {"HF loss fn": RTDetrForObjectDetectionLoss, "ours RS model": ours}


def hf_layer_loss(criterion, labels: str, weights: Dict[str, float]) -> LayerLoss:
    """The weighted sum of one layer's ``labels`` ("vfl" of RTDetrLoss, "labels" of Deformable-DETR's) and box
    losses, as the modules' ``forward``."""

    def loss(logits: Tensor, boxes: Tensor, indices: Indices, targets: List[Dict[str, Tensor]], num_boxes: float):
        outputs = {"logits": logits, "pred_boxes": boxes}
        terms = {**criterion.get_loss(labels, outputs, targets, indices, num_boxes)}
        terms.update(criterion.get_loss("boxes", outputs, targets, indices, num_boxes))
        return sum(weights[name] * value for name, value in terms.items())

    return loss


def layer_by_layer(layer_loss: LayerLoss) -> StepLoss:
    """The step's loss as the sum of ``layer_loss`` of every layer."""
    return lambda layers, targets: sum(layer_loss(*layer[:3], targets, layer[3]) for layer in layers)


def ours_step_loss(module: SetRankingLoss) -> StepLoss:
    """The sum of the terms of every layer of the step, all ranked in one :meth:`SetRankingLoss.forward`."""

    def loss(layers: List[StepLayer], targets: List[Dict[str, Tensor]]) -> Tensor:
        terms = module([MatchedSet(*layer[:3]) for layer in layers], targets)
        return torch.stack([value for set_terms in terms for value in set_terms.values()]).sum()

    return loss


def brl_layer_loss(repo: str, device: str) -> LayerLoss:
    """BRS-DETR's layer loss with BRL's BucketedRankSort; the box terms value-balanced as ours."""
    bucketed = load_reference("rank_sort", "BRL", repo, device)

    def loss(logits: Tensor, boxes: Tensor, indices: Indices, targets: List[Dict[str, Tensor]], num_boxes: float):
        (matched,) = matched_sets([(logits, boxes, indices)], targets)
        ((pair_losses,), (ious,)) = pair_box_losses([boxes], [matched])
        l1, giou = pair_losses.unbind(1)
        flat_targets = torch.zeros(logits.numel(), device=logits.device)
        flat_targets[matched.row * NUM_CLASSES + matched.label] = ious.float()
        ranking, sorting = bucketed(logits.reshape(-1), flat_targets, 0.5)
        rank_sort = ranking + sorting
        box = [term.mean() for term in (l1, giou)]
        return rank_sort + sum(term * (rank_sort.detach() / term.detach()) for term in box)

    return loss


def ours_set_by_set(module: SetRankingLoss) -> StepLoss:
    """The sum of the terms of every layer of the step, each layer ranked by its own :meth:`SetRankingLoss.forward`
    call (a list of one)."""

    def layer_loss(logits: Tensor, boxes: Tensor, indices: Indices, targets: List[Dict[str, Tensor]], _) -> Tensor:
        (terms,) = module([MatchedSet(logits, boxes, indices)], targets)
        return sum(terms.values())

    return layer_by_layer(layer_loss)


def step_runner(step: Step, step_loss: StepLoss, matcher: Optional[Callable], indices: List[Indices]) -> Callable:
    """Forward and backward of the losses of all layers of ``step``; with ``matcher`` the matchings are made first,
    otherwise ``indices`` (the precomputed ones) are used."""
    num_boxes = float(max(sum(len(t["class_labels"]) for t in step.targets), 1))

    def run() -> None:
        layers: List[StepLayer] = []
        for layer, (logits, boxes) in enumerate(step.matched):
            layer_indices = (
                matcher({"logits": logits, "pred_boxes": boxes}, step.targets) if matcher else indices[layer]
            )
            layers.append((logits, boxes, layer_indices, num_boxes))
        layers += [(logits, boxes, step.dn_indices, num_boxes * step.dn_groups) for logits, boxes in step.denoising]
        step_loss(layers, step.targets).backward()
        for logits, boxes in step.matched + step.denoising:
            logits.grad = boxes.grad = None

    return run


def median_times(runs: Dict[str, Callable[[], object]], repeats: int, device: str) -> Dict[str, Tuple[float, float]]:
    """The median (wall-clock, CPU) time of every run, the runs taking turns, after one warm-up round."""
    times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in runs}
    for round_ in range(repeats + 1):
        for name, run in runs.items():
            synchronise(device)
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            synchronise(device)
            if round_:
                times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {
        name: (statistics.median(w for w, _ in pairs), statistics.median(c for _, c in pairs))
        for name, pairs in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--brl-repo", default=os.environ.get("BRL_REPO"), help="blisgard/BucketedRankingBasedLosses")
    parser.add_argument("--scales", nargs="+", default=SCALES, help="B:Q, images per worker and queries")
    parser.add_argument("--dn-queries", type=int, default=200, help="denoising queries (at most)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (median reported)")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS), help="small HF models")
    parser.add_argument("--model-scales", nargs="+", default=MODEL_SCALES, help="images:px of the models' steps")
    parser.add_argument("--previous-repo", help="another checkout of this project (git archive COMMIT | tar -x)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device")
    if args.brl_repo is not None and not os.path.isfile(os.path.join(args.brl_repo, RANKING_LOSSES_FILE)):
        parser.error(f"BRL repository {args.brl_repo} has no {RANKING_LOSSES_FILE}")
    set_threads()
    config, matcher, varifocal, focal = hf_matcher_and_losses()
    model_losses = model_loss_functions(config)
    rank_sort = SetRankingLoss(set_prediction_criterion("RankSortCriterion"))
    alrp = SetRankingLoss(set_prediction_criterion("AlrpCriterion"), box_terms="own")
    losses: Dict[str, StepLoss] = {
        "ours RS": ours_step_loss(rank_sort),
        "ours RS per set": ours_set_by_set(rank_sort),
        "ours aLRP": ours_step_loss(alrp),
        "ours aLRP per set": ours_set_by_set(alrp),
        "HF VFL": layer_by_layer(hf_layer_loss(varifocal, "vfl", varifocal.weight_dict)),
        "HF focal": layer_by_layer(
            hf_layer_loss(focal, "labels", {"loss_ce": 2.0, "loss_bbox": 5.0, "loss_giou": 2.0})
        ),
    }
    if args.brl_repo is not None:
        losses["BRL RS"] = layer_by_layer(brl_layer_loss(args.brl_repo, args.device))
    print(
        f"device: {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"load average {load_average()}, {NUM_CLASSES} classes, {DECODER_LAYERS} decoder layers + encoder "
        f"+ {DECODER_LAYERS} denoising layers, median of {args.repeats}"
    )
    print(
        "| images | queries + denoising | row | wall time per step (s) | CPU time per step (s) | its time / ours RS |"
    )
    print("|---|---|---|---|---|---|")
    for scale in args.scales:
        batch, queries = (int(value) for value in scale.split(":"))
        step = make_step(batch, queries, args.dn_queries, args.device)
        indices = [matcher({"logits": logits, "pred_boxes": boxes}, step.targets) for logits, boxes in step.matched]
        runs: Dict[str, Callable[[], object]] = {
            "match": lambda step=step: [matcher({"logits": c, "pred_boxes": b}, step.targets) for c, b in step.matched],
            "ours match": lambda step=step: match_sets(rt_detr_cost(config), step.matched, step.targets),
        }
        for name, step_loss in losses.items():
            runs[name] = step_runner(step, step_loss, None, indices)
        for name in ("ours RS", "HF VFL"):
            runs[f"{name} + match"] = step_runner(step, losses[name], matcher, indices)
        for name, loss_function in model_losses.items():
            runs[name] = model_loss_runner(step, loss_function, config)
        times = median_times(runs, args.repeats, args.device)
        column = 0 if args.device == "cuda" else 1
        dn = step.denoising[0][0].shape[1]
        for name, (wall, cpu) in times.items():
            ratio = times[name][column] / times["ours RS"][column]
            print(f"| {batch} | {queries} + {dn} | {name} | {wall:.3f} | {cpu:.3f} | {ratio:.2f}x |")
        brl = f"{times['BRL RS'][column] / times['ours RS'][column]:.2f}x" if "BRL RS" in times else "not run"
        ratio = times["ours RS + match"][column] / times["HF VFL + match"][column]
        model = times["ours RS model"][column] / times["HF loss fn"][column]
        summary = (
            f"BRL RS / ours RS {brl}; (ours RS + match) / (HF VFL + match) {ratio:.2f}x; "
            f"ours RS model / HF loss fn {model:.2f}x"
        )
        print(f"| {batch} | {queries} + {dn} | {summary} | | | |")
        sys.stdout.flush()
    if args.models:
        print()
        previous = None if args.previous_repo is None else load_previous_package(args.previous_repo)
        print_rows(args.models, args.model_scales, args.repeats, args.device, previous)
    print(f"load average at the end {load_average()}")


if __name__ == "__main__":
    main()
