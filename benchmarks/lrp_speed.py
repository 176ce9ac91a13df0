"""LRP of alrp_d2.lrp against pycocotools' COCOeval (AP) and the official LRP-Error, on one COCO-val-sized case.

A synthetic case of 5,000 images (640 x 480), 36,000 objects (1 % crowds) of 80 classes (long-tailed), 100 detections
an image (jittered copies of the objects, mostly of the right class, and random boxes; continuous scores), rebuilt
from the seed in each of three processes, one a method, each timing only the evaluation of loaded ``COCO`` objects:

* ``ours``: ``alrp_d2.lrp.evaluate_coco`` (oLRP, components, per-class thresholds, rho, AP90);
* ``cocoeval``: pycocotools' ``COCOeval`` ``evaluate()`` + ``accumulate()`` (AP; the project's Python);
* ``official``: the official LRP-Error's ``COCOeval`` ``evaluate()`` + ``accumulate()`` (``--official-python``, an
  interpreter whose environment holds numpy, pycocotools and matplotlib from PyPI, and ``--official-repo``, a checkout
  of kemaloksuz/LRP-Error: the fork's ``coco.py`` and ``cocoeval.py`` are loaded over PyPI's compiled mask API, nothing
  is built; ``tools/lrp_reference.py``'s ``load_official``, tests/fixtures/lrp_official/README.md).

Each prints its time and its peak resident memory (and the memory before the evaluation); then the ratios and the
bounds (ours at most 1.2x COCOeval, at least 10x faster than the official) and the oLRP of ours and the official.
``--images`` shrinks the case (7.2 objects an image, as COCO val) to check the set-up in seconds; the bounds are for the
full case.

    python benchmarks/lrp_speed.py --official-python VENV/bin/python --official-repo LRP-Error

``--whole-process`` writes the case (``--detections`` an image) as COCO files and runs, as whole processes from those
files, interleaved over ``--rounds``: the command ``python -m alrp_d2.lrp GT DT --json`` (read, check, evaluate,
print), pycocotools (``COCO``, ``loadRes``, ``COCOeval`` evaluate + accumulate + summarize) and, with
``--vernier-python`` (an interpreter whose environment holds PyPI's ``vernier``), vernier's ``optimal_lrp`` of the
files' bytes. Each prints its wall-clock and CPU seconds, its peak resident memory and the load average before it;
then the ratios and the bounds (the command at most 0.5x COCOeval, at most 1x vernier).

    python benchmarks/lrp_speed.py --whole-process --vernier-python VENV/bin/python --detections 61
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH, HEIGHT = 640, 480
IMAGES, OBJECTS_PER_IMAGE, CLASSES, DETECTIONS = 5000, 7.2, 80, 100


def _boxes(rng: np.random.Generator, count: int) -> np.ndarray:
    """XYWH boxes with log-uniform sides between 8 and 320 pixels inside the image."""
    sides = np.exp(rng.uniform(np.log(8), np.log(320), size=(count, 2)))
    return np.concatenate([rng.uniform(0, 1, size=(count, 2)) * ([WIDTH, HEIGHT] - sides), sides], axis=1)


def synthetic_case(
    seed: int = 0, images: int = IMAGES, detections_per_image: int = DETECTIONS
) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """The COCO ground truth and the results list of the case (see the module)."""
    rng = np.random.default_rng(seed)
    objects = round(images * OBJECTS_PER_IMAGE)
    weights = rng.permutation(1.0 / np.arange(1, CLASSES + 1) ** 0.8)
    gt_image = np.sort(rng.integers(1, images + 1, objects))
    gt_class = rng.choice(CLASSES, size=objects, p=weights / weights.sum()) + 1
    gt_box, crowd = _boxes(rng, objects), rng.random(objects) < 0.01
    annotations = [
        {"id": i + 1, "image_id": int(m), "category_id": int(c), "bbox": b.tolist(), "area": float(b[2] * b[3]),
         "iscrowd": int(k)}
        for i, (m, c, b, k) in enumerate(zip(gt_image, gt_class, gt_box, crowd))
    ]  # fmt: skip
    # Up to 3 jittered copies per object (at most DETECTIONS an image), the rest random boxes.
    source = np.repeat(np.arange(objects), 3)
    source = source[np.argsort(rng.random(len(source)))]
    source = source[np.argsort(gt_image[source], kind="stable")]
    rank = np.arange(len(source)) - np.searchsorted(gt_image[source], gt_image[source])
    source = source[rank < detections_per_image]
    scale = rng.uniform(0.02, 0.35, size=(len(source), 1))
    near = gt_box[source] * np.exp(rng.normal(0, 1, (len(source), 4)) * scale * [0, 0, 1, 1])
    near[:, :2] += rng.normal(0, 1, (len(source), 2)) * scale * gt_box[source, 2:]
    near_class = np.where(rng.random(len(source)) < 0.8, gt_class[source], rng.integers(1, CLASSES + 1, len(source)))
    near_score = np.clip(0.95 - 1.5 * scale[:, 0] + rng.normal(0, 0.2, len(source)), 0.001, 1.0)
    per_image = np.bincount(gt_image[source], minlength=images + 1)[1:]
    random_image = np.repeat(np.arange(1, images + 1), detections_per_image - per_image)
    image = np.concatenate([gt_image[source], random_image])
    box = np.concatenate([near, _boxes(rng, len(random_image))])
    label = np.concatenate([near_class, rng.integers(1, CLASSES + 1, len(random_image))])
    score = np.concatenate([near_score, rng.beta(1, 6, len(random_image)) * 0.999 + 0.0005])
    detections = [
        {"image_id": int(m), "category_id": int(c), "bbox": b.tolist(), "score": float(s)}
        for m, c, b, s in zip(image, label, box, score)
    ]
    ground_truth = {
        "images": [{"id": i, "width": WIDTH, "height": HEIGHT} for i in range(1, images + 1)],
        "annotations": annotations,
        "categories": [{"id": c, "name": f"class_{c}"} for c in range(1, CLASSES + 1)],
    }
    return ground_truth, detections


def _resident_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def _coco_classes(method: str, official_repo: str) -> Tuple[Any, Any]:
    """pycocotools' ``COCO`` and ``COCOeval``, or the official fork's (its Python over PyPI's pycocotools)."""
    if method == "official":
        from lrp_reference import load_official  # tools/: the official run's PYTHONPATH

        return load_official(Path(official_repo))
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    return COCO, COCOeval


def _measure(method: str, seed: int, images: int, official_repo: str) -> Dict[str, Any]:
    """One method on the case, in this process: its time and memory."""
    COCO, COCOeval = _coco_classes(method, official_repo)
    ground_truth, detections = synthetic_case(seed, images)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = ground_truth
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(detections)
    del detections
    if method == "ours":
        from alrp_d2.lrp import evaluate_coco  # imported before the clock starts, as pycocotools
    before = _resident_mib()
    start = time.perf_counter()
    olrp = None
    if method == "ours":
        olrp = evaluate_coco(coco_gt, coco_dt)["oLRP"]
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            coco_eval = COCOeval(coco_gt, coco_dt, "bbox")
            coco_eval.evaluate()
            coco_eval.accumulate()
        if method == "official":
            olrp = 100 * float(np.mean(coco_eval.eval["olrp"][:, 0, -1][coco_eval.eval["olrp"][:, 0, -1] > -1]))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"method": method, "seconds": seconds, "peak_mib": peak, "before_mib": before, "oLRP": olrp}


def _run(method: str, python: str, args: argparse.Namespace) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools") if method == "official" else ROOT)
    command = [python, os.path.abspath(__file__), "--worker", method, "--seed", str(args.seed)]
    command += ["--images", str(args.images)] + (["--official-repo", args.official_repo] if args.official_repo else [])
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"lrp_speed: the {method} run failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _file_worker(method: str, gt_path: str, dt_path: str) -> None:
    """One whole process's work on the files: pycocotools' load, ``COCOeval`` evaluate + accumulate (+ summarize, for
    its AP), or vernier's ``optimal_lrp`` of the files' bytes (its JSON parsing included)."""
    if method == "vernier":
        from vernier.instance import optimal_lrp

        with open(gt_path, "rb") as gt_file, open(dt_path, "rb") as dt_file:
            report = optimal_lrp(gt_file.read(), dt_file.read())
        print(json.dumps({"oLRP": 100 * report.olrp}))
        return
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(gt_path)
        coco_eval = COCOeval(coco_gt, coco_gt.loadRes(dt_path), "bbox")
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    print(json.dumps({"AP": 100 * float(coco_eval.stats[0])}))


def _timed_process(command: List[str], env: Dict[str, str], output: Path) -> Dict[str, Any]:
    """Wall-clock seconds (start to exit, the interpreter's start included), CPU seconds (user + system, all threads),
    the peak resident memory (``wait4``'s ``ru_maxrss``) and the last line of its output (JSON) of one process."""
    load = os.getloadavg()[0]
    with open(output, "w") as stdout:
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"lrp_speed: {' '.join(command)} failed:\n{process.stderr.read().decode()[-3000:]}")  # type: ignore[union-attr]
    values = json.loads(output.read_text().strip().splitlines()[-1])
    cpu = usage.ru_utime + usage.ru_stime
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_mib": usage.ru_maxrss / 1024, "load": load, **values}


def _whole_processes(args: argparse.Namespace) -> None:
    """The command, COCOeval and vernier as whole processes from the same files, interleaved over ``--rounds``."""
    folder = Path(tempfile.mkdtemp(prefix="lrp_speed_"))
    gt_path, dt_path = str(folder / "gt.json"), str(folder / "dt.json")
    ground_truth, detections = synthetic_case(args.seed, args.images, args.detections)
    for path, content in ((gt_path, ground_truth), (dt_path, detections)):
        with open(path, "w") as file:
            json.dump(content, file)
    print(f"files: {len(ground_truth['images'])} images, {len(ground_truth['annotations'])} objects, "
          f"{len(detections)} detections ({os.path.getsize(dt_path) / 2**20:.0f} MiB)")  # fmt: skip
    del ground_truth, detections
    this = os.path.abspath(__file__)
    commands = {
        "command": [sys.executable, "-m", "alrp_d2.lrp", gt_path, dt_path, "--json"],
        "cocoeval": [sys.executable, this, "--file-worker", "cocoeval", gt_path, dt_path],
    }
    if args.vernier_python:
        commands["vernier"] = [args.vernier_python, this, "--file-worker", "vernier", gt_path, dt_path]
    env = dict(os.environ, PYTHONPATH=ROOT)
    runs: Dict[str, List[Dict[str, Any]]] = {method: [] for method in commands}
    for round_index in range(args.rounds):
        for method, command in commands.items():
            runs[method].append(run := _timed_process(command, env, folder / f"{method}.out"))
            print(f"round {round_index + 1} {method:>8}: {run['seconds']:6.2f} s ({run['cpu_seconds']:6.2f} s CPU), "
                  f"peak resident {run['peak_mib']:5.0f} MiB, load average {run['load']:.2f} before; "
                  f"{'AP' if 'AP' in run else 'oLRP'} {run.get('AP', run.get('oLRP')):.4f}")  # fmt: skip
    for round_index in range(args.rounds):
        ours = runs["command"][round_index]["seconds"]
        line = f"round {round_index + 1}: command / COCOeval {ours / runs['cocoeval'][round_index]['seconds']:.3f}"
        if "vernier" in runs:
            line += f", command / vernier {ours / runs['vernier'][round_index]['seconds']:.3f}"
        print(line + " (bounds: at most 0.5 and 1.0)")
    shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--official-python", required=False, help="interpreter for the official LRP-Error")
    parser.add_argument("--official-repo", help="a checkout of kemaloksuz/LRP-Error (nothing built in it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=IMAGES, help=f"images of the case (default {IMAGES})")
    parser.add_argument("--whole-process", action="store_true", help="the command against COCOeval and vernier")
    parser.add_argument("--vernier-python", help="interpreter whose environment holds vernier (--whole-process)")
    parser.add_argument("--detections", type=int, default=DETECTIONS, help="detections an image (--whole-process)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of --whole-process")
    parser.add_argument("--worker", choices=("ours", "cocoeval", "official"), help=argparse.SUPPRESS)
    parser.add_argument("--file-worker", nargs=3, metavar=("METHOD", "GT", "DT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.images < 1 or args.rounds < 1 or args.detections < 1:
        parser.error("--images, --rounds and --detections must be at least 1")
    if args.file_worker:
        _file_worker(*args.file_worker)
        return
    if args.worker:
        print(json.dumps(_measure(args.worker, args.seed, args.images, args.official_repo)))
        return
    if args.whole_process:
        _whole_processes(args)
        return
    if bool(args.official_python) != bool(args.official_repo):
        parser.error("--official-python and --official-repo go together (the official run needs both)")
    objects = round(args.images * OBJECTS_PER_IMAGE)
    print(f"case: {args.images} images, {objects} objects, {CLASSES} classes, {DETECTIONS} detections an image; "
          f"load average {os.getloadavg()[0]:.2f} at the start")  # fmt: skip
    methods = ["ours", "cocoeval"] + (["official"] if args.official_python else [])
    runs = {}
    for method in methods:
        python = args.official_python if method == "official" else sys.executable
        runs[method] = run = _run(method, python, args)
        print(f"{method:>9}: {run['seconds']:7.2f} s, peak resident {run['peak_mib']:6.0f} MiB "
              f"({run['before_mib']:.0f} MiB before the evaluation)")  # fmt: skip
    ratio = runs["ours"]["seconds"] / runs["cocoeval"]["seconds"]
    print(f"ours / COCOeval evaluate+accumulate: {ratio:.3f} (bound 1.2)")
    if "official" in runs:
        speedup = runs["official"]["seconds"] / runs["ours"]["seconds"]
        print(f"official / ours: {speedup:.1f}x (bound 10x); oLRP ours {runs['ours']['oLRP']:.6f}, "
              f"official {runs['official']['oLRP']:.6f}")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
