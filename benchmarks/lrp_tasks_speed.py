"""LRP on keypoints, panoptic segmentation and LVIS: ``python -m alrp_d2.lrp`` against the official LRP-Error forks,
as whole processes on the same files.

``--task`` picks the case (benchmarks/lrp_task_cases.py, rebuilt from ``--seed``): ``keypoints`` (5,000 images,
about 11,000 people, 20,000 keypoint results), ``panoptic`` (150 images of 480 x 640, about 40 segments each) or
``lvis`` (1,000 images, 300 categories, 300 box detections an image); ``--images`` shrinks it to check the set-up in
seconds. The files are written once (into ``--folder``, else a temporary folder), then each side runs as a process
of its own, timed from its start to its exit, its peak resident memory from ``wait4``:

* ``ours``: ``python -m alrp_d2.lrp GT DT --json`` with ``--iou-type keypoints``, ``--panoptic GT_FOLDER
  PRED_FOLDER`` or ``--lvis`` (this interpreter);
* ``official``: the official fork run as the reference scripts run it (``--official-python``, an interpreter whose
  environment holds numpy, Pillow, pycocotools and matplotlib from PyPI; ``--official-repo``, a checkout of
  kemaloksuz/LRP-Error): the COCO fork's ``COCOeval`` with ``iouType="keypoints"`` (``tools/lrp_reference.py``), the
  panopticapi fork's ``pq_lrp_compute_single_core`` and ``pq_lrp_average`` on one process
  (``tools/panoptic_lrp_reference.py``), the lvis-api fork's ``LVISEval`` on boxes (``tools/lvis_lrp_reference.py``).

Prints the times, the peak memory, the ratio, and whether every mean the official code reports (oLRP or LRP, its
components; by frequency group and area for LVIS; PQ, SQ, RQ, things and stuff for panoptic) equals ours to 1e-6
(x100: 1e-4); exits 1, naming the keys, when one does not.

    python benchmarks/lrp_tasks_speed.py --task lvis --official-python VENV/bin/python --official-repo LRP-Error
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from lrp_task_cases import write_keypoints, write_lvis, write_panoptic  # noqa: E402  (benchmarks/ is no package)

WRITERS = {"keypoints": write_keypoints, "panoptic": write_panoptic, "lvis": write_lvis}
IMAGES = {"keypoints": 5000, "panoptic": 150, "lvis": 1000}
#: The official panoptic groups and means, and the project's suffixes and keys.
PANOPTIC_GROUPS = {"All": "", "Things": "_th", "Stuff": "_st"}
PANOPTIC_MEANS = {"pq": "PQ", "sq": "SQ", "rq": "RQ", "lrp": "LRP", "lrp_loc": "LRP_loc", "lrp_fp": "LRP_FP"}
PANOPTIC_MEANS["lrp_fn"] = "LRP_FN"
TOLERANCE = 1e-4  # x100: 1e-6 of the fractions


def _ours_command(task: str, folder: Path) -> List[str]:
    """The command of ours on the files of ``task`` in ``folder``."""
    command = [sys.executable, "-m", "alrp_d2.lrp", str(folder / "gt.json")]
    if task == "panoptic":
        return command + [str(folder / "pred.json"), "--panoptic", str(folder / "gt"), str(folder / "pred"), "--json"]
    return command + [str(folder / "dt.json"), "--json"] + (["--lvis"] if task == "lvis" else ["--iou-type", task])


def _percent(value: Any) -> Any:
    return None if value is None else 100.0 * value


def official_means(task: str, folder: Path, repo: Path) -> Dict[str, Any]:
    """The official fork's means on the files of ``task`` in ``folder``, in the keys and scale (x100) of ours."""
    if task == "panoptic":
        import panoptic_lrp_reference as reference  # tools/: the official run's PYTHONPATH

        means = reference.official_results(folder, reference.load_official(repo))["means"]
        results = {"num_classes" + s: means[group]["n"] for group, s in PANOPTIC_GROUPS.items()}
        for group, suffix in PANOPTIC_GROUPS.items():
            results.update({key + suffix: _percent(means[group][name]) for name, key in PANOPTIC_MEANS.items()})
        return results
    if task == "lvis":
        import lvis_lrp_reference as reference

        summary = reference.official_results(
            folder / "gt.json", folder / "dt.json", "bbox", reference.load_official(repo)
        )
    else:
        import lrp_reference as reference

        summary = reference.official_results(
            folder / "gt.json", folder / "dt.json", task, reference.load_official(repo)
        )
    return {key: _percent(value) for key, value in summary["summary"].items()}


def _timed(command: List[str], env: Dict[str, str]) -> Tuple[float, float, str]:
    """Runs ``command``: its seconds from start to exit, its peak resident MiB and its stdout; exits on a failure."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if process.returncode != 0:
            sys.exit(f"lrp_tasks_speed: {' '.join(command)} exited {process.returncode}:\n{err.read()[-3000:]}")
        return seconds, usage.ru_maxrss / 1024, out.read()


def _differences(ours: Dict[str, Any], official: Dict[str, Any]) -> Dict[str, Tuple[Any, Any]]:
    """The official means that ours does not equal (both undefined counts as equal)."""
    unequal = {}
    for key, expected in official.items():
        actual = ours.get(key)
        undefined = expected is None or (isinstance(expected, float) and math.isnan(expected))
        if undefined and actual is None:
            continue
        if undefined or actual is None or abs(actual - expected) > TOLERANCE:
            unequal[key] = (actual, expected)
    return unequal


def _compare(args: argparse.Namespace, folder: Path) -> None:
    """Times both sides on the files in ``folder`` and checks their means."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    seconds, peak, out = _timed(_ours_command(args.task, folder), env)
    ours = json.loads(out)
    print(f"     ours: {seconds:7.2f} s, peak resident {peak:6.0f} MiB, oLRP {ours.get('oLRP', ours.get('LRP')):.6f}")
    if not args.official_python:
        return
    worker = [args.official_python, __file__, "--worker", "--task", args.task, "--folder", str(folder)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    official_seconds, official_peak, out = _timed(worker + ["--official-repo", args.official_repo], env)
    official = json.loads(out.strip().splitlines()[-1])
    print(f" official: {official_seconds:7.2f} s, peak resident {official_peak:6.0f} MiB")
    print(f"official / ours: {official_seconds / seconds:.1f}x the time, {official_peak / peak:.2f}x the memory")
    unequal = _differences(ours, official)
    if unequal:
        sys.exit(f"lrp_tasks_speed: ours (first) differs from the official (second) on {unequal}")
    print(f"equal to the official to 1e-6 on {len(official)} means: {', '.join(official)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=sorted(WRITERS), help="the case and the evaluation")
    parser.add_argument("--official-python", help="interpreter for the official LRP-Error")
    parser.add_argument("--official-repo", help="a checkout of kemaloksuz/LRP-Error (nothing built in it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--images", type=int, help="images of the case (default: keypoints 5000, panoptic 150, lvis 1000)"
    )
    parser.add_argument("--folder", type=Path, help="where the case's files are written (default: a temporary folder)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(official_means(args.task, args.folder, Path(args.official_repo))))
        return
    if bool(args.official_python) != bool(args.official_repo):
        parser.error("--official-python and --official-repo go together (the official run needs both)")
    images = IMAGES[args.task] if args.images is None else args.images
    if images < 1:
        parser.error(f"--images must be at least 1, not {images}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        sizes = WRITERS[args.task](folder, args.seed, images)
        print(f"{args.task}: {', '.join(f'{v} {k}' for k, v in sizes.items())}; "
              f"load average {os.getloadavg()[0]:.2f} at the start")  # fmt: skip
        _compare(args, folder)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
