"""Every figure a GPU should add to docs/performance.md, in one command, written as one markdown report.

    python benchmarks/gpu_report.py --official-repo PATH/aLRPLoss --ranksort-repo PATH/RankSortLoss \\
        --brl-repo PATH/BucketedRankingBasedLosses --output gpu_report.md
    python benchmarks/gpu_report.py --device cpu --quick --output report.md   # small sizes, minutes on a CPU

Sections:

1. **Exactness**: aLRP Loss, AP Loss, the interpolated AP Loss and Rank & Sort Loss on ``--device`` in
   float32 against float64 on the CPU (the values and every gradient element, largest relative
   difference).
2. **Loss speed** at COCO scale (8 x 32,736 anchors x 80 classes, 1,500 positives, start-of-training
   scores): forward and backward of ours against the official loops and BRL's bucketed AP Loss and
   Rank & Sort Loss, the same inputs, the rows taking turns (median time), and the largest gradient
   difference from ours.
3. **Training iteration**: aLRP RetinaNet against detectron2's focal-loss RetinaNet and aLRP Faster
   R-CNN and RS R-CNN against detectron2's (R50-FPN, ``--batch`` images of 512 x 512; ``benchmarks/train_iter.py``).
4. **Host synchronisations** per training step of every detector (``tests/d2/test_host_syncs.py``).
5. **Peak memory** of aLRP Loss at 20M logits (``benchmarks/loss_memory.py``).

A reference implementation whose repository is not given is reported as not run. ``--quick`` shrinks
every size (it checks that the report still runs; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from types import SimpleNamespace
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from alrp_d2 import losses  # noqa: E402
from benchmarks import loss_memory, train_iter  # noqa: E402
from benchmarks.reference_losses import REFERENCES, label_form, load_reference  # noqa: E402
from tests.d2.test_host_syncs import DETECTORS, count_training_step  # noqa: E402

COCO_LOGITS = 8 * 32_736 * 80
NUM_POSITIVES = 1500

Table = List[List[str]]


def markdown(header: List[str], rows: Table) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def make_problem(num_logits: int, seed: int = 0, num_positives: int = NUM_POSITIVES) -> Tuple[Tensor, Tensor, Tensor]:
    """Start-of-training logits (M,), labels with 5% ignored and P positives (at most M / 10), E_loc of the
    positives."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_logits, generator=gen) * 0.5 - 4.6
    labels = torch.zeros(num_logits, dtype=torch.long)
    labels[torch.randperm(num_logits, generator=gen)[: num_logits // 20]] = -1
    positives = torch.randperm(num_logits, generator=gen)[: min(num_positives, num_logits // 10)]
    labels[positives] = 1
    logits[positives] += 0.5
    return logits, labels, torch.rand(len(positives), generator=gen)


def synchronise(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


Loss = Callable[[Tensor, Tensor, Tensor], Tuple[Tensor, ...]]


def run_loss(loss: Loss, logits: Tensor, labels: Tensor, errors: Tensor) -> Tuple[List[Tensor], Tensor]:
    """Forward and backward of ``loss``; its outputs (detached) and the logits' gradient."""
    leaf = logits.clone().requires_grad_(True)
    errors = errors.clone().requires_grad_(True)
    outputs = loss(leaf, labels, errors)
    sum(outputs).backward()
    return [output.detach() for output in outputs], leaf.grad


def rank_sort_targets(labels: Tensor, errors: Tensor) -> Tensor:
    """RS Loss's continuous labels for a problem: 1 - E_loc / 2 (in (0.5, 1]) for the positives, 0
    for the negatives, -1 for the ignored entries."""
    targets = labels.to(errors.dtype).clamp(max=0)
    targets[labels == 1] = 1.0 - errors.detach() / 2
    return targets


def our_losses() -> Dict[str, Loss]:
    alrp, ap, rank_sort = (label_form(losses, loss) for loss in ("alrp", "ap", "rank_sort"))
    return {
        "aLRP Loss": lambda logits, labels, errors: alrp(logits, labels, errors)[:2],
        "AP Loss": lambda logits, labels, errors: ap(logits, labels)[:1],
        "interpolated AP Loss": lambda logits, labels, errors: ap(logits, labels, eps=None, interpolated=True)[:1],
        "Rank & Sort Loss": lambda logits, labels, errors: rank_sort(logits, rank_sort_targets(labels, errors))[:2],
    }


def relative(actual: Tensor, expected: Tensor) -> float:
    actual, expected = actual.double().cpu(), expected.double().cpu()
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-300)).item()


def exactness(device: str, num_logits: int) -> str:
    logits, labels, errors = make_problem(num_logits, seed=1)
    rows = []
    for name, loss in our_losses().items():
        expected, expected_grad = run_loss(loss, logits.double(), labels, errors.double())
        outputs, grad = run_loss(loss, logits.to(device), labels.to(device), errors.to(device))
        value_error = max(relative(a, b) for a, b in zip(outputs, expected))
        rows.append([name, f"{num_logits:,}", f"{value_error:.1e}", f"{relative(grad, expected_grad):.1e}"])
    return markdown(["loss", "logits", f"values, {device} float32 vs CPU float64", "logit gradients"], rows)


def reference_rows(args: argparse.Namespace) -> List[Tuple[str, str, Loss]]:
    """(loss, implementation, function) of every reference whose repository is given."""
    rows: List[Tuple[str, str, Loss]] = []
    for loss, implementation in REFERENCES:
        repo = reference_repository(args, loss, implementation)
        if repo is None:
            continue
        reference = load_reference(loss, implementation, repo, args.device)
        if loss == "alrp":
            rows.append(("aLRP Loss", implementation, lambda x, y, e, f=reference: f(x, y, e, 1.0)))
        elif loss == "rank_sort":
            rows.append(
                ("Rank & Sort Loss", implementation, lambda x, y, e, f=reference: f(x, rank_sort_targets(y, e), 0.5))
            )
        else:  # the official AP Loss interpolates the precision, BRL's bucketed one does not
            name = "interpolated AP Loss" if implementation == "official" else "AP Loss"
            rows.append((name, implementation, lambda x, y, e, f=reference: f(x, y, 1.0)))
    return rows


def reference_repository(args: argparse.Namespace, loss: str, implementation: str) -> Optional[str]:
    """The checkout given for a reference implementation (None: not given)."""
    if implementation == "BRL":
        return args.brl_repo
    return args.ranksort_repo if loss == "rank_sort" else args.official_repo


def loss_speed(args: argparse.Namespace, num_logits: int, num_positives: int) -> str:
    logits, labels, errors = (t.to(args.device) for t in make_problem(num_logits, num_positives=num_positives))
    ours = our_losses()
    candidates = [(name, "ours", loss) for name, loss in ours.items()] + reference_rows(args)
    small = [t.to(args.device) for t in make_problem(10_000, seed=2, num_positives=num_positives)]
    times: Dict[Tuple[str, str], List[float]] = {(name, impl): [] for name, impl, _ in candidates}
    grads: Dict[Tuple[str, str], Tensor] = {}
    for _, _, loss in candidates:
        run_loss(loss, *small)  # warm-up
    for _ in range(args.repeats):
        for name, impl, loss in candidates:
            synchronise(args.device)
            start = time.perf_counter()
            _, grad = run_loss(loss, logits, labels, errors)
            synchronise(args.device)
            times[(name, impl)].append(time.perf_counter() - start)
            grads[(name, impl)] = grad
    rows = []
    for name, impl, _ in candidates:
        median = statistics.median(times[(name, impl)])
        ours_median = statistics.median(times[(name, "ours")])
        difference = "-" if impl == "ours" else f"{relative(grads[(name, impl)], grads[(name, 'ours')]):.1e}"
        rows.append([name, impl, f"{median:.4f} s", f"{median / ours_median:.1f}x", difference])
    for loss, implementation in REFERENCES:
        if reference_repository(args, loss, implementation) is None:
            rows.append([loss, implementation, "not run (no repository given)", "-", "-"])
    problem = f"time, {num_logits:,} logits, {len(errors):,} positives"
    header = ["loss", "implementation", problem, "vs ours", "gradient vs ours"]
    return markdown(header, rows)


def training_iterations(args: argparse.Namespace) -> str:
    quick = args.quick
    settings = SimpleNamespace(
        device=args.device,
        tiny=quick,
        depth=18 if quick else 50,
        warmup=1 if quick else 2,
        iters=1 if quick else args.iters,
        batch=1 if quick else args.batch,
        size=128 if quick else 512,
        objects=3 if quick else 7,
    )
    rows = []
    for name in ("retinanet", "faster_rcnn", "rs_faster_rcnn"):
        alrp_time, baseline_time = train_iter.benchmark_pair(name, settings)
        rows.append([name, f"{alrp_time:.3f} s", f"{baseline_time:.3f} s", f"{alrp_time / baseline_time:.2f}x"])
    model = "tiny test models" if quick else f"R{settings.depth}-FPN"
    header = [f"{model}, {settings.batch} x {settings.size}^2", "ranking loss", "detectron2 baseline", "ratio"]
    return markdown(header, rows)


def host_syncs() -> str:
    rows = []
    for name, (make_cfg, heads) in DETECTORS.items():
        syncs = count_training_step(make_cfg())
        rows.append([name, str(heads), str(syncs.total("alrp_d2")), str(syncs.total("detectron2"))])
    return markdown(["detector (tiny, CPU count)", "ranking heads", "project code", "detectron2"], rows)


def peak_memory(args: argparse.Namespace, num_logits: int) -> str:
    rows = []
    for api in ("labels", "indexed"):
        result = loss_memory.measure(num_logits, api, args.device, "live")
        rows.append(
            [api, f"{result['logits']:,}", f"{result['peak_bytes'] / 2**20:.0f} MB", f"{result['bytes_per_logit']:.1f}"]
        )
    return markdown(["API", "logits", "peak extra memory", "bytes per logit"], rows)


def report(args: argparse.Namespace) -> Iterator[str]:
    """The report's title and sections, each computed when asked for."""
    quick = args.quick
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "CPU"
    yield f"# GPU report ({args.device}: {device_name}; torch {torch.__version__}{'; --quick' if quick else ''})"
    yield "## Exactness\n\n" + exactness(args.device, 20_000 if quick else 1_000_000)
    # --quick: few positives, as the official loops take one step per positive
    yield "## Loss speed\n\n" + loss_speed(args, 50_000 if quick else COCO_LOGITS, 100 if quick else NUM_POSITIVES)
    yield "## Training iteration\n\n" + training_iterations(args)
    yield "## Host synchronisations per training step\n\n" + host_syncs()
    yield "## Peak memory of aLRP Loss\n\n" + peak_memory(args, 400_000 if quick else 20_000_000)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--official-repo", help="a checkout of kemaloksuz/aLRPLoss")
    parser.add_argument("--ranksort-repo", help="a checkout of kemaloksuz/RankSortLoss")
    parser.add_argument("--brl-repo", help="a checkout of blisgard/BucketedRankingBasedLosses")
    parser.add_argument("--output", default="gpu_report.md")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the report runs")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each loss (median)")
    parser.add_argument("--batch", type=int, default=8, help="images per training iteration")
    parser.add_argument("--iters", type=int, default=8, help="timed training iterations (median)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device (--device cpu for a CPU run)")
    # Each section is written as soon as it is computed: a run stopped at a time limit keeps the finished ones.
    with open(args.output, "w") as f:
        for index, section in enumerate(report(args)):
            f.write(("\n\n" if index else "") + section)
            f.flush()
            print(section + "\n", flush=True)
        f.write("\n")


if __name__ == "__main__":
    main()
