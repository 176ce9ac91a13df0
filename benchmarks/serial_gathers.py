"""Time of the small gathers the losses make per positive, on an idle machine and with its cores busy.

    BENCH_THREADS=2 python benchmarks/serial_gathers.py              # the machine as it is
    BENCH_THREADS=2 python benchmarks/serial_gathers.py --busy 3     # plus 3 processes that keep a core busy each

Every row gathers ``--entries`` values from a float64 table of 8,192 rows, as the sorting relations of Rank & Sort
Loss do at 1,500 positives (3 cuts each), or searches as many sorted values among 3,000 sorted edges. On the CPU,
advanced indexing (``table[index]``), ``gather`` and ``searchsorted`` split such sizes over the intra-op threads and
wait for each of them; ``index_select`` (``alrp_d2.losses.serial_indexing.take_rows``) runs them on the calling
thread. Time: per call, the median of ``--repeats`` rounds of ``--calls`` calls, the rows taking turns.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
from typing import Callable, Dict

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from alrp_d2.losses.serial_indexing import take_rows  # noqa: E402
from benchmarks.loss_speed import load_average, median_times, set_threads  # noqa: E402


def keep_busy(stop) -> None:
    """Spins until ``stop`` is set: one core's worth of load."""
    while not stop.is_set():
        pass


def rows(entries: int) -> Dict[str, Callable[[], object]]:
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(8192, generator=gen, dtype=torch.float64)
    index = torch.randint(0, 8192, (entries,), generator=gen)
    edges = torch.sort(torch.randn(3000, generator=gen, dtype=torch.float64)).values
    queries = torch.randn(entries, generator=gen, dtype=torch.float64)
    return {
        "advanced indexing, table[index]": lambda: table[index],
        "take": lambda: torch.take(table, index),
        "gather": lambda: torch.gather(table, 0, index),
        "index_select (take_rows)": lambda: take_rows(table, index),
        "searchsorted among 3,000 edges": lambda: torch.searchsorted(edges, queries),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", type=int, default=0, help="processes started to keep one core busy each")
    parser.add_argument("--entries", type=int, default=4500, help="entries gathered or searched per call")
    parser.add_argument("--calls", type=int, default=200, help="calls per timed round")
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds (median reported)")
    args = parser.parse_args()
    set_threads()
    ctx = mp.get_context("fork")  # the busy loops need no fresh interpreter
    stop = ctx.Event()
    busy = [ctx.Process(target=keep_busy, args=(stop,), daemon=True) for _ in range(args.busy)]
    for process in busy:
        process.start()
    try:
        runs = {name: (lambda op=op: [op() for _ in range(args.calls)]) for name, op in rows(args.entries).items()}
        times = median_times(runs, args.repeats, "cpu")
    finally:
        stop.set()
        for process in busy:
            process.join()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.busy} busy processes, "
        f"{args.entries} entries, load average {load_average()}"
    )
    print("| operation | time per call (us) |")
    print("|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds / args.calls * 1e6:.1f} |")


if __name__ == "__main__":
    main()
