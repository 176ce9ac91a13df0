"""Speed and memory of aLRP Loss and AP Loss: ours against the previous implementation of this project,
BRL's bucketed AP Loss and the official loops, on the same inputs in one run.

    git archive main | tar -x -C /tmp/previous        # any other checkout of this project
    python benchmarks/loss_speed.py --previous-repo /tmp/previous \\
        --brl-repo PATH/BucketedRankingBasedLosses --official-repo PATH/aLRPLoss
    BENCH_THREADS=2 python benchmarks/loss_speed.py --cases 4000000:1500 ...   # one case, two threads
    python benchmarks/loss_speed.py --device cuda ...                          # on a GPU

Rows (forward and backward; one ranking given by labels, float32 logits, delta 1):

* ``ours``: :func:`alrp_d2.losses.alrp_loss` / :func:`alrp_d2.losses.ap_loss` of one ``LabelledSet`` (AP Loss
  interpolated, without a gate: the official APLoss);
* ``previous``: the same losses of the checkout given by ``--previous-repo``, loaded at run time under
  another name (``benchmarks/reference_losses.load_previous``), in its label form (``label_form``);
* ``BRL``: ``BucketedAPLoss`` of blisgard/BucketedRankingBasedLosses (no aLRP Loss is published there: both
  losses are compared with its AP Loss, which runs the same ranking of every negative against the positives);
* ``official``: ``aLRPLoss`` / ``APLoss`` of kemaloksuz/aLRPLoss, a Python loop over the positives (run up to
  ``--official-max-logits``).

A repository that is not given leaves its rows out. Time: every row warmed up on a small problem, then the
rows of one case take turns in one process (so that a change of the machine's load hits all alike), the
median of ``--repeats`` runs. ``ours vs`` is the row's time over ours. ``one pass``: the time of copying the
logits into an allocated tensor (one read and one write of M floats), the floor of anything that reads them.
Memory: one run of each row in a fresh process, the peak above what the process held before (resident memory
with Linux's peak reset after the inputs are built; the allocator's peak on CUDA), the logits' gradient
included, per logit. Gradient: the largest difference of the row's logit gradient from ours, relative to the
largest of ours.

The inputs imitate the start of training, the expensive case: logits near the prior-probability
initialisation (so nearly every negative is relevant), positives slightly above, 5% of the entries ignored,
random localisation errors.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

import torch
from torch import Tensor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from alrp_d2 import losses as our_losses  # noqa: E402  (imported before any memory is measured)
from benchmarks.reference_losses import label_form, load_previous, load_reference  # noqa: E402

CASES = ["1000000:500", "4000000:1500", "20000000:1500"]
IMPLEMENTATIONS = ("ours", "previous", "BRL", "official")
DELTA = 1.0

#: ``run(logits, labels, errors) -> (outputs, gradient of the logits)`` of one row.
Run = Callable[[Tensor, Tensor, Tensor], Tuple[List[Tensor], Tensor]]


def make_inputs(num_logits: int, num_positives: int, device: str, seed: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_logits, generator=gen) * 0.5 - 4.6
    labels = torch.zeros(num_logits, dtype=torch.long)
    labels[torch.randperm(num_logits, generator=gen)[: num_logits // 20]] = -1
    positives = torch.randperm(num_logits, generator=gen)[:num_positives]
    labels[positives] = 1
    logits[positives] += 0.5
    errors = torch.rand(num_positives, generator=gen)
    return logits.to(device), labels.to(device), errors.to(device)


def synchronise(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def max_relative_difference(actual: Tensor, expected: Tensor) -> float:
    scale = expected.abs().max().clamp_min(1e-300)
    return ((actual - expected).abs().max() / scale).item()


def memory_status() -> Dict[str, int]:
    """This process's resident memory (VmRSS) and its peak (VmHWM) in bytes (Linux)."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if line.startswith("Vm"))
    return {name: int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmHWM")}


def reset_peak_rss() -> int:
    """Resets the peak resident memory to the current one (Linux ``clear_refs``) and returns it."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return memory_status()["VmRSS"]


def load_average() -> str:
    return " ".join(f"{load:.1f}" for load in os.getloadavg())


def set_threads() -> None:
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))


def in_fresh_process(target: Callable, *args):
    """``target(*args, queue)`` in a spawned process; what it puts on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    if process.exitcode:
        raise RuntimeError(f"{target.__name__}{args[:2]} failed (exit code {process.exitcode})")
    return result


def peak_memory(run: Callable[[], Tensor], device: str) -> Tuple[int, Tensor]:
    """The peak memory of one ``run()`` above what the process held before, and what it returned."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = reset_peak_rss()
    result = run()
    synchronise(device)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else memory_status()["VmHWM"]
    return peak - base, result


def median_times(runs: Dict[str, Callable[[], object]], repeats: int, device: str) -> Dict[str, float]:
    """The median time of every run, the runs taking turns, after one warm-up round."""
    times: Dict[str, List[float]] = {name: [] for name in runs}
    for round_ in range(repeats + 1):
        for name, run in runs.items():
            synchronise(device)
            start = time.perf_counter()
            run()
            synchronise(device)
            if round_:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def one_pass(logits: Tensor) -> Callable[[], Tensor]:
    """A copy of the logits into an allocated tensor: one read and one write of every logit."""
    out = torch.empty_like(logits)
    return lambda: out.copy_(logits)


def _loss_function(loss: str, implementation: str, repo: Optional[str], device: str) -> Callable:
    if implementation in ("ours", "previous"):
        losses = our_losses if implementation == "ours" else load_previous(cast(str, repo))
        call = label_form(losses, loss)
        if loss == "alrp":
            return lambda logits, labels, errors: call(logits, labels, errors, delta=DELTA)[:2]
        return lambda logits, labels, errors: call(logits, labels, delta=DELTA, eps=None, interpolated=True)[:1]
    assert repo is not None
    if implementation == "BRL":
        brl = load_reference("ap", "BRL", repo, device)
        return lambda logits, labels, errors: brl(logits, labels, DELTA)
    official = load_reference(loss, "official", repo, device)
    if loss == "alrp":
        return lambda logits, labels, errors: official(logits, labels, errors, DELTA)
    return lambda logits, labels, errors: official(logits, labels, DELTA)


def runner(loss: str, implementation: str, repo: Optional[str], device: str) -> Run:
    """Forward and backward of one row, warmed up on a small problem."""
    function = _loss_function(loss, implementation, repo, device)

    def run(logits: Tensor, labels: Tensor, errors: Tensor) -> Tuple[List[Tensor], Tensor]:
        leaf = logits.clone().requires_grad_(True)
        errors = errors.clone().requires_grad_(True)
        outputs = function(leaf, labels, errors)
        sum(outputs).backward()
        synchronise(device)
        return [output.detach() for output in outputs], leaf.grad

    run(*make_inputs(10_000, 10, device))
    return run


def _memory(loss, implementation, repo, case, device, queue) -> None:
    set_threads()
    inputs = make_inputs(*case, device)
    run = runner(loss, implementation, repo, device)
    peak, (_, grad) = peak_memory(lambda: run(*inputs), device)
    queue.put((peak, grad.double().cpu().numpy()))  # numpy: a tensor would be shared with the exiting process


def _times(rows, repos, case, device, repeats, queue) -> None:
    set_threads()
    inputs = make_inputs(*case, device)
    runs: Dict[str, Callable[[], object]] = {"one pass": one_pass(inputs[0])}
    for loss, implementation in rows:
        run = runner(loss, implementation, repos[implementation], device)
        runs[f"{loss} {implementation}"] = lambda run=run: run(*inputs)
    queue.put(median_times(runs, repeats, device))


def parse_cases(cases: Sequence[str]) -> List[Tuple[int, int]]:
    return [(int(m), int(p)) for m, p in (case.split(":") for case in cases)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--previous-repo", help="another checkout of this project (e.g. git archive main | tar -x)")
    parser.add_argument("--brl-repo", help="a clone of blisgard/BucketedRankingBasedLosses")
    parser.add_argument("--official-repo", help="a clone of kemaloksuz/aLRPLoss")
    parser.add_argument("--official-max-logits", type=int, default=1_000_000, help="the official loops' largest case")
    parser.add_argument("--losses", nargs="+", default=["alrp", "ap"], choices=["alrp", "ap"])
    parser.add_argument("--cases", nargs="+", default=CASES, help="M:P, the numbers of logits and positives")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each row (median reported)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device")
    repos: Dict[str, Optional[str]] = {
        "ours": ROOT,
        "previous": args.previous_repo,
        "BRL": args.brl_repo,
        "official": args.official_repo,
    }
    threads = os.environ.get("BENCH_THREADS", torch.get_num_threads())
    print(f"device: {args.device}, torch {torch.__version__}, threads {threads}, load average {load_average()}")
    header = (
        "| loss | M | P | implementation | time (s) | its time / ours | peak memory (MB) | bytes per logit | "
        "gradient vs ours |"
    )
    print(header)
    print("|---|---|---|---|---|---|---|---|---|")
    for case in parse_cases(args.cases):
        rows = [
            (loss, implementation)
            for loss in args.losses
            for implementation in IMPLEMENTATIONS
            if repos[implementation] is not None
            and not (loss == "alrp" and implementation == "BRL")
            and not (implementation == "official" and case[0] > args.official_max_logits)
        ]
        memory = {row: in_fresh_process(_memory, *row, repos[row[1]], case, args.device) for row in rows}
        times = in_fresh_process(_times, rows, repos, case, args.device, args.repeats)
        for loss, implementation in rows:
            peak, grad = memory[(loss, implementation)]
            ours_time = times[f"{loss} ours"]
            row_time = times[f"{loss} {implementation}"]
            difference = max_relative_difference(torch.from_numpy(grad), torch.from_numpy(memory[(loss, "ours")][1]))
            print(
                f"| {loss} | {case[0]:,} | {case[1]} | {implementation} | {row_time:.3f} | "
                f"{row_time / ours_time:.1f}x | {peak / 2**20:.0f} | {peak / case[0]:.1f} | {difference:.1e} |"
            )
            if loss == "ap" and implementation == "BRL" and "alrp" in args.losses:
                print(
                    f"| alrp | {case[0]:,} | {case[1]} | BRL (its AP Loss) | {row_time:.3f} | "
                    f"{row_time / times['alrp ours']:.1f}x | {peak / 2**20:.0f} | {peak / case[0]:.1f} | |"
                )
        print(f"| one pass (copy of the logits) | {case[0]:,} | | | {times['one pass']:.4f} | | | | |")
    print(f"load average at the end: {load_average()} (other processes on the machine slow every row)")


if __name__ == "__main__":
    main()
