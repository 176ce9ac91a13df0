"""One timing per quickstart, measured the same way for all: each quickstart of configs/quickstart, YAML or
LazyConfig, trained by train_net.py for ``--iters`` iterations (no learning-rate step, one checkpoint at the end), then
evaluated once on all of shapes_val (300 images), on this machine. Prints a Markdown table with the date, the machine
(CPU, cores, load average before and after) and per config: seconds per training iteration (median of metrics.json's
``time`` after the first 5 iterations), the evaluation of shapes_val (detectron2's "Total inference time") and the
whole quickstart estimated from them (the config's own SOLVER.MAX_ITER or train.max_iter iterations plus the
evaluation). A smoke run: ``--iters 7`` (two timed iterations per config).

    OMP_NUM_THREADS=1 python benchmarks/quickstart_times.py [--iters 25] [--configs alrp_retinanet_shapes.yaml ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alrp_d2.engine.lazy_run import is_lazy_config, load_lazy_config  # noqa: E402

QUICKSTARTS = (
    "alrp_retinanet_shapes.yaml",
    "alrp_faster_rcnn_shapes.yaml",
    "alrp_foveabox_shapes.yaml",
    "alrp_fcos_shapes.yaml",
    "rs_mask_rcnn_shapes.yaml",
    "alrp_retinanet_shapes.py",
    "rs_mask_rcnn_switch_shapes.py",
    "rtdetr_shapes.py",
    "deformable_detr_shapes.py",
    "dfine_shapes.py",
)
WARMUP_ITERS = 5
INFERENCE_TIME = re.compile(r"Total inference time: (\d+):(\d+):(\d+(?:\.\d+)?)")


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def configured_max_iter(config: Path) -> int:
    """The iterations of the whole quickstart: a LazyConfig's train.max_iter, a YAML config's SOLVER.MAX_ITER."""
    if is_lazy_config(str(config)):
        return int(load_lazy_config(str(config)).train.max_iter)
    with open(config) as f:
        return int(yaml.safe_load(f)["SOLVER"]["MAX_ITER"])


def training_command(config: Path, iters: int, output_dir: Path) -> List[str]:
    """train_net.py on ``config`` for ``iters`` iterations, logged every iteration, one checkpoint and one evaluation
    of every test image at the end: YAML keys and values, or a LazyConfig's ``key=value`` overrides (a LazyConfig's
    learning-rate steps after train.max_iter are left out)."""
    command = [sys.executable, str(ROOT / "train_net.py"), "--config-file", str(config)]
    if is_lazy_config(str(config)):
        command += [f"train.max_iter={iters}", f"train.checkpointer.period={iters}", "train.log_period=1"]
        return command + ["train.eval_period=0", "train.eval_max_images=0", f"train.output_dir={output_dir}"]
    command += ["SOLVER.MAX_ITER", str(iters), "SOLVER.STEPS", "()", "SOLVER.CHECKPOINT_PERIOD", str(iters)]
    command += ["TEST.EVAL_PERIOD", "0", "TEST.MAX_IMAGES", "0"]
    return command + ["SOLVER.LOG_PERIOD", "1", "OUTPUT_DIR", str(output_dir)]


def measure(config: Path, iters: int, output_dir: Path) -> Dict[str, float]:
    """Trains ``iters`` iterations (no learning-rate step, one checkpoint at the end), evaluates, and returns the
    median iteration time, the evaluation time and the estimate of the whole quickstart, in seconds."""
    command = training_command(config, iters, output_dir)
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{config.name}: train_net.py failed\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (output_dir / "metrics.json").read_text().splitlines()]
    times = [r["time"] for r in records if "time" in r and r["iteration"] >= WARMUP_ITERS]
    match = INFERENCE_TIME.search(result.stdout + result.stderr)
    if not times or match is None:
        raise RuntimeError(f"{config.name}: no iteration times or no inference time in the run's output")
    hours, minutes, seconds = match.groups()
    evaluation = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    iteration = statistics.median(times)
    return {
        "iteration": iteration,
        "evaluation": evaluation,
        "total": configured_max_iter(config) * iteration + evaluation,
    }


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=25, help=f"training iterations per config (> {WARMUP_ITERS})")
    parser.add_argument("--configs", nargs="+", default=list(QUICKSTARTS), help="configs of configs/quickstart")
    args = parser.parse_args(argv)
    if args.iters <= WARMUP_ITERS:
        parser.error(f"--iters must be > {WARMUP_ITERS}, the iterations left out of the median")
    missing = [name for name in args.configs if not (ROOT / "configs" / "quickstart" / name).is_file()]
    if missing:
        parser.error(f"not in configs/quickstart: {', '.join(missing)}")
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.configs:
            config = ROOT / "configs" / "quickstart" / name
            times = measure(config, args.iters, Path(scratch) / name.replace(".", "_"))
            rows.append(
                f"| `{name}` | {configured_max_iter(config):,} | {times['iteration']:.2f} | "
                f"{times['evaluation']:.0f} | {times['total'] / 60:.1f} |"
            )
            print(rows[-1], flush=True)
    load_after = os.getloadavg()[0]
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    chosen = "" if args.configs == list(QUICKSTARTS) else " --configs " + " ".join(args.configs)
    command = f"python benchmarks/quickstart_times.py --iters {args.iters}{chosen}"
    print(
        f"\n`{command}`, {datetime.date.today()}, {cpu_name()}, "
        f"{os.cpu_count()} cores, OMP_NUM_THREADS={threads}, load average {load_before:.1f} before and "
        f"{load_after:.1f} after\n"
    )
    print("| config | iterations | s / iteration | evaluation of shapes_val, s | whole run (estimate), min |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
