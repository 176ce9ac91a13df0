"""Peak extra memory of aLRP Loss, forward and backward, per logit.

The inputs imitate the start of training at COCO scale, the expensive case: (anchors, classes)
logits near the prior-probability initialisation (so nearly every negative is relevant), 5% of
the anchors ignored, P positives slightly above. Each measurement runs in a fresh process; the
peak is the resident memory's high-water mark during the loss minus the resident memory with
the inputs in place (the logits' gradient, an output, counts).

On the CPU, glibc keeps freed blocks of up to 32 MB for reuse, so the high-water mark also counts
memory that the loss no longer holds. ``--allocator live`` (the default) fixes glibc's mmap
threshold (``MALLOC_MMAP_THRESHOLD_=65536``) so that every large block is returned when freed and
the high-water mark is the largest memory the loss held at once (what CUDA's
``max_memory_allocated`` reports); ``--allocator glibc`` keeps glibc's defaults.

    python benchmarks/loss_memory.py                         # 20M logits, both APIs
    python benchmarks/loss_memory.py --logits 4000000 --api labels
    python benchmarks/loss_memory.py --device cuda           # the allocator's peak on the GPU

``--api labels`` is ``alrp_loss([LabelledSet(logits, labels, loc_errors)])`` with (M,) +1/0/-1 labels,
``--api indexed`` is ``alrp_loss([RankingSet(logits, positive_index, loc_errors, valid)])`` with a
per-anchor validity mask, as the detection heads call it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from typing import Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 80
NUM_POSITIVES = 1500


def _resident(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _measure(num_logits: int, api: str, device: str) -> Dict[str, float]:
    """Runs in the child process: builds the inputs, runs the loss once to warm up, then measures."""
    import torch

    sys.path.insert(0, ROOT)
    from alrp_d2 import losses

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    gen = torch.Generator().manual_seed(0)
    anchors = num_logits // NUM_CLASSES
    logits = torch.randn(anchors, NUM_CLASSES, generator=gen) * 0.5 - 4.6
    valid = torch.ones(anchors, 1, dtype=torch.bool)
    valid[torch.randperm(anchors, generator=gen)[: anchors // 20]] = False
    positives = torch.randperm(anchors * NUM_CLASSES, generator=gen)[:NUM_POSITIVES]
    valid.view(-1)[positives // NUM_CLASSES] = True
    logits.view(-1)[positives] += 0.5
    errors = torch.rand(NUM_POSITIVES, generator=gen)
    if api == "labels":
        labels = torch.where(valid, 0, -1).to(torch.int8).expand(anchors, NUM_CLASSES).contiguous().view(-1)
        labels[positives] = 1
        positives = torch.nonzero(labels == 1).squeeze(1)  # a labelled set's order of the positives
        errors = errors[: len(positives)]
    logits, valid, positives, errors = (t.to(device) for t in (logits, valid, positives, errors))
    if api == "labels":
        labels = labels.to(device)
        logits = logits.view(-1).contiguous()

    logits.requires_grad_(True)

    def step() -> None:
        loc = errors.clone().requires_grad_(True)
        if api == "labels":
            terms = losses.alrp_loss([losses.LabelledSet(logits, labels, loc)])
        else:
            terms = losses.alrp_loss([losses.RankingSet(logits, positives, loc, valid)])
        (terms.loss_cls + terms.loss_loc).backward()

    step()  # warm-up
    logits.grad = None
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        base = _resident("VmRSS")
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets the high-water mark
        step()
        peak = _resident("VmHWM") - base
    return {"logits": logits.numel(), "peak_bytes": peak, "bytes_per_logit": peak / logits.numel()}


def measure(num_logits: int, api: str, device: str, allocator: str) -> Dict[str, float]:
    """One measurement in a fresh process."""
    env = dict(os.environ)
    if allocator == "live":
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    command = [sys.executable, os.path.abspath(__file__), "--child", str(num_logits), api, device]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logits", type=int, default=20_000_000, help="M, rounded down to a multiple of 80")
    parser.add_argument("--api", choices=["labels", "indexed", "both"], default="both")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--allocator", choices=["live", "glibc"], default="live", help="CPU only; see above")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        num_logits, api, device = args.child
        print(json.dumps(_measure(int(num_logits), api, device)))
        return
    apis = ["labels", "indexed"] if args.api == "both" else [args.api]
    print(f"| API | logits | P | peak extra memory | bytes per logit | ({args.device}, allocator {args.allocator}) |")
    print("|---|---|---|---|---|---|")
    for api in apis:
        result = measure(args.logits, api, args.device, args.allocator)
        print(
            f"| {api} | {result['logits']:,} | {NUM_POSITIVES} | {result['peak_bytes'] / 2**20:.0f} MB | "
            f"{result['bytes_per_logit']:.1f} | |"
        )


if __name__ == "__main__":
    main()
