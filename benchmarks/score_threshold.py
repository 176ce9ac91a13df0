"""What the test-time score threshold costs: AP, oLRP, detections and inference time of one trained
model at several ``SCORE_THRESH_TEST`` values.

Ranking losses fix the order of the scores, not their level: an aLRP model's true positives may score
below detectron2's default threshold of 0.05. This script evaluates one checkpoint on a validation set
at each threshold (``MODEL.RETINANET.SCORE_THRESH_TEST`` and ``MODEL.ROI_HEADS.SCORE_THRESH_TEST``)
and prints COCO AP, AP50, AP75, AP90, oLRP, detections per image, the model's median time per image
(network + post-processing, over ``--passes`` passes) and the evaluation time; every metric of the
evaluator goes to ``<output>/score_threshold.json``.

    python benchmarks/score_threshold.py --weights output/quickstart_retinanet/model_final.pth
    python benchmarks/score_threshold.py --one-class ring --iters 600   # trains a one-class model first

``--one-class NAME`` registers ``shapes_NAME_train`` / ``shapes_NAME_val``: the shapes images with
only the annotations of class NAME (the other shapes stay in the images as unlabelled distractors),
and without ``--weights`` trains the quickstart model on it for ``--iters`` iterations.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from functools import partial
from typing import Any, Dict, List, Sequence

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from detectron2.config import CfgNode  # noqa: E402
from detectron2.data import DatasetCatalog, MetadataCatalog  # noqa: E402
from detectron2.evaluation import inference_on_dataset  # noqa: E402
from detectron2.utils.logger import setup_logger  # noqa: E402

from alrp_d2.checkpoint import AlrpCheckpointer  # noqa: E402
from alrp_d2.config import setup_cfg  # noqa: E402
from alrp_d2.data import SHAPES_DATASETS, register_shapes_datasets  # noqa: E402
from alrp_d2.engine import AlrpTrainer  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "quickstart", "alrp_retinanet_shapes.yaml")
METRICS = ("AP", "AP50", "AP75", "AP90", "oLRP")  # oLRP: lower is better
WARMUP_IMAGES = 5


class TimedModel(torch.nn.Module):
    """The model, recording the time of each call (one image each: detectron2's test loader) and
    counting detections."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.seconds: List[float] = []
        self.detections = 0

    def forward(self, inputs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        start = time.perf_counter()
        outputs = self.model(inputs)
        self.seconds.append(time.perf_counter() - start)
        self.detections += sum(len(output["instances"]) for output in outputs)
        return outputs


def register_one_class(class_name: str) -> List[str]:
    """Registers ``shapes_<class_name>_{train,val}`` (annotations of one shapes class, renumbered 0)."""
    register_shapes_datasets()
    class_id = MetadataCatalog.get("shapes_train").thing_classes.index(class_name)
    names = []
    for source in SHAPES_DATASETS:
        name = source.replace("shapes", f"shapes_{class_name}", 1)
        if name not in DatasetCatalog:
            DatasetCatalog.register(name, partial(one_class_dicts, source, class_id))
            MetadataCatalog.get(name).set(thing_classes=[class_name], evaluator_type="coco")
        names.append(name)
    return names


def one_class_dicts(source: str, class_id: int) -> List[Dict[str, Any]]:
    """The records of dataset ``source`` with only the annotations of ``class_id``, as class 0."""
    records = copy.deepcopy(DatasetCatalog.get(source))
    for record in records:
        kept = [a for a in record.get("annotations", []) if a["category_id"] == class_id]
        record["annotations"] = [dict(a, category_id=0) for a in kept]
    return records


def base_cfg(args: argparse.Namespace) -> CfgNode:
    opts = ["OUTPUT_DIR", args.output]
    if args.one_class:
        train, val = register_one_class(args.one_class)
        opts += ["DATASETS.TRAIN", f"('{train}',)", "DATASETS.TEST", f"('{val}',)", "MODEL.RETINANET.NUM_CLASSES", "1"]
    else:
        register_shapes_datasets()
    return setup_cfg(args.config_file, opts)


def train(cfg: CfgNode, iters: int) -> str:
    """Trains with the config's schedule shortened to ``iters``; returns the final checkpoint."""
    cfg = cfg.clone()
    cfg.SOLVER.MAX_ITER = iters
    cfg.SOLVER.STEPS = (int(iters * 0.75), int(iters * 11 / 12))
    cfg.SOLVER.CHECKPOINT_PERIOD = iters
    os.makedirs(cfg.OUTPUT_DIR, exist_ok=True)
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()
    return os.path.join(cfg.OUTPUT_DIR, "model_final.pth")


def measure(cfg: CfgNode, weights: str, threshold: float, passes: int) -> Dict[str, float]:
    """Metrics of the first pass over the test set; the model time per image is the median over
    ``passes`` passes (the first ``WARMUP_IMAGES`` calls excluded), robust to other load on the CPU."""
    cfg = cfg.clone()
    cfg.MODEL.RETINANET.SCORE_THRESH_TEST = threshold
    cfg.MODEL.ROI_HEADS.SCORE_THRESH_TEST = threshold
    model = AlrpTrainer.build_model(cfg)
    AlrpCheckpointer(model).load(weights)
    dataset = cfg.DATASETS.TEST[0]
    timed = TimedModel(model)
    loader = AlrpTrainer.build_test_loader(cfg, dataset)
    evaluator = AlrpTrainer.build_evaluator(cfg, dataset, os.path.join(cfg.OUTPUT_DIR, f"inference_{threshold:g}"))
    start = time.perf_counter()
    row = dict(inference_on_dataset(timed, loader, evaluator)["bbox"])
    row["data+eval s"] = time.perf_counter() - start - sum(timed.seconds)
    row["dets/img"] = timed.detections / len(timed.seconds)
    for _ in range(passes - 1):
        inference_on_dataset(timed, loader, None)
    row["model ms/img"] = 1000 * statistics.median(timed.seconds[WARMUP_IMAGES:])
    return row


def print_table(rows: Dict[float, Dict[str, float]], columns: Sequence[str]) -> None:
    print("| SCORE_THRESH_TEST | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for threshold, row in rows.items():
        print(f"| {threshold:g} | " + " | ".join(f"{row[c]:.1f}" for c in columns) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-file", default=CONFIG)
    parser.add_argument("--weights", help="checkpoint to evaluate (default: train one, see --iters)")
    parser.add_argument("--one-class", metavar="NAME", help="a shapes class: evaluate on its one-class derivative")
    parser.add_argument("--iters", type=int, default=600, help="training iterations when --weights is not given")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.0, 0.01, 0.05])
    parser.add_argument("--passes", type=int, default=3, help="passes over the test set for the model time")
    parser.add_argument("--output", default=os.path.join(ROOT, "output", "score_threshold"))
    args = parser.parse_args()
    setup_logger()
    cfg = base_cfg(args)
    weights = args.weights or train(cfg, args.iters)
    rows = {threshold: measure(cfg, weights, threshold, args.passes) for threshold in args.thresholds}
    with open(os.path.join(cfg.OUTPUT_DIR, "score_threshold.json"), "w") as f:
        json.dump({"weights": weights, "dataset": cfg.DATASETS.TEST[0], "results": rows}, f, indent=2)
    print(f"\n{weights} on {cfg.DATASETS.TEST[0]}")
    print_table(rows, (*METRICS, "dets/img", "model ms/img", "data+eval s"))


if __name__ == "__main__":
    main()
