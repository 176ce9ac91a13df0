"""The spread of the tiny Hugging Face DETRs' training trajectories that ``tests/hf/`` asserts to fall: for each case
of the tests, seeds and environments, the loss before each Adam step on the fixed batch (``tests/hf/tiny_detrs.py``),
and the drop of its window means, ``mean(first k) - mean(last k)``.

* ``rank``: ``test_a_short_adam_run_lowers_the_last_layers_ranking_term``: AP Loss's last-layer ``loss_rank`` with the
  model's own box terms (``box_terms="model"``), Adam at 1e-2 (D-FINE and DEIMv2 also at 3e-3);
* ``total``: ``test_each_criterion_trains_each_detr``: ``outputs.loss`` with each criterion and the loss's own box
  terms (``box_terms="value_balanced"``), Adam at 1e-2.

The environments, each a process of its own: 1 and 2 threads (``OMP_NUM_THREADS``), with this CPU's kernels and with
ATen's portable kernels and oneDNN capped at SSE4.1 (``ATEN_CPU_CAPABILITY=default``, ``ONEDNN_MAX_CPU_ISA=SSE41``,
as another CPU would run them), run at once. Prints, per case, the smallest and largest drop over seeds and
environments and the largest difference of one step's value between environments of the same seed.

    python benchmarks/trajectory_spread.py [--steps 16] [--total-steps 8] [--window 4] [--seeds 0 1 2]
        [--environments ...] [--only TEXT] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.hf.tiny_detrs import window_drop  # noqa: E402

ENVIRONMENTS = {
    "1 thread": {"OMP_NUM_THREADS": "1"},
    "2 threads": {"OMP_NUM_THREADS": "2"},
    "1 thread, portable": {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "2 threads, portable": {"OMP_NUM_THREADS": "2", "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
RANK_MODELS = (
    "rt_detr",
    "rt_detr_v2",
    "deformable_detr_two_stage",
    "d_fine",
    "deimv2",
    "conditional_detr",
    "dab_detr",
    "detr",
    "yolos",
    "lw_detr",
    "rf_detr",
)
#: (model, Adam learning rate) of the rank cases: every model at 1e-2, and D-FINE and DEIMv2 at 3e-3 too.
RANK_CASES = tuple((name, 1e-2) for name in RANK_MODELS) + (("d_fine", 3e-3), ("deimv2", 3e-3))
TOTAL_MODELS = ("rt_detr", "rt_detr_v2", "deformable_detr_two_stage", "deformable_detr")
CRITERIA = ("RankSortCriterion", "AlrpCriterion", "APCriterion")


def trajectories(steps: int, total_steps: int, seeds: List[int], only: str) -> Dict[str, List[List[float]]]:
    """``{case: [trajectory of each seed]}`` in this process's environment, of the cases whose name holds ``only``."""
    from alrp_d2.detr import set_prediction_criterion, use_ranking_loss
    from tests.hf.tiny_detrs import fixed_batch, tiny_detr, train_steps

    found: Dict[str, List[List[float]]] = {}
    for seed in seeds:
        for name, lr in RANK_CASES:
            if only not in f"rank {name} {lr}":
                continue
            model = use_ranking_loss(tiny_detr(name, seed), set_prediction_criterion("APCriterion"))
            values = train_steps(model, fixed_batch(), steps, lr=lr, key="loss_rank")
            found.setdefault(f"rank {name} {lr}", []).append(values)
        for name in TOTAL_MODELS:
            for criterion in CRITERIA:
                if only not in f"total {name} {criterion}":
                    continue
                model = use_ranking_loss(
                    tiny_detr(name, seed), set_prediction_criterion(criterion), box_terms="value_balanced"
                )
                found.setdefault(f"total {name} {criterion}", []).append(train_steps(model, fixed_batch(), total_steps))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=16, help="Adam steps of the rank cases")
    parser.add_argument("--total-steps", type=int, default=8, help="Adam steps of the total cases")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--environments", nargs="+", choices=list(ENVIRONMENTS), default=list(ENVIRONMENTS))
    parser.add_argument("--only", default="", help="the cases whose name holds this text (e.g. 'rank d_fine')")
    parser.add_argument("--json", help="also write every trajectory, {environment: {case: [per seed]}}, here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(trajectories(args.steps, args.total_steps, args.seeds, args.only)))
        return
    steps = ["--steps", str(args.steps), "--total-steps", str(args.total_steps)]
    command = [sys.executable, __file__, "--worker", *steps, "--only", args.only, "--seeds", *map(str, args.seeds)]
    workers = {  # one process per environment, all at once
        label: subprocess.Popen(command, env={**os.environ, **ENVIRONMENTS[label]}, stdout=subprocess.PIPE, text=True)
        for label in args.environments
    }
    runs = {label: json.loads(worker.communicate()[0].splitlines()[-1]) for label, worker in workers.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f)
    print(f"{args.steps} / {args.total_steps} steps, windows of {args.window}, seeds {args.seeds}")
    print(f"environments: {', '.join(runs)}")
    print("| case | smallest drop | largest drop | first value | largest step difference between environments |")
    print("|---|---|---|---|---|")
    for case in runs[args.environments[0]]:
        drops = [window_drop(values, args.window) for run in runs.values() for values in run[case]]
        by_seed = zip(*(run[case] for run in runs.values()))
        spread = max(max(max(step) - min(step) for step in zip(*seed_runs)) for seed_runs in by_seed)
        first = runs[args.environments[0]][case][0][0]
        print(f"| {case} | {min(drops):.4f} | {max(drops):.4f} | {first:.4f} | {spread:.4f} |")


if __name__ == "__main__":
    main()
