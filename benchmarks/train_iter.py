"""Seconds per training iteration: the ranking-loss models next to their detectron2 baselines, in one run.

Each pair shares the backbone, anchors and the exact same input batches; only the loss (and,
for Faster R-CNN, sampling) differs:

* aLRP RetinaNet (``configs/alrp_R50_500.yaml``) vs detectron2's focal-loss ``RetinaNet``;
* aLRP Faster R-CNN (``configs/alrp_faster_rcnn_R50_FPN_500.yaml``) vs detectron2's Faster R-CNN
  (``RPN`` + ``StandardROIHeads``: cross-entropy + L1 with sampling);
* RS R-CNN (``configs/rs_faster_rcnn_R50_FPN_1x.yaml``, Rank & Sort Loss in both stages, no sampling) vs the
  same detectron2 Faster R-CNN;
* aLRP FoveaBox (``configs/foveabox_alrp_R50_500.yaml``) vs ``FoveaBox`` with its focal loss + Smooth L1;
* aLRP FCOS (``configs/alrp_fcos_R50_500.yaml``, with centre-ness) vs detectron2's FCOS (focal loss +
  GIoU + centre-ness, ``ConfigurableFCOS``);
* the DETR recipes (``HuggingFaceDETR``, the ``detr`` extra): RT-DETR v2 R50-vd with Rank & Sort Loss
  (``configs/COCO-Detection/rtdetr_v2_R_50_vd_6x_rank_sort.py``) or aLRP Loss (``..._alrp.py``) vs the same model with
  its own varifocal loss; two-stage Deformable-DETR R50 with Rank & Sort Loss
  (``deformable_detr_two_stage_R_50_12ep_rank_sort.py``) vs its own focal loss. Every decoder layer, the denoising
  queries and the encoder's proposals are matched and ranked (the matching, scipy's Hungarian algorithm on the CPU, is
  part of both sides' step); ``--depth`` does not apply to them;
* Hugging Face's models built directly from their configs (``benchmarks/hf_detr_models.py``): RT-DETR v2 R18
  (``rtdetr_v2_r18_rank_sort``) and D-FINE-S (``dfine_s_rank_sort``), 80 classes, 300 queries, each trained by
  Rank & Sort Loss with its own box terms (``use_ranking_loss(model, RankSortCriterion(delta=0.5,
  loc_error_kind="giou"), box_terms="model")``) vs the same model with its own loss (varifocal; D-FINE's also FGL and
  DDF), through ``model(pixel_values=..., labels=...)``; ``--depth`` does not apply to them.

An iteration is forward, backward and an SGD step on a batch already in memory (no data
loading). The two models of a pair alternate iteration by iteration so that both see the same
machine load; the median over the timed iterations is reported. Models start from random
initialisation (with BatchNorm in the backbone, as frozen statistics would let the baselines'
losses overflow), where nearly every negative is within delta of the positives: the most
expensive case for the ranking losses.

    python benchmarks/train_iter.py                                  # CPU: batch 2 at 512 px
    python benchmarks/train_iter.py --device cuda --batch 32 --iters 20
    python benchmarks/train_iter.py --pairs rtdetr_v2_r18_rank_sort dfine_s_rank_sort --batch 4 --size 640
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple, Union

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from detectron2.config import CfgNode  # noqa: E402
from detectron2.modeling import build_model  # noqa: E402
from detectron2.structures import Boxes, Instances  # noqa: E402
from detectron2.utils.events import EventStorage  # noqa: E402

from alrp_d2.config import setup_cfg  # noqa: E402
from benchmarks import hf_detr_models  # noqa: E402
from benchmarks.loss_speed import load_average  # noqa: E402

#: The DETR pairs: the ranking recipe, compared with the same model trained by its own loss.
DETR_PAIRS: Dict[str, str] = {
    "rtdetr_rank_sort": "COCO-Detection/rtdetr_v2_R_50_vd_6x_rank_sort.py",
    "rtdetr_alrp": "COCO-Detection/rtdetr_v2_R_50_vd_6x_alrp.py",
    "deformable_rank_sort": "COCO-Detection/deformable_detr_two_stage_R_50_12ep_rank_sort.py",
}
DETR_NUM_CLASSES = 80
#: Hugging Face's models, with Rank & Sort Loss and their own box terms vs their own loss: the pair -> the model of
#: benchmarks/hf_detr_models.py.
HF_PAIRS: Dict[str, str] = {"rtdetr_v2_r18_rank_sort": "rtdetr_v2_r18", "dfine_s_rank_sort": "dfine_s"}


def to_focal_retinanet(cfg: CfgNode) -> None:
    cfg.MODEL.META_ARCHITECTURE = "RetinaNet"


def to_standard_faster_rcnn(cfg: CfgNode) -> None:
    cfg.MODEL.PROPOSAL_GENERATOR.NAME = "RPN"
    cfg.MODEL.ROI_HEADS.NAME = "StandardROIHeads"


def to_focal_foveabox(cfg: CfgNode) -> None:
    cfg.MODEL.META_ARCHITECTURE = "FoveaBox"


def to_focal_fcos(cfg: CfgNode) -> None:
    cfg.MODEL.META_ARCHITECTURE = "ConfigurableFCOS"


PAIRS: Dict[str, Tuple[str, Callable[[CfgNode], None]]] = {
    "retinanet": ("alrp_R50_500.yaml", to_focal_retinanet),
    "faster_rcnn": ("alrp_faster_rcnn_R50_FPN_500.yaml", to_standard_faster_rcnn),
    "rs_faster_rcnn": ("rs_faster_rcnn_R50_FPN_1x.yaml", to_standard_faster_rcnn),
    "foveabox": ("foveabox_alrp_R50_500.yaml", to_focal_foveabox),
    "fcos": ("alrp_fcos_R50_500.yaml", to_focal_fcos),
}


def num_classes(cfg: CfgNode) -> int:
    """The number of classes of the config's detector."""
    meta = cfg.MODEL.META_ARCHITECTURE
    if "FoveaBox" in meta:
        return cfg.MODEL.FOVEABOX.NUM_CLASSES
    if "FCOS" in meta:
        return cfg.MODEL.FCOS.NUM_CLASSES
    return cfg.MODEL.RETINANET.NUM_CLASSES


def load_config(name: str, device: str, depth: int, tiny: bool = False) -> CfgNode:
    """The config ``name`` from random init on ``device`` with a ResNet of ``depth``; ``tiny``: the
    test suite's sizes (16-channel FPN, one-conv heads, 3 classes), for smoke runs."""
    cfg = setup_cfg(os.path.join(ROOT, "configs", name))
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.DEVICE = device
    cfg.MODEL.RESNETS.DEPTH = depth
    # From random init, FrozenBN would let activations explode (the baselines' losses overflow).
    cfg.MODEL.RESNETS.NORM = "BN"
    if depth < 50:
        cfg.MODEL.RESNETS.RES2_OUT_CHANNELS = 64
    if tiny:
        cfg.MODEL.FPN.OUT_CHANNELS = 16
        cfg.MODEL.ROI_BOX_HEAD.FC_DIM = 64
        for node in (cfg.MODEL.RETINANET, cfg.MODEL.FOVEABOX, cfg.MODEL.FCOS):
            node.NUM_CONVS, node.NUM_CLASSES, node.NORM = 1, 3, ""
        cfg.MODEL.ROI_HEADS.NUM_CLASSES = 3
    return cfg


def make_batches(count: int, batch: int, size: int, num_classes: int, objects: int, device: str) -> List[List[Dict]]:
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(count):
        images = []
        for _ in range(batch):
            xy = torch.rand(objects, 2, generator=gen) * size * 0.7
            wh = torch.rand(objects, 2, generator=gen) * size * 0.3 + 16
            instances = Instances((size, size))
            instances.gt_boxes = Boxes(torch.cat([xy, (xy + wh).clamp(max=size)], 1))
            instances.gt_classes = torch.randint(0, num_classes, (objects,), generator=gen)
            image = (torch.rand(3, size, size, generator=gen) * 255).to(device)
            images.append({"image": image, "instances": instances})
        batches.append(images)
    return batches


def loss_of(model: torch.nn.Module, batch: Union[List[Dict], Dict[str, Any]]) -> torch.Tensor:
    """The training loss of ``batch``: a detectron2 model's sum of losses, a Hugging Face model's ``loss`` (the
    batch its keyword arguments)."""
    if isinstance(batch, dict):
        return model(**batch).loss
    return sum(model(batch).values())


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Any,
    device: str,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """The seconds of one iteration by ``clock`` (wall-clock by default; ``time.process_time``: the process's CPU
    time, which a shared machine's load moves less)."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = clock()
    loss = loss_of(model, batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return clock() - start


def detr_models(name: str, device: str) -> List[torch.nn.Module]:
    """The DETR recipe ``name`` of :data:`DETR_PAIRS` and the same model with its own loss, from the same random
    init."""
    from detectron2.config import LazyConfig, instantiate

    cfg = LazyConfig.load(os.path.join(ROOT, "configs", DETR_PAIRS[name]))
    cfg.model.num_classes = DETR_NUM_CLASSES
    models = []
    for loss in (cfg.model.loss, None):
        cfg.model.loss = loss
        torch.manual_seed(0)
        models.append(instantiate(cfg.model).to(device).train())
    return models


def benchmark_pair(name: str, args: argparse.Namespace) -> Tuple[float, float]:
    if name in HF_PAIRS:
        models, classes = hf_detr_models.ranking_and_own(HF_PAIRS[name], args.device), hf_detr_models.NUM_CLASSES
    elif name in DETR_PAIRS:
        models, classes = detr_models(name, args.device), DETR_NUM_CLASSES
    else:
        config, to_baseline = PAIRS[name]
        alrp_cfg = load_config(config, args.device, args.depth, getattr(args, "tiny", False))
        baseline_cfg = alrp_cfg.clone()
        to_baseline(baseline_cfg)
        torch.manual_seed(0)
        models, classes = [build_model(alrp_cfg).train(), build_model(baseline_cfg).train()], num_classes(alrp_cfg)
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9) for m in models]
    count = args.warmup + args.iters
    batches: List[Any] = make_batches(count, args.batch, args.size, classes, args.objects, args.device)
    if name in HF_PAIRS:
        batches = [hf_detr_models.hf_batch(batch, args.size) for batch in batches]
    times: List[List[float]] = [[], []]
    clock = time.process_time if getattr(args, "clock", "wall") == "cpu" else time.perf_counter
    with EventStorage():
        for step, batch in enumerate(batches):
            for index, (model, optimizer) in enumerate(zip(models, optimizers)):
                elapsed = train_step(model, optimizer, batch, args.device, clock)
                if step >= args.warmup:
                    times[index].append(elapsed)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    choices = list(PAIRS) + list(DETR_PAIRS) + list(HF_PAIRS)
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=choices, help="default: all but the DETRs")
    parser.add_argument("--batch", type=int, default=2, help="images per iteration")
    parser.add_argument("--size", type=int, default=512, help="square input size (SSD training size)")
    parser.add_argument("--objects", type=int, default=7, help="ground-truth boxes per image")
    parser.add_argument("--depth", type=int, default=50, help="ResNet depth of the shared backbone")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument(
        "--clock", default="wall", choices=["wall", "cpu"], help="cpu: the process's CPU time (on a CPU, one thread)"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device")
    if args.device == "cuda" and args.clock == "cpu":
        parser.error("--clock cpu times the host only: --device cuda takes --clock wall")

    print(
        f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"R{args.depth}-FPN (detectron2 pairs), batch {args.batch} x {args.size}^2, {args.objects} objects/image, "
        f"median of {args.iters} iterations after {args.warmup} warm-up, {args.clock} time, "
        f"load average {load_average()}"
    )
    print(f"{'model':<24} | {'ranking (s/it)':>14} | {'baseline (s/it)':>15} | {'ratio':>6}")
    for name in args.pairs:
        ranking_time, baseline_time = benchmark_pair(name, args)
        print(f"{name:<24} | {ranking_time:>14.3f} | {baseline_time:>15.3f} | {ranking_time / baseline_time:>5.2f}x")
    print(f"load average at the end {load_average()}")


if __name__ == "__main__":
    main()
