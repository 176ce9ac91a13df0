"""Speed, memory and gradient error of Rank & Sort Loss: ours against the official loop and BRL's
bucketed version, on the same inputs in one run.

    python benchmarks/rank_sort_speed.py --official-repo PATH/RankSortLoss --brl-repo PATH/BucketedRankingBasedLosses
    python benchmarks/rank_sort_speed.py --device cuda ...   # on a GPU

Rows (forward + backward of the ranking output, which carries the whole score gradient):

* ``ours``: :func:`alrp_d2.losses.rank_sort_loss` (computes in float64);
* ``official``: ``RankSort`` of kemaloksuz/RankSortLoss (``mmdet/models/losses/ranking_losses.py``),
  a Python loop over the positives;
* ``BRL``: ``BucketedRankSort`` of blisgard/BucketedRankingBasedLosses (same path), which replaces
  the negatives between two consecutive positives by their mean (exact only for ``delta = 0``).

The two repositories are not part of this project: their files are loaded at run time from the
paths given by ``benchmarks/reference_losses.py`` (``Tensor.cuda()`` redirected to ``--device``, BRL's
``from ..builder import LOSSES`` served by a stub registry). A row whose repository is not given is
reported as not run.

Every row is warmed up on a small problem first. Time: the median of ``--repeats`` runs, the rows
taking turns in one process, so that a change of the machine's load hits every row alike. Memory
and outputs: one run of each row in a fresh process; memory is the peak above what the process
held before the run (resident memory on the CPU, with Linux's peak reset after the inputs are
built; the allocator's peak on CUDA). The gradient error
of each row is the largest absolute difference from the float64 loop transcription of the
official function (``tests/loop_reference.rank_sort_loss_loop``, run once per case on the same
float32 logits), divided by the largest reference gradient; the loss columns are absolute
differences. The inputs imitate the start of training (the expensive case): logits near the
prior-probability initialisation, so that nearly every negative is relevant, positives slightly
above with IoU targets uniform in (0, 1], 5 % of the entries ignored.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from alrp_d2.losses import rank_sort_loss  # noqa: E402  (imported before any memory is measured)
from benchmarks.loss_speed import max_relative_difference  # noqa: E402
from benchmarks.reference_losses import RANKING_LOSSES_FILE, load_reference  # noqa: E402
from tests.loop_reference import rank_sort_loss_loop  # noqa: E402

CASES = ["1000000:500", "4000000:1500"]
METHODS = ("ours", "official", "BRL")


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
    if method == "ours":
        return rank_sort_loss
    assert repo is not None
    return load_reference("rank_sort", method, repo, device)


def _memory_status() -> Dict[str, int]:
    """This process's resident memory (VmRSS) and its peak (VmHWM) in bytes (Linux)."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if line.startswith("Vm"))
    return {name: int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmHWM")}


def _reset_peak_rss() -> int:
    """Resets the peak resident memory to the current one (Linux ``clear_refs``) and returns it, so
    that the peak read later is that of the measured runs, not of building the inputs."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return _memory_status()["VmRSS"]


def _load() -> str:
    return " ".join(f"{load:.1f}" for load in os.getloadavg())


def _synchronise(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _runner(method: str, repo: Optional[str], delta: float, device: str) -> Callable:
    """``run(logits, targets) -> (ranking_loss, sorting_loss, d ranking_loss / d logits)`` of one row,
    warmed up (lazy initialisation, kernels) on a small problem."""
    loss = _loss_function(method, repo, device)

    def run(logits: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        leaf = logits.clone().requires_grad_(True)
        ranking, sorting = loss(leaf, targets, delta)
        ranking.backward()
        _synchronise(device)
        return ranking.detach(), sorting.detach(), leaf.grad

    run(*make_inputs(10_000, 10, device))
    return run


def _outputs_and_memory(method, repos, case, delta, device, queue) -> None:
    """One run of one row in this fresh process: its outputs and its peak memory."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    logits, targets = make_inputs(*case, device)
    if method == "loop":
        outputs = rank_sort_loss_loop(logits.cpu(), targets.cpu(), delta)
        queue.put((0, [t.double().numpy() for t in outputs]))
        return
    run = _runner(method, repos[method], delta, device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _reset_peak_rss()
    outputs = run(logits, targets)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else _memory_status()["VmHWM"]
    queue.put((peak - base, [t.double().cpu().reshape(-1).numpy() for t in outputs]))


def _times(methods, repos, case, delta, device, repeats, queue) -> None:
    """The median time of every row, the rows taking turns in one process (so that a change of the
    machine's load hits all of them alike)."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    logits, targets = make_inputs(*case, device)
    runs = {method: _runner(method, repos[method], delta, device) for method in methods}
    times: Dict[str, List[float]] = {method: [] for method in methods}
    for _ in range(repeats):
        for method, run in runs.items():
            _synchronise(device)
            start = time.perf_counter()
            run(logits, targets)
            times[method].append(time.perf_counter() - start)
    queue.put({method: statistics.median(values) for method, values in times.items()})


def _in_fresh_process(target: Callable, *args):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    if process.exitcode:
        raise RuntimeError(f"{target.__name__}{args[:1]} failed (exit code {process.exitcode})")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--official-repo", help="a clone of kemaloksuz/RankSortLoss")
    parser.add_argument("--brl-repo", help="a clone of blisgard/BucketedRankingBasedLosses")
    parser.add_argument("--deltas", type=float, nargs="+", default=[0.5, 0.0], help="delta of H (0.5 is RS Loss's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each row (median reported)")
    parser.add_argument("--cases", nargs="+", default=CASES, help="M:P, the numbers of logits and positives")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device")
    repos: Dict[str, Optional[str]] = {"ours": ROOT, "official": args.official_repo, "BRL": args.brl_repo}
    for name in ("official", "BRL"):
        repo = repos[name]
        if repo is not None and not os.path.isfile(os.path.join(repo, RANKING_LOSSES_FILE)):
            parser.error(f"{name} repository {repo} has no {RANKING_LOSSES_FILE}")

    threads = os.environ.get("BENCH_THREADS", torch.get_num_threads())
    print(f"device: {args.device}, torch {torch.__version__}, threads {threads}, load average {_load()}")
    header = (
        f"{'M':>11} {'P':>5} {'delta':>5} | {'method':>8} | {'time (s)':>9} {'vs official':>11} | {'memory':>8} | "
        "max. error: ranking, sorting (abs.), gradient (rel.)"
    )
    print(header)
    print("-" * len(header))
    cases = [tuple(int(n) for n in case.split(":")) for case in args.cases]
    methods = [method for method in METHODS if repos[method] is not None]
    for delta in args.deltas:
        for case in cases:
            _, reference = _in_fresh_process(_outputs_and_memory, "loop", repos, case, delta, args.device)
            results = {
                method: _in_fresh_process(_outputs_and_memory, method, repos, case, delta, args.device)
                for method in methods
            }
            times = _in_fresh_process(_times, methods, repos, case, delta, args.device, args.repeats)
            for method in METHODS:
                prefix = f"{case[0]:>11,} {case[1]:>5} {delta:>5} | {method:>8} |"
                if method not in results:
                    print(f"{prefix} not run (no --{method.lower()}-repo)")
                    continue
                peak, outputs = results[method]
                ratio = f"{times['official'] / times[method]:>10.1f}x" if "official" in times else f"{'':>11}"
                errors = [
                    (torch.from_numpy(a) - torch.from_numpy(b)).abs().max().item()
                    for a, b in zip(outputs[:2], reference[:2])
                ]
                errors.append(max_relative_difference(torch.from_numpy(outputs[2]), torch.from_numpy(reference[2])))
                print(
                    f"{prefix} {times[method]:>9.3f} {ratio} | {peak / 2**20:>6.0f}MB | "
                    + "  ".join(f"{error:.1e}" for error in errors)
                )
    print(f"load average at the end: {_load()} (other processes on the machine slow every row)")


if __name__ == "__main__":
    main()
