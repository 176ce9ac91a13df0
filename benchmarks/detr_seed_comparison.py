"""The DETRs' own classification loss against Rank & Sort Loss and aLRP Loss on the synthetic shapes dataset, over
seeds: each model x loss x seed trained by ``train_net.py`` from its quickstart LazyConfig and evaluated on shapes_val
(300 images); prints a Markdown table of COCO AP and oLRP, mean and standard deviation over the seeds, with the
date, the machine, its load and the command.

The models: RT-DETR v2 (``configs/quickstart/rtdetr_shapes.py``) and D-FINE of the same sizes
(``configs/quickstart/dfine_shapes.py``). The losses: the model's own (``model.loss=null``: the varifocal loss of
both), and Rank & Sort Loss (delta 0.5) and aLRP Loss (delta 1, tau 0) with ``box_terms="model"``: only the
classification term of every set differs, the box terms (L1, GIoU; D-FINE's FGL and DDF) are the model's own.

The schedule is the quickstarts' shortened to ``--iters`` iterations with the same proportions: a warm-up of an
eighth of them, the learning rate divided by 10 at four fifths. One training at a time. Each run's metrics are
appended to ``<output>/results.jsonl`` as it ends; a run already there is not trained again (an interrupted grid
continues where it stopped, and a finished one prints its table).

    OMP_NUM_THREADS=1 python benchmarks/detr_seed_comparison.py --iters 150 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"rtdetr": ("RT-DETR v2", "rtdetr_shapes.py"), "dfine": ("D-FINE", "dfine_shapes.py")}
ALRP = ["model.loss.criterion._target_=alrp_d2.criteria.AlrpCriterion", "model.loss.criterion.delta=1.0"]
LOSSES: Dict[str, Tuple[str, List[str]]] = {
    "own": ("the model's own (varifocal)", ["model.loss=null"]),
    "rank_sort": ("Rank & Sort Loss", ["model.loss.box_terms=model"]),
    "alrp": ("aLRP Loss", [*ALRP, "model.loss.criterion.tau=0.0", "model.loss.box_terms=model"]),
}
METRICS = ("AP", "AP50", "AP75", "oLRP")  # oLRP: lower is better


def schedule_overrides(iters: int) -> List[str]:
    """The quickstart schedule (400 iterations, warm-up 50, step at 320) shortened to ``iters`` iterations."""
    return [
        f"train.max_iter={iters}",
        f"train.checkpointer.period={iters}",
        f"lr_multiplier.warmup_iters={max(1, iters // 8)}",
        f"lr_multiplier.steps=[{iters * 4 // 5}]",
    ]


def run(model: str, loss: str, seed: int, iters: int, output: Path) -> Dict[str, float]:
    """Trains and evaluates one model x loss x seed with train_net.py; its shapes_val metrics and seconds per
    iteration (the median of metrics.json's ``time``)."""
    output_dir = output / f"{model}_{loss}_seed{seed}"
    command = [sys.executable, str(ROOT / "train_net.py"), "--config-file", f"configs/quickstart/{MODELS[model][1]}"]
    command += [f"train.seed={seed}", f"train.output_dir={output_dir}", *schedule_overrides(iters), *LOSSES[loss][1]]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (output_dir / "metrics.json").read_text().splitlines()]
    final = records[-1]
    missing = [m for m in METRICS if f"bbox/{m}" not in final]
    if missing:
        raise RuntimeError(f"{output_dir}/metrics.json: the last record has no bbox/{missing[0]}")
    times = [r["time"] for r in records if "time" in r]
    return {**{m: float(final[f"bbox/{m}"]) for m in METRICS}, "s/it": statistics.median(times)}


def read_results(path: Path) -> Dict[Tuple[str, str, int], Dict[str, float]]:
    """The runs of ``results.jsonl`` by (model, loss, seed)."""
    if not path.exists():
        return {}
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(e["model"], e["loss"], e["seed"]): e for e in entries}


def mean_sd(values: Sequence[float]) -> str:
    """``mean ± sample standard deviation`` (the mean alone for one value)."""
    mean = statistics.fmean(values)
    return f"{mean:.2f}" if len(values) < 2 else f"{mean:.2f} ± {statistics.stdev(values):.2f}"


def table(results: Dict[Tuple[str, str, int], Dict[str, float]], models: Sequence[str]) -> List[str]:
    """The Markdown rows: per model and loss, the number of seeds and each metric's mean ± standard deviation."""
    lines = ["| model | classification loss | seeds | " + " | ".join(METRICS) + " | s/it |"]
    lines.append("|---|---|---|" + "---|" * (len(METRICS) + 1))
    for model in models:
        for loss, (name, _) in LOSSES.items():
            runs = [results[key] for key in sorted(results) if key[:2] == (model, loss)]
            if runs:
                cells = [mean_sd([r[metric] for r in runs]) for metric in (*METRICS, "s/it")]
                lines.append(f"| {MODELS[model][0]} | {name} | {len(runs)} | " + " | ".join(cells) + " |")
    return lines


def machine() -> str:
    """The CPU's model name and the number of cores this process may use."""
    names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    return f"{names[0] if names else 'unknown CPU'}, {len(os.sched_getaffinity(0))} cores"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=150, help="training iterations of every run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="train.seed of the runs")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--output", type=Path, default=ROOT / "output" / "detr_seed_comparison")
    args = parser.parse_args(argv)
    if args.iters < 8:
        parser.error(f"--iters {args.iters}: at least 8 (a warm-up of an eighth of them)")
    command = shlex.join(["python", "benchmarks/detr_seed_comparison.py", *(sys.argv[1:] if argv is None else argv)])
    args.output.mkdir(parents=True, exist_ok=True)
    results_file = args.output / "results.jsonl"
    results = read_results(results_file)
    if any(r.get("iters") != args.iters for r in results.values()):
        raise SystemExit(f"{results_file} holds runs of another --iters: give another --output")
    for seed in args.seeds:  # seed by seed: an unfinished grid has every row
        for model in args.models:
            for loss in LOSSES:
                if (model, loss, seed) in results:
                    continue
                metrics = run(model, loss, seed, args.iters, args.output)
                entry = {"model": model, "loss": loss, "seed": seed, "iters": args.iters, **metrics, "load": load()}
                with open(results_file, "a") as f:
                    f.write(json.dumps(entry) + "\n")
                results[(model, loss, seed)] = entry
                print(json.dumps(entry), flush=True)
    kept = {key: r for key, r in results.items() if key[0] in args.models and key[2] in args.seeds}
    loads = [float(r["load"].split()[0]) for r in kept.values()]
    loads_text = f"{min(loads):.1f} to {max(loads):.1f}" if loads else load().split()[0]
    print(f"\n{datetime.date.today().isoformat()}, {machine()}, 1-minute load average {loads_text} at the runs' ends")
    print(f"{command}\n{args.iters} iterations of batch 8 per run (the quickstart schedule shortened), shapes_val:\n")
    print("\n".join(table(kept, args.models)))


if __name__ == "__main__":
    main()
