"""Global against per-worker ranking on the shapes quickstart: loss curves, final AP, time
per iteration and the bytes the global ranking exchanges.

Three runs of the quickstart aLRP RetinaNet (``configs/quickstart/alrp_retinanet_shapes.yaml``) with
the same seed, data order and global batch of 8 images:

* 1 worker x 8 images (the reference: one ranking of the whole batch);
* 2 CPU workers (gloo) x 4 images, ``MODEL.ALRP.RANKING per_worker`` (two rankings of 4 images);
* 2 CPU workers (gloo) x 4 images, ``MODEL.ALRP.RANKING global`` (one ranking of the 8 images).

So that only the ranking differs, the backbone uses GroupNorm instead of the quickstart's BatchNorm
(whose statistics depend on the per-worker batch) and random flips are off (detectron2 seeds the
augmentation per worker). Each 2-worker process uses one thread, the single worker two.

In the global run every collective of ``alrp_d2.losses.global_ranking`` is counted (the bytes of the
tensors each worker contributes), and compared with the payload of DDP's gradient all-reduce
(trainable parameters x 4 bytes) of this model and of R50-FPN RetinaNet (``configs/alrp_R50_500.yaml``).

    flock /tmp/alrp_cpu.lock python benchmarks/global_ranking.py --iters 400   # ~15 minutes on 2 cores

Writes ``<output>/results.json`` and the figure ``--figure`` (default
``docs/figures/global_ranking.png``), and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
from detectron2.engine import default_setup, launch  # noqa: E402
from detectron2.modeling import build_model  # noqa: E402
from detectron2.utils import comm  # noqa: E402

import train_net  # noqa: E402
from alrp_d2.config import setup_cfg  # noqa: E402
from alrp_d2.engine import AlrpTrainer  # noqa: E402
from alrp_d2.losses import global_ranking  # noqa: E402
from benchmarks.shapes_ablation import schedule_options  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "quickstart", "alrp_retinanet_shapes.yaml")
R50_CONFIG = os.path.join(ROOT, "configs", "alrp_R50_500.yaml")
# name -> (workers, ranking)
RUNS = {
    "1 worker x 8": (1, "per_worker"),
    "2 workers x 4, per-worker": (2, "per_worker"),
    "2 workers x 4, global": (2, "global"),
}
METRICS = ("AP", "AP50", "AP75", "oLRP")
# Iterations left out of the time per iteration (start-up); the time is the median of the logged
# per-iteration times, robust to other processes on a shared machine.
SKIP_ITERS = 40


class CountingDist:
    """``torch.distributed`` whose collectives count the bytes of the tensor this worker gives."""

    def __init__(self, real):
        self._real = real
        self.bytes = 0
        self.calls = 0

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def all_gather(self, tensor_list, tensor, *args, **kwargs):
        self.bytes += tensor.numel() * tensor.element_size()
        self.calls += 1
        return self._real.all_gather(tensor_list, tensor, *args, **kwargs)

    def all_reduce(self, tensor, *args, **kwargs):
        self.bytes += tensor.numel() * tensor.element_size()
        self.calls += 1
        return self._real.all_reduce(tensor, *args, **kwargs)


def trainable_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def run_options(output_dir: str, iters: int, ranking: str) -> List[str]:
    return [
        "--config-file",
        CONFIG,
        "OUTPUT_DIR",
        output_dir,
        "MODEL.ALRP.RANKING",
        ranking,
        "MODEL.RESNETS.NORM",
        "GN",
        "INPUT.RANDOM_FLIP",
        "none",
        "DATALOADER.NUM_WORKERS",
        "0",
        *schedule_options(iters),
        "SOLVER.LOG_PERIOD",
        "10",
    ]


def train_worker(options: List[str], threads: int) -> None:
    """One training process: trains, evaluates and (main process) writes ``summary.json``."""
    torch.set_num_threads(threads)
    counter = CountingDist(global_ranking.dist)
    global_ranking.dist = counter
    args = train_net.get_parser().parse_args(options)
    cfg = setup_cfg(args.config_file, args.opts)
    cfg.freeze()
    default_setup(cfg, args)
    train_net.prepare_datasets(cfg, args)
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()  # ends with the evaluation, whose results the EvalHook puts in the storage
    steps = cfg.SOLVER.MAX_ITER
    if comm.is_main_process():
        latest = trainer.storage.latest()
        summary = {metric: latest[f"bbox/{metric}"][0] for metric in METRICS}
        summary.update(
            ranking_bytes_per_step=counter.bytes / steps,
            ranking_collectives_per_step=counter.calls / steps,
            trainable_parameters=trainable_parameters(trainer.model),
        )
        with open(os.path.join(cfg.OUTPUT_DIR, "summary.json"), "w") as f:
            json.dump(summary, f)


def read_metrics(output_dir: str) -> Dict[str, List]:
    """Per logged iteration: L_cls of aLRP Loss (Eq. 11; detectron2 averages it over the workers)
    and the time per iteration."""
    curves: Dict[str, List] = {"iteration": [], "loss": [], "time": []}
    with open(os.path.join(output_dir, "metrics.json")) as f:
        for line in f:
            record = json.loads(line)
            if "loss_retinanet_cls" in record:
                curves["iteration"].append(record["iteration"])
                curves["loss"].append(record["loss_retinanet_cls"])
                curves["time"].append(record.get("time"))
    return curves


def plot(curves: Dict[str, Dict[str, List]], summaries: Dict[str, Dict], path: str) -> None:
    """Left: L_cls of every run. Right: its distance to the 1-worker run (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=80)
    styles = {
        "1 worker x 8": ("k", "-"),
        "2 workers x 4, per-worker": ("tab:red", "--"),
        "2 workers x 4, global": ("tab:blue", ":"),
    }
    reference = dict(zip(curves["1 worker x 8"]["iteration"], curves["1 worker x 8"]["loss"]))
    for name, curve in curves.items():
        color, style = styles[name]
        label = f"{name}: AP {summaries[name]['AP']:.1f}"
        left.plot(curve["iteration"], curve["loss"], style, color=color, linewidth=1.4, label=label)
        if name != "1 worker x 8":
            pairs = [(i, abs(v - reference[i])) for i, v in zip(curve["iteration"], curve["loss"]) if i in reference]
            # A logged value equal to the reference's is drawn at 1e-9 (the axis floor).
            right.semilogy(
                [i for i, _ in pairs], [max(d, 1e-9) for _, d in pairs], style, color=color, linewidth=1.4, label=name
            )
    left.set_ylabel("L_cls of aLRP Loss (Eq. 11)")
    right.set_ylabel("|L_cls - L_cls(1 worker x 8)|")
    for ax in (left, right):
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.set_ylim(1e-9, 1)
    fig.suptitle("Shapes quickstart aLRP RetinaNet, global batch 8, GN backbone, same seed", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=400, help="training iterations of every run")
    parser.add_argument("--output", default=os.path.join(ROOT, "output", "global_ranking"))
    parser.add_argument("--figure", default=os.path.join(ROOT, "docs", "figures", "global_ranking.png"))
    args = parser.parse_args()
    train_net.prepare_datasets(setup_cfg(CONFIG), argparse.Namespace(dataset=None))

    summaries, curves = {}, {}
    for index, (name, (workers, ranking)) in enumerate(RUNS.items()):
        output_dir = os.path.join(args.output, f"run{index}")
        threads = 2 if workers == 1 else 1
        launch(train_worker, workers, dist_url="auto", args=(run_options(output_dir, args.iters, ranking), threads))
        with open(os.path.join(output_dir, "summary.json")) as f:
            summaries[name] = json.load(f)
        curves[name] = read_metrics(output_dir)
        start = min(SKIP_ITERS, args.iters // 2)
        times = [t for i, t in zip(curves[name]["iteration"], curves[name]["time"]) if i >= start and t]
        summaries[name]["seconds_per_iteration"] = statistics.median(times)

    r50 = setup_cfg(R50_CONFIG, ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", ""])
    r50_parameters = trainable_parameters(build_model(r50))
    results = {"iters": args.iters, "runs": summaries, "r50_fpn_retinanet_trainable_parameters": r50_parameters}
    with open(os.path.join(args.output, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plot(curves, summaries, args.figure)

    print(f"\nshapes_val after {args.iters} iterations (global batch 8, GN backbone, no flips)")
    print("| run | " + " | ".join(METRICS) + " | s / iteration | ranking-loss bytes / step / worker |")
    print("|---|" + "---|" * (len(METRICS) + 2))
    for name, summary in summaries.items():
        exchanged = summary["ranking_bytes_per_step"]
        print(
            f"| {name} | "
            + " | ".join(f"{summary[m]:.1f}" for m in METRICS)
            + f" | {summary['seconds_per_iteration']:.3f} | {exchanged:,.0f} |"
        )
    quickstart_parameters = summaries["2 workers x 4, global"]["trainable_parameters"]
    print(
        f"\nDDP gradient all-reduce payload per step: {4 * quickstart_parameters:,} bytes (this model), "
        f"{4 * r50_parameters:,} bytes (R50-FPN RetinaNet, {r50_parameters:,} trainable parameters)"
    )


if __name__ == "__main__":
    main()
