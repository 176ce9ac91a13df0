"""Speed, memory and agreement of the fast aLRP Loss against the loop transcription of App. E.

Both run on the same inputs in one invocation. Each measurement runs in a fresh process so
that its peak memory can be read (RSS on the CPU, the allocator's peak on CUDA).

    python benchmarks/loss_speed.py                 # CPU: M = 1M / P = 500 and M = 4M / P = 1500
    python benchmarks/loss_speed.py --device cuda   # adds COCO scale: 8 x 32,736 x 80 logits, P = 1500

The inputs imitate the start of training, the expensive case for both implementations:
logits near the prior-probability initialisation (so nearly every negative is relevant),
positives slightly above, 5 % of the entries ignored and random localisation errors.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from typing import Dict, List, Tuple

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from alrp_d2.losses import alrp_loss  # noqa: E402  (imported before any memory is measured)
from tests.loop_reference import alrp_loss_loop  # noqa: E402

CPU_CASES = [(1_000_000, 500), (4_000_000, 1500)]
COCO_CASE = (8 * 32_736 * 80, 1500)
OUTPUT_NAMES = ("loss_cls", "loss_loc", "d/dlogits", "d/dE_loc")


def make_inputs(num_logits: int, num_positives: int, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_logits, generator=gen) * 0.5 - 4.6
    labels = torch.zeros(num_logits, dtype=torch.long)
    labels[torch.randperm(num_logits, generator=gen)[: num_logits // 20]] = -1
    positives = torch.randperm(num_logits, generator=gen)[:num_positives]
    labels[positives] = 1
    logits[positives] += 0.5
    errors = torch.rand(num_positives, generator=gen)
    return logits.to(device), labels.to(device), errors.to(device)


def _synchronise(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _run_fast(logits, labels, errors):
    logits = logits.clone().requires_grad_(True)
    errors = errors.clone().requires_grad_(True)
    loss_cls, loss_loc = alrp_loss(logits, labels, errors)
    (loss_cls + loss_loc).backward()
    return loss_cls.detach(), loss_loc.detach(), logits.grad, errors.grad


def _run_loop(logits, labels, errors):
    return alrp_loss_loop(logits, labels, errors)


def _measure(method: str, num_logits: int, num_positives: int, device: str, repeats: int, queue) -> None:
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    inputs = make_inputs(num_logits, num_positives, device)
    run = _run_fast if method == "fast" else _run_loop
    times: List[float] = []
    if device == "cuda":
        run(*inputs)  # warm-up: kernels, allocator
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for _ in range(repeats):
        _synchronise(device)
        start = time.perf_counter()
        outputs = run(*inputs)
        _synchronise(device)
        times.append(time.perf_counter() - start)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    queue.put((statistics.median(times), peak, [t.double().cpu().numpy() for t in outputs]))


def measure(method: str, num_logits: int, num_positives: int, device: str, repeats: int):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=_measure, args=(method, num_logits, num_positives, device, repeats, queue))
    process.start()
    median_time, peak, outputs = queue.get()
    process.join()
    return median_time, peak, [torch.from_numpy(x) for x in outputs]


def max_relative_difference(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.abs().max().clamp_min(1e-300)
    return ((actual - expected).abs().max() / scale).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of the fast loss (median reported)")
    args = parser.parse_args()
    cases: List[Tuple[int, int]] = list(CPU_CASES)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda needs a CUDA device")
        cases.append(COCO_CASE)

    header = (
        f"{'M':>11} {'P':>5} | {'loop (s)':>9} {'fast (s)':>9} {'speed-up':>9} | {'loop mem':>9} {'fast mem':>9} | "
        "max rel. diff: " + " ".join(OUTPUT_NAMES)
    )
    print(f"device: {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(header)
    print("-" * len(header))
    for num_logits, num_positives in cases:
        loop_time, loop_mem, loop_out = measure("loop", num_logits, num_positives, args.device, 1)
        fast_time, fast_mem, fast_out = measure("fast", num_logits, num_positives, args.device, args.repeats)
        diffs: Dict[str, float] = {
            name: max_relative_difference(a, b) for name, a, b in zip(OUTPUT_NAMES, fast_out, loop_out)
        }
        print(
            f"{num_logits:>11,} {num_positives:>5} | {loop_time:>9.3f} {fast_time:>9.4f} "
            f"{loop_time / fast_time:>8.1f}x | {loop_mem / 2**20:>7.0f}MB {fast_mem / 2**20:>7.0f}MB | "
            + "  ".join(f"{diffs[name]:.1e}" for name in OUTPUT_NAMES)
        )


if __name__ == "__main__":
    main()
