"""aLRP Loss against focal loss and AP Loss on the synthetic shapes dataset, side by side.

Trains the quickstart aLRP RetinaNet (``configs/quickstart/alrp_retinanet_shapes.yaml``) and the
same network, anchors, data and schedule with

* detectron2's focal-loss ``RetinaNet`` (focal loss + smooth L1 with its default box weights), and
* AP Loss with a GIoU localisation loss (``MODEL.ALRP.CLS_LOSS ap``, constant weight 1),

then prints COCO AP, AP50, AP75, AP90 and oLRP of each on ``shapes_val``. The paper's claim
(Table 2) is that aLRP Loss gains most at high IoUs (AP75, AP90).

    python benchmarks/shapes_ablation.py                  # ~25 minutes on 2 CPU cores
    python benchmarks/shapes_ablation.py --iters 300      # quicker, less trained
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from detectron2.engine import default_argument_parser  # noqa: E402
from detectron2.utils.logger import setup_logger  # noqa: E402

import train_net  # noqa: E402
from alrp_d2.config import setup_cfg  # noqa: E402
from alrp_d2.engine import AlrpTrainer  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "quickstart", "alrp_retinanet_shapes.yaml")
VARIANTS: Dict[str, List[str]] = {
    "aLRP Loss (GIoU, SB)": [],
    "Focal Loss + Smooth L1": [
        "MODEL.META_ARCHITECTURE",
        "RetinaNet",
        "MODEL.RETINANET.BBOX_REG_WEIGHTS",
        "(1.0, 1.0, 1.0, 1.0)",
    ],
    "AP Loss + GIoU": ["MODEL.ALRP.CLS_LOSS", "ap", "MODEL.ALRP.SB_ENABLED", "False"],
}
METRICS = ("AP", "AP50", "AP75", "AP90", "oLRP", "rho")  # oLRP: lower is better


def train_and_evaluate(opts: List[str], output_dir: str, iters: int) -> Dict[str, float]:
    steps = f"({int(iters * 0.75)}, {int(iters * 11 / 12)})"
    args = default_argument_parser().parse_args(
        [
            "--config-file",
            CONFIG,
            "OUTPUT_DIR",
            output_dir,
            "SOLVER.MAX_ITER",
            str(iters),
            "SOLVER.STEPS",
            steps,
            "SOLVER.CHECKPOINT_PERIOD",
            str(iters),
            *opts,
        ]
    )
    cfg = setup_cfg(args.config_file, args.opts)
    train_net.prepare_datasets(cfg)
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()  # ends with the evaluation, whose results the EvalHook puts in the storage
    latest = trainer.storage.latest()
    return {metric: latest[f"bbox/{metric}"][0] for metric in METRICS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=1200, help="training iterations of every model")
    parser.add_argument("--output", default=os.path.join(ROOT, "output", "shapes_ablation"))
    args = parser.parse_args()
    setup_logger()
    results = {
        name: train_and_evaluate(opts, os.path.join(args.output, f"variant{index}"), args.iters)
        for index, (name, opts) in enumerate(VARIANTS.items())
    }
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
