"""Speed of the ranking losses over the sets of one DETR training step: all sets in one call (the segmented ranking,
``alrp_d2.losses.*_loss`` of all the sets) against one call per set (a list of one), on both paths, forward and
backward.

    python benchmarks/segmented_speed.py                          # 13 sets, Rank & Sort Loss, on the CPU
    python benchmarks/segmented_speed.py --sets 5 13 --losses rank_sort alrp ap --device cuda

The sets are those of ``benchmarks/op_count.py``'s DETR rows (:func:`benchmarks.op_count.detr_sets`: 4 images x
300 queries x 80 classes with 32 positives, every third a denoising set of 4 x 200 queries with 160 positives). Time:
every row warmed up once, then the rows take turns (so that a change of the machine's load hits all alike), the
median of ``--repeats`` runs; on CUDA each run ends with a synchronisation. ``vs one call``: the row's time over the
one call's on the same path. The machine's load average is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from alrp_d2 import losses  # noqa: E402
from benchmarks.op_count import LOSSES, detr_sets  # noqa: E402

ROWS = {
    "one call, scan": ("sets", "scan"),
    "one call, dense": ("sets", "dense"),
    "per set, scan": ("single", "scan"),
    "per set, dense": ("single", "dense"),
}


def step(loss: str, sets: List[losses.RankingSet], mode: str, path: str, device: str) -> Callable[[], None]:
    """One forward and backward of ``loss`` over ``sets``: in one call (``mode`` "sets") or one call per set."""
    function, options = {
        "alrp": (losses.alrp_loss, {"delta": 1.0}),
        "ap": (losses.ap_loss, {"eps": None, "interpolated": True}),
        "rank_sort": (losses.rank_sort_loss, {"delta": 0.5}),
    }[loss]

    def run() -> None:
        leaves = [s._replace(logits=s.logits.detach().requires_grad_(True)) for s in sets]
        if mode == "sets":
            terms = function(leaves, path=path, **options)
            total = sum(getattr(terms, field).sum() for field in terms._fields[:2])
        else:
            total = 0
            for s in leaves:
                terms = function([s], path=path, **options)
                total = total + sum(getattr(terms, field).sum() for field in terms._fields[:2])
        total.backward()
        if device == "cuda":
            torch.cuda.synchronize()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--sets", nargs="+", type=int, default=[13], help="the numbers of sets of a step")
    parser.add_argument("--losses", nargs="+", default=["rank_sort"], choices=LOSSES)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each row (median reported)")
    args = parser.parse_args()
    print(f"device: {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("| loss | sets | row | time (ms) | vs one call |\n|---|---|---|---|---|")
    for num_sets in args.sets:
        sets = detr_sets(num_sets, args.device)
        for loss in args.losses:
            runs = {name: step(loss, sets, *mode, args.device) for name, mode in ROWS.items()}
            times: Dict[str, List[float]] = {name: [] for name in runs}
            for run in runs.values():
                run()
            for _ in range(args.repeats):
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
            medians = {name: statistics.median(values) for name, values in times.items()}
            for name, median in medians.items():
                ratio = median / medians["one call, " + name.split(", ")[1]]
                print(f"| {loss} | {num_sets} | {name} | {median * 1000:.1f} | {ratio:.2f}x |")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
