"""aLRP Loss against focal loss and AP Loss on the synthetic shapes dataset, side by side.

Trains the quickstart aLRP RetinaNet (``configs/quickstart/alrp_retinanet_shapes.yaml``) and the
same network, anchors, data and schedule with

* detectron2's focal-loss ``RetinaNet`` (focal loss + smooth L1 with its default box weights), and
* AP Loss with a GIoU localisation loss (``MODEL.ALRP.CLS_LOSS ap``, constant weight 1),

then prints COCO AP, AP50, AP75, AP90 and oLRP of each on ``shapes_val``. The paper's claim
(Table 2) is that aLRP Loss gains most at high IoUs (AP75, AP90).

``--detectors foveabox fcos`` does the same for the anchor-free detectors (paper Sec. 5.4), each with
its quickstart config (``alrp_foveabox_shapes.yaml``, ``alrp_fcos_shapes.yaml``: same backbone, data,
schedule, seed and learning rate as the RetinaNet one):

* FoveaBox with its own focal loss + Smooth L1 (``FoveaBox``) against aLRP Loss (``AlrpFoveaBox``);
* detectron2's FCOS (focal loss + GIoU + centre-ness, ``ConfigurableFCOS``) against aLRP FCOS with
  and without the centre-ness branch (``MODEL.FCOS.CENTERNESS bce / none``).

Each result is also written to ``<output>/<detector>_<index>.json``.

    python benchmarks/shapes_ablation.py                  # ~25 minutes on 2 CPU cores
    python benchmarks/shapes_ablation.py --iters 300      # quicker, less trained
    python benchmarks/shapes_ablation.py --detectors foveabox fcos --output DIR
    python benchmarks/shapes_ablation.py --detectors fcos --output DIR --eval-only \
        --opts MODEL.FCOS.SCORE_THRESH_TEST 0.0     # re-evaluate DIR's models, other inference
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Tuple

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
# detector -> variant name -> (quickstart config, overrides)
VARIANTS: Dict[str, Dict[str, Tuple[str, List[str]]]] = {
    "retinanet": {
        "aLRP Loss (GIoU, SB)": ("alrp_retinanet_shapes.yaml", []),
        "Focal Loss + Smooth L1": (
            "alrp_retinanet_shapes.yaml",
            ["MODEL.META_ARCHITECTURE", "RetinaNet", "MODEL.RETINANET.BBOX_REG_WEIGHTS", "(1.0, 1.0, 1.0, 1.0)"],
        ),
        "AP Loss + GIoU": (
            "alrp_retinanet_shapes.yaml",
            ["MODEL.ALRP.CLS_LOSS", "ap", "MODEL.ALRP.SB_ENABLED", "False"],
        ),
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
}
METRICS = ("AP", "AP50", "AP75", "AP90", "oLRP", "rho")  # oLRP: lower is better


def schedule_options(iters: int) -> List[str]:
    """Config options of a shortened quickstart schedule: ``iters`` iterations, lr steps at 3/4
    and 11/12 of them, one checkpoint at the end."""
    steps = f"({int(iters * 0.75)}, {int(iters * 11 / 12)})"
    return ["SOLVER.MAX_ITER", str(iters), "SOLVER.STEPS", steps, "SOLVER.CHECKPOINT_PERIOD", str(iters)]


def train_and_evaluate(
    config: str, opts: List[str], output_dir: str, iters: int, eval_only: bool = False
) -> Dict[str, float]:
    """Trains one variant into output_dir and evaluates it on shapes_val; with ``eval_only``,
    evaluates the model_final.pth already there (e.g. with other inference settings in ``opts``)."""
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
    if eval_only:
        model = AlrpTrainer.build_model(cfg)
        AlrpCheckpointer(model).load(os.path.join(output_dir, "model_final.pth"))
        results = AlrpTrainer.test(cfg, model)["bbox"]
        return {metric: results[metric] for metric in METRICS}
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()  # ends with the evaluation, whose results the EvalHook puts in the storage
    latest = trainer.storage.latest()
    return {metric: latest[f"bbox/{metric}"][0] for metric in METRICS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=1200, help="training iterations of every model")
    parser.add_argument("--output", default=os.path.join(ROOT, "output", "shapes_ablation"))
    parser.add_argument("--detectors", nargs="+", default=["retinanet"], choices=list(VARIANTS))
    parser.add_argument("--eval-only", action="store_true", help="evaluate the models of an earlier run")
    parser.add_argument("--opts", nargs="*", default=[], help="KEY VALUE overrides for every variant")
    args = parser.parse_args()
    setup_logger()
    results = {}
    for detector in args.detectors:
        for index, (name, (config, opts)) in enumerate(VARIANTS[detector].items()):
            output_dir = os.path.join(args.output, f"{detector}_variant{index}")
            results[name] = train_and_evaluate(config, opts + args.opts, output_dir, args.iters, args.eval_only)
            suffix = "_eval" if args.eval_only else ""
            with open(os.path.join(args.output, f"{detector}_{index}{suffix}.json"), "w") as f:
                json.dump({"variant": name, "iters": args.iters, "opts": args.opts, **results[name]}, f)
    print(f"\nshapes_val after {args.iters} iterations (batch 8, 128 px, ResNet-18-FPN from scratch)")
    print("| loss | " + " | ".join(METRICS) + " |")
    print("|---|" + "---|" * len(METRICS))
    for name, result in results.items():
        print(
            f"| {name} | "
            + " | ".join(f"{result[m]:.2f}" if m == "rho" else f"{result[m]:.1f}" for m in METRICS)
            + " |"
        )


if __name__ == "__main__":
    main()
