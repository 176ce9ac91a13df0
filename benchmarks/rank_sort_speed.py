"""Speed, memory and gradient error of Rank & Sort Loss: ours against the previous implementation of this
project, the official loop and BRL's bucketed version, on the same inputs in one run.

    git archive main | tar -x -C /tmp/previous        # any other checkout of this project
    python benchmarks/rank_sort_speed.py --previous-repo /tmp/previous --official-repo PATH/RankSortLoss \
        --brl-repo PATH/BucketedRankingBasedLosses
    python benchmarks/rank_sort_speed.py --device cuda ...   # on a GPU

Rows (forward + backward of the ranking output, which carries the whole score gradient):

* ``ours``: :func:`alrp_d2.losses.rank_sort_loss` of one ``LabelledSet`` (computes in float64);
* ``previous``: the same loss of the checkout given by ``--previous-repo``, loaded at run time under
  another name (``benchmarks/reference_losses.load_previous``), in its label form (``label_form``);
* ``official``: ``RankSort`` of kemaloksuz/RankSortLoss (``mmdet/models/losses/ranking_losses.py``),
  a Python loop over the positives;
* ``BRL``: ``BucketedRankSort`` of blisgard/BucketedRankingBasedLosses (same path), which replaces
  the negatives between two consecutive positives by their mean (exact only for ``delta = 0``).

The two repositories are not part of this project: their files are loaded at run time from the
paths given by ``benchmarks/reference_losses.py`` (``Tensor.cuda()`` redirected to ``--device``, BRL's
``from ..builder import LOSSES`` served by a stub registry). A row whose repository is not given is
reported as not run.

Every row is warmed up on a small problem first. Time: the median of ``--repeats`` runs, the rows
taking turns in one process, so that a change of the machine's load hits every row alike; ``vs ours``
is the row's time over ours; ``one pass`` the time of copying the logits into an allocated tensor (one
read and one write of M floats). Memory and outputs: one run of each row in a fresh process; memory is
the peak above what the process held before the run (resident memory on the CPU, with Linux's peak
reset after the inputs are built; the allocator's peak on CUDA), also per logit. The official loop runs
up to ``--official-max-logits`` and the float64 loop transcription (the reference of the error columns)
up to ``--loop-max-logits``. The gradient error
of each row is the largest absolute difference from the float64 loop transcription of the
official function (``tests/loop_reference.rank_sort_loss_loop``, run once per case on the same
float32 logits), divided by the largest reference gradient; the loss columns are absolute
differences. The inputs imitate the start of training (the expensive case): logits near the
prior-probability initialisation, so that nearly every negative is relevant, positives slightly
above with IoU targets uniform in (0, 1], 5 % of the entries ignored.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict, Optional, Tuple, cast

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from alrp_d2 import losses as our_losses  # noqa: E402  (imported before any memory is measured)
from benchmarks.loss_speed import (  # noqa: E402
    in_fresh_process,
    load_average,
    max_relative_difference,
    median_times,
    one_pass,
    parse_cases,
    peak_memory,
    set_threads,
    synchronise,
)
from benchmarks.reference_losses import RANKING_LOSSES_FILE, label_form, load_previous, load_reference  # noqa: E402
from tests.loop_reference import rank_sort_loss_loop  # noqa: E402

CASES = ["1000000:500", "4000000:1500", "20000000:1500"]
METHODS = ("ours", "previous", "official", "BRL")


def make_inputs(num_logits: int, num_positives: int, device: str, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_logits, generator=gen) * 0.5 - 4.6
    targets = torch.zeros(num_logits)
    targets[torch.randperm(num_logits, generator=gen)[: num_logits // 20]] = -1.0
    positives = torch.randperm(num_logits, generator=gen)[:num_positives]
    targets[positives] = 1.0 - torch.rand(num_positives, generator=gen)
    logits[positives] += 0.5
    return logits.to(device), targets.to(device)


def _loss_function(method: str, repo: Optional[str], device: str) -> Callable:
    """``f(logits, targets, delta) -> (ranking_loss, sorting_loss)`` of one row."""
    if method in ("ours", "previous"):
        call = label_form(our_losses if method == "ours" else load_previous(cast(str, repo)), "rank_sort")
        return lambda logits, targets, delta: call(logits, targets, delta=delta)[:2]
    assert repo is not None
    return load_reference("rank_sort", method, repo, device)


def _runner(method: str, repo: Optional[str], delta: float, device: str) -> Callable:
    """``run(logits, targets) -> (ranking_loss, sorting_loss, d ranking_loss / d logits)`` of one row,
    warmed up (lazy initialisation, kernels) on a small problem."""
    loss = _loss_function(method, repo, device)

    def run(logits: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        leaf = logits.clone().requires_grad_(True)
        ranking, sorting = loss(leaf, targets, delta)
        ranking.backward()
        synchronise(device)
        return ranking.detach(), sorting.detach(), leaf.grad

    run(*make_inputs(10_000, 10, device))
    return run


def _outputs_and_memory(method, repos, case, delta, device, queue) -> None:
    """One run of one row in this fresh process: its outputs and its peak memory."""
    set_threads()
    logits, targets = make_inputs(*case, device)
    if method == "loop":
        outputs = rank_sort_loss_loop(logits.cpu(), targets.cpu(), delta)
        queue.put((0, [t.double().numpy() for t in outputs]))
        return
    run = _runner(method, repos[method], delta, device)
    peak, outputs = peak_memory(lambda: run(logits, targets), device)
    queue.put((peak, [t.double().cpu().reshape(-1).numpy() for t in outputs]))


def _times(methods, repos, case, delta, device, repeats, queue) -> None:
    """The median time of every row and of one pass over the logits, the rows taking turns in one process
    (so that a change of the machine's load hits all of them alike)."""
    set_threads()
    logits, targets = make_inputs(*case, device)
    runs: Dict[str, Callable[[], object]] = {"one pass": one_pass(logits)}
    for method in methods:
        run = _runner(method, repos[method], delta, device)
        runs[method] = lambda run=run: run(logits, targets)
    queue.put(median_times(runs, repeats, device))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--previous-repo", help="another checkout of this project (e.g. git archive main | tar -x)")
    parser.add_argument("--official-repo", help="a clone of kemaloksuz/RankSortLoss")
    parser.add_argument("--brl-repo", help="a clone of blisgard/BucketedRankingBasedLosses")
    parser.add_argument("--deltas", type=float, nargs="+", default=[0.5, 0.0], help="delta of H (0.5 is RS Loss's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each row (median reported)")
    parser.add_argument("--cases", nargs="+", default=CASES, help="M:P, the numbers of logits and positives")
    parser.add_argument("--official-max-logits", type=int, default=4_000_000, help="the official loop's largest case")
    parser.add_argument("--loop-max-logits", type=int, default=4_000_000, help="the loop transcription's largest case")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device")
    repos: Dict[str, Optional[str]] = {
        "ours": ROOT,
        "previous": args.previous_repo,
        "official": args.official_repo,
        "BRL": args.brl_repo,
    }
    for name in ("official", "BRL"):
        repo = repos[name]
        if repo is not None and not os.path.isfile(os.path.join(repo, RANKING_LOSSES_FILE)):
            parser.error(f"{name} repository {repo} has no {RANKING_LOSSES_FILE}")

    threads = os.environ.get("BENCH_THREADS", torch.get_num_threads())
    print(f"device: {args.device}, torch {torch.__version__}, threads {threads}, load average {load_average()}")
    print(
        "| M | P | delta | method | time (s) | its time / ours | peak memory (MB) | bytes per logit | "
        "max. error: ranking, sorting (abs.), gradient (rel.) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for delta in args.deltas:
        for case in parse_cases(args.cases):
            methods = [
                method
                for method in METHODS
                if repos[method] is not None and not (method == "official" and case[0] > args.official_max_logits)
            ]
            reference = None
            if case[0] <= args.loop_max_logits:
                _, reference = in_fresh_process(_outputs_and_memory, "loop", repos, case, delta, args.device)
            results = {
                method: in_fresh_process(_outputs_and_memory, method, repos, case, delta, args.device)
                for method in methods
            }
            times = in_fresh_process(_times, methods, repos, case, delta, args.device, args.repeats)
            for method in METHODS:
                prefix = f"| {case[0]:,} | {case[1]} | {delta} | {method} |"
                if method not in results:
                    print(f"{prefix} not run | | | | |")
                    continue
                peak, outputs = results[method]
                errors = "no loop reference at this size"
                if reference is not None:
                    differences = [
                        (torch.from_numpy(a) - torch.from_numpy(b)).abs().max().item()
                        for a, b in zip(outputs[:2], reference[:2])
                    ]
                    differences.append(
                        max_relative_difference(torch.from_numpy(outputs[2]), torch.from_numpy(reference[2]))
                    )
                    errors = "  ".join(f"{error:.1e}" for error in differences)
                print(
                    f"{prefix} {times[method]:.3f} | {times[method] / times['ours']:.1f}x | {peak / 2**20:.0f} | "
                    f"{peak / case[0]:.1f} | {errors} |"
                )
            print(f"| {case[0]:,} | | | one pass (copy of the logits) | {times['one pass']:.4f} | | | | |")
    print(f"load average at the end: {load_average()} (other processes on the machine slow every row)")


if __name__ == "__main__":
    main()
