"""aLRP Loss against focal loss and AP Loss on the synthetic shapes dataset, side by side.

Trains the quickstart aLRP RetinaNet (``configs/quickstart/alrp_retinanet_shapes.yaml``) and the
same network, anchors, data and schedule with

* detectron2's focal-loss ``RetinaNet`` (focal loss + smooth L1 with its default box weights), and
* AP Loss with a GIoU localisation loss (``MODEL.ALRP.CRITERION APCriterion``, constant weight 1),

then prints COCO AP, AP50, AP75, AP90 and oLRP of each on ``shapes_val``. The paper's claim
(Table 2) is that aLRP Loss gains most at high IoUs (AP75, AP90).

``--detectors foveabox fcos`` does the same for the anchor-free detectors (paper Sec. 5.4), each with
its quickstart config (``alrp_foveabox_shapes.yaml``, ``alrp_fcos_shapes.yaml``: same backbone, data,
schedule, seed and learning rate as the RetinaNet one):

* FoveaBox with its own focal loss + Smooth L1 (``FoveaBox``) against aLRP Loss (``AlrpFoveaBox``);
* detectron2's FCOS (focal loss + GIoU + centre-ness, ``ConfigurableFCOS``) against aLRP FCOS with
  and without the centre-ness branch (``MODEL.FCOS.CENTERNESS bce / none``).

``--detectors correlation`` adds Correlation Loss (Kahraman et al., AAAI 2023) to each loss of the RetinaNet
quickstart: focal loss with and without it (``CorrelationRetinaNet``, Spearman 0.1 per level, as the official Corr
RetinaNet), aLRP Loss and Rank & Sort Loss (``MODEL.ALRP.CRITERION RankSortCriterion``, delta 0.5) with and without
it (concordance 0.2 of all positives, as the official RS + Corr ATSS).

``--detectors faster_rcnn mask_rcnn`` compares Rank & Sort Loss with aLRP Loss and detectron2's losses in the
two-stage detectors, all from the RS Mask R-CNN quickstart (``rs_mask_rcnn_shapes.yaml``: the same backbone, data,
schedule, seed, learning rate and proposals, the GT boxes added to them), without (``faster_rcnn``) and with
(``mask_rcnn``) the mask head:

* RS Loss: RS R-CNN / RS Mask R-CNN (RPN, box and mask heads);
* aLRP Loss (self-balanced, RPN and box head; the mask head with detectron2's BCE);
* detectron2's ``RPN`` + ``StandardROIHeads``: cross-entropy + smooth L1 with sampling, BCE masks.

Mask detectors also report the mask (``segm``) AP, AP50, AP75, oLRP and rho.

Each result is also written to ``<output>/<detector>_<index>.json``.

    python benchmarks/shapes_ablation.py                  # ~25 minutes on 2 CPU cores
    python benchmarks/shapes_ablation.py --iters 300      # quicker, less trained
    python benchmarks/shapes_ablation.py --detectors foveabox fcos --output DIR
    python benchmarks/shapes_ablation.py --detectors faster_rcnn mask_rcnn --iters 1000 --output DIR \
        --lock /tmp/alrp_cpu.lock       # ~45 minutes; each training holds the lock (a shared CPU)
    python benchmarks/shapes_ablation.py --detectors fcos --output DIR --eval-only \
        --opts MODEL.FCOS.SCORE_THRESH_TEST 0.0     # re-evaluate DIR's models, other inference
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
import time
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from detectron2.engine import default_argument_parser  # noqa: E402
from detectron2.utils.env import seed_all_rng  # noqa: E402
from detectron2.utils.logger import setup_logger  # noqa: E402

import train_net  # noqa: E402
from alrp_d2.checkpoint import AlrpCheckpointer  # noqa: E402
from alrp_d2.config import setup_cfg  # noqa: E402
from alrp_d2.engine import AlrpTrainer  # noqa: E402

QUICKSTART = os.path.join(ROOT, "configs", "quickstart")
RS_MASK_RCNN = "rs_mask_rcnn_shapes.yaml"
WITHOUT_MASKS = ["MODEL.MASK_ON", "False"]
ALRP_LOSSES = [
    *("MODEL.ALRP.CRITERION", "AlrpCriterion", "MODEL.ALRP.SB_ENABLED", "True", "MODEL.ALRP.DELTA", "1.0"),
    *("MODEL.ALRP.RPN_DELTA", "1.0", "MODEL.ROI_MASK_HEAD.NAME", "MaskRCNNConvUpsampleHead"),
]
DETECTRON2_LOSSES = [
    *("MODEL.PROPOSAL_GENERATOR.NAME", "RPN", "MODEL.ROI_HEADS.NAME", "StandardROIHeads"),
    *("MODEL.RPN.BBOX_REG_WEIGHTS", "(1.0, 1.0, 1.0, 1.0)", "MODEL.ROI_MASK_HEAD.NAME", "MaskRCNNConvUpsampleHead"),
]
FOCAL_RETINANET = ["MODEL.META_ARCHITECTURE", "RetinaNet", "MODEL.RETINANET.BBOX_REG_WEIGHTS", "(1.0, 1.0, 1.0, 1.0)"]
RANK_SORT = ["MODEL.ALRP.CRITERION", "RankSortCriterion", "MODEL.ALRP.SB_ENABLED", "False", "MODEL.ALRP.DELTA", "0.5"]
# Correlation Loss as the official Corr RetinaNet (Spearman 0.1 per level) and RS + Corr ATSS (concordance 0.2).
CORR_SPEARMAN = [
    "MODEL.ALRP.CORR_KIND",
    "spearman",
    "MODEL.ALRP.CORR_WEIGHT",
    "0.1",
    "MODEL.ALRP.CORR_PER_LEVEL",
    "True",
]
CORR_CONCORDANCE = [
    *("MODEL.ALRP.CORR_KIND", "concordance", "MODEL.ALRP.CORR_WEIGHT", "0.2", "MODEL.ALRP.CORR_PER_LEVEL", "False"),
]
# detector -> variant name -> (quickstart config, overrides)
VARIANTS: Dict[str, Dict[str, Tuple[str, List[str]]]] = {
    "retinanet": {
        "aLRP Loss (GIoU, SB)": ("alrp_retinanet_shapes.yaml", []),
        "Focal Loss + Smooth L1": ("alrp_retinanet_shapes.yaml", FOCAL_RETINANET),
        "AP Loss + GIoU": (
            "alrp_retinanet_shapes.yaml",
            ["MODEL.ALRP.CRITERION", "APCriterion", "MODEL.ALRP.SB_ENABLED", "False"],
        ),
    },
    "correlation": {
        "Focal Loss + Smooth L1": ("alrp_retinanet_shapes.yaml", FOCAL_RETINANET),
        "Focal Loss + Smooth L1 + Corr (Spearman 0.1, per level)": (
            "alrp_retinanet_shapes.yaml",
            [*FOCAL_RETINANET, "MODEL.META_ARCHITECTURE", "CorrelationRetinaNet", *CORR_SPEARMAN],
        ),
        "aLRP Loss (GIoU, SB)": ("alrp_retinanet_shapes.yaml", []),
        "aLRP Loss (GIoU, SB) + Corr (concordance 0.2)": ("alrp_retinanet_shapes.yaml", CORR_CONCORDANCE),
        "RS Loss (GIoU)": ("alrp_retinanet_shapes.yaml", RANK_SORT),
        "RS Loss (GIoU) + Corr (concordance 0.2)": ("alrp_retinanet_shapes.yaml", RANK_SORT + CORR_CONCORDANCE),
    },
    "foveabox": {
        "FoveaBox, Focal Loss + Smooth L1": ("alrp_foveabox_shapes.yaml", ["MODEL.META_ARCHITECTURE", "FoveaBox"]),
        "FoveaBox, aLRP Loss (GIoU, SB)": ("alrp_foveabox_shapes.yaml", []),
    },
    "fcos": {
        "FCOS, Focal Loss + GIoU + centre-ness": (
            "alrp_fcos_shapes.yaml",
            ["MODEL.META_ARCHITECTURE", "ConfigurableFCOS"],
        ),
        "FCOS, aLRP Loss + centre-ness": ("alrp_fcos_shapes.yaml", ["MODEL.FCOS.CENTERNESS", "bce"]),
        "FCOS, aLRP Loss, no centre-ness": ("alrp_fcos_shapes.yaml", ["MODEL.FCOS.CENTERNESS", "none"]),
    },
    "faster_rcnn": {
        "Faster R-CNN, RS Loss (RS R-CNN)": (RS_MASK_RCNN, WITHOUT_MASKS),
        "Faster R-CNN, aLRP Loss (SB)": (RS_MASK_RCNN, WITHOUT_MASKS + ALRP_LOSSES),
        "Faster R-CNN, detectron2 (CE + smooth L1, sampling)": (RS_MASK_RCNN, WITHOUT_MASKS + DETECTRON2_LOSSES),
    },
    "mask_rcnn": {
        "Mask R-CNN, RS Loss (RS Mask R-CNN)": (RS_MASK_RCNN, []),
        "Mask R-CNN, aLRP Loss (SB) + BCE masks": (RS_MASK_RCNN, ALRP_LOSSES),
        "Mask R-CNN, detectron2 (CE + smooth L1 + BCE masks, sampling)": (RS_MASK_RCNN, DETECTRON2_LOSSES),
    },
}
METRICS = ("AP", "AP50", "AP75", "AP90", "oLRP", "rho")  # oLRP: lower is better
MASK_METRICS = ("AP", "AP50", "AP75", "oLRP", "rho")


def schedule_options(iters: int) -> List[str]:
    """Config options of a shortened quickstart schedule: ``iters`` iterations, lr steps at 3/4
    and 11/12 of them, one checkpoint at the end."""
    steps = f"({int(iters * 0.75)}, {int(iters * 11 / 12)})"
    return ["SOLVER.MAX_ITER", str(iters), "SOLVER.STEPS", steps, "SOLVER.CHECKPOINT_PERIOD", str(iters)]


def train_and_evaluate(
    config: str, opts: List[str], output_dir: str, iters: int, eval_only: bool = False
) -> Dict[str, float]:
    """Trains one variant into output_dir and evaluates it on shapes_val; with ``eval_only``,
    evaluates the model_final.pth already there (e.g. with other inference settings in ``opts``).
    Returns the box metrics, and the mask ones as ``segm/<metric>`` for a mask detector, and the
    median training time per iteration (``s/it``) and the minutes of the whole run, evaluation included."""
    args = default_argument_parser().parse_args(
        [
            "--config-file",
            os.path.join(QUICKSTART, config),
            "OUTPUT_DIR",
            output_dir,
            *schedule_options(iters),
            *opts,
        ]
    )
    cfg = setup_cfg(args.config_file, args.opts)
    train_net.prepare_datasets(cfg, args)
    os.makedirs(output_dir, exist_ok=True)
    seed_all_rng(cfg.SEED)  # what train_net's default_setup does: the same seed for every variant
    tasks = {"bbox": METRICS, **({"segm": MASK_METRICS} if cfg.MODEL.MASK_ON else {})}
    if eval_only:
        model = AlrpTrainer.build_model(cfg)
        AlrpCheckpointer(model).load(os.path.join(output_dir, "model_final.pth"))
        results = AlrpTrainer.test(cfg, model)
        return {metric_key(task, m): results[task][m] for task, metrics in tasks.items() for m in metrics}
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    start = time.perf_counter()
    trainer.train()  # ends with the evaluation, whose results the EvalHook puts in the storage
    latest = trainer.storage.latest()
    result = {metric_key(task, m): latest[f"{task}/{m}"][0] for task, metrics in tasks.items() for m in metrics}
    result["s/it"] = trainer.storage.history("time").median(iters)
    result["minutes"] = (time.perf_counter() - start) / 60
    return result


@contextlib.contextmanager
def held(lock: Optional[str]) -> Iterator[None]:
    """An exclusive ``flock`` on the file ``lock`` for the block (nothing when None)."""
    if lock is None:
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def metric_key(task: str, metric: str) -> str:
    """``AP`` for the boxes, ``segm/AP`` for the masks."""
    return metric if task == "bbox" else f"{task}/{metric}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=1200, help="training iterations of every model")
    parser.add_argument("--output", default=os.path.join(ROOT, "output", "shapes_ablation"))
    parser.add_argument("--detectors", nargs="+", default=["retinanet"], choices=list(VARIANTS))
    parser.add_argument("--eval-only", action="store_true", help="evaluate the models of an earlier run")
    parser.add_argument("--opts", nargs="*", default=[], help="KEY VALUE overrides for every variant")
    parser.add_argument("--lock", help="a file to flock during each training (so that runs on a shared CPU take turns)")
    args = parser.parse_args()
    setup_logger()
    results = {}
    for detector in args.detectors:
        for index, (name, (config, opts)) in enumerate(VARIANTS[detector].items()):
            output_dir = os.path.join(args.output, f"{detector}_variant{index}")
            with held(args.lock):
                results[name] = train_and_evaluate(config, opts + args.opts, output_dir, args.iters, args.eval_only)
            suffix = "_eval" if args.eval_only else ""
            with open(os.path.join(args.output, f"{detector}_{index}{suffix}.json"), "w") as f:
                json.dump({"variant": name, "iters": args.iters, "opts": args.opts, **results[name]}, f)
    print(f"\nshapes_val after {args.iters} iterations (batch 8, 128 px, ResNet-18-FPN from scratch)")
    columns = [*METRICS, *(f"segm/{m}" for m in MASK_METRICS), "s/it", "minutes"]
    columns = [c for c in columns if any(c in result for result in results.values())]
    print("| loss | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, result in results.items():
        cells = [format_metric(c, result[c]) if c in result else "-" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |")


def format_metric(column: str, value: float) -> str:
    """Two decimals for rho and the timings, one for the percentages."""
    return f"{value:.2f}" if column.endswith("rho") or column in ("s/it", "minutes") else f"{value:.1f}"


if __name__ == "__main__":
    main()
