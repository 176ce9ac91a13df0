"""Operations one forward and backward of each ranking loss dispatches: on an accelerator each is a kernel launch.

    python benchmarks/op_count.py                       # the accelerator path at 32,768 logits, P = 500 / 1,500 / 4,096
    python benchmarks/op_count.py --path scan           # the CPU's path (labelled)
    python benchmarks/op_count.py --cases 4000000:1500 --by-operation
    python benchmarks/op_count.py --previous-repo /tmp/previous   # another checkout's losses (labelled), as they run
    python benchmarks/op_count.py --detr-sets 1 5 13 --cases        # only the DETR step rows

Prints one line per case, ``<loss> P=<P> ops=<n>`` (loss in alrp, ap, rank_sort), for the path chosen by ``--path``
(``dense``, the path a CUDA device takes, by default; see :mod:`alrp_d2.losses.ranking_path`), passed to the losses on
whatever ``--device`` runs them, so that a CPU counts what a GPU would launch. The counter (:class:`OperationCounter`)
sees every aten operation dispatched inside it, forward and backward, except views (``view``, ``reshape`` of a
contiguous tensor, slicing, ...) and allocations without a kernel (``empty``, ``empty_strided``, ``empty_like``), which
launch nothing. The inputs are those of ``benchmarks/loss_speed.py`` and ``benchmarks/rank_sort_speed.py``
(start-of-training logits, 5 % ignored) as the detection heads give them (one ``RankingSet``): aLRP Loss with delta 1,
AP Loss interpolated as the official one, Rank & Sort Loss with delta 0.5. ``tests/test_ranking_path.py`` asserts the
bounds of the dense path with this counter. ``--previous-repo`` counts the losses of another checkout of this project
(``git archive REV | tar -x -C DIR``), loaded under another name (``benchmarks/reference_losses.load_previous``), on
whatever path it takes on ``--device``.

``detr_step sets=<S> ops=<n> loss=<loss>``: one DETR training step's ranking loss over S sets in one call
(``alrp_d2.losses.*_loss`` of S ``RankingSet`` with ``path="dense"``, the segmented ranking, which every device but the
CPU takes): sets of 4 images x 300 queries x 80 classes with 32 positives, every third a denoising set of 4 x 200
queries with 160 positives (``--detr-sets``, 13 by default, as D-FINE's). The count should not depend on S.

``detr_adapter sets=<S> ops=<n> loss=<loss> path=<path>``: the same step through the DETR adapter,
``SetRankingLoss.forward`` with its set-prediction criterion and value-balanced box terms (what
``use_ranking_loss`` runs after the matching): every set's matched pairs validated, its box terms and positives, then
one ranking call for all sets. The criterion takes the path of ``--device`` (``scan`` on the CPU, ``dense`` elsewhere);
the per-set work makes this count grow with S.
"""

from __future__ import annotations

import argparse
import os
import sys
import types
from collections import Counter
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from alrp_d2 import losses as our_losses  # noqa: E402
from alrp_d2.detr import MatchedSet, SetRankingLoss, set_prediction_criterion  # noqa: E402
from alrp_d2.losses.ranking_path import PATHS  # noqa: E402
from benchmarks.reference_losses import index_form, load_previous  # noqa: E402

aten = torch.ops.aten

#: Allocations that launch no kernel.
EMPTY_ALLOCATIONS = {
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
}
LOSSES = ("alrp", "ap", "rank_sort")
CASES = ["32768:500", "32768:1500", "32768:4096"]


class OperationCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it (forward and backward), views and empty allocations aside."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func not in EMPTY_ALLOCATIONS:
            self.counts[func] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def make_case(num_logits: int, num_positives: int, device: str, seed: int = 0) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(logits, positive_index, positive targets in (0, 1], valid): the benchmarks' start-of-training inputs."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_logits, generator=gen) * 0.5 - 4.6
    valid = torch.ones(num_logits, dtype=torch.bool)
    valid[torch.randperm(num_logits, generator=gen)[: num_logits // 20]] = False
    positives = torch.randperm(num_logits, generator=gen)[:num_positives]
    valid[positives] = True
    logits[positives] += 0.5
    targets = 1.0 - torch.rand(num_positives, generator=gen)
    return logits.to(device), positives.to(device), targets.to(device), valid.to(device)


def loss_call(
    loss: str,
    logits: Tensor,
    positives: Tensor,
    targets: Tensor,
    valid: Tensor,
    losses: types.ModuleType = our_losses,
    path: Optional[str] = None,
) -> Callable[[], None]:
    """One forward and backward of ``loss`` of the package ``losses`` (its classification / ranking component
    drives the logits) on ``path`` (None: the losses' default, by device)."""
    options = {} if path is None else {"path": path}

    call = index_form(losses, loss)

    def run() -> None:
        leaf = logits.detach().requires_grad_(True)
        if loss == "alrp":
            errors = targets.detach().requires_grad_(True)
            loss_cls, loss_loc, *_ = call(leaf, positives, errors, valid, delta=1.0, **options)
            (loss_cls + loss_loc).backward()
        elif loss == "ap":
            call(leaf, positives, None, valid, eps=None, interpolated=True, **options)[0].backward()
        else:
            ranking_loss, sorting_loss, *_ = call(leaf, positives, targets, valid, delta=0.5, **options)
            (ranking_loss + sorting_loss).backward()

    return run


def count_operations(
    loss: str, num_logits: int, num_positives: int, path: Optional[str], device: str = "cpu", previous: str = ""
) -> OperationCounter:
    """The operations of one forward and backward of ``loss`` on ``path`` (None: by device) after one uncounted
    warm-up call; ``previous``: the checkout whose losses to count (``""``: this one's)."""
    losses = load_previous(previous) if previous else our_losses
    run = loss_call(loss, *make_case(num_logits, num_positives, device), losses=losses, path=path)
    run()
    with OperationCounter() as counter:
        run()
    return counter


def detr_sets(num_sets: int, device: str, seed: int = 0) -> List[our_losses.RankingSet]:
    """The sets of one DETR step (module docstring): start-of-training logits, IoU targets."""
    gen = torch.Generator().manual_seed(seed)
    sets = []
    for index in range(num_sets):
        queries, num_positives = (200, 160) if index % 3 == 2 else (300, 32)
        logits = torch.randn(4, queries, 80, generator=gen) * 0.5 - 4.6
        positives = torch.randperm(logits.numel(), generator=gen)[:num_positives]
        logits.view(-1)[positives] += 0.5
        targets = 1.0 - torch.rand(num_positives, generator=gen)
        sets.append(our_losses.RankingSet(logits.to(device), positives.to(device), targets.to(device)))
    return sets


def count_detr_step(loss: str, num_sets: int, device: str = "cpu") -> OperationCounter:
    """The operations of one forward and backward of ``loss`` over the ``num_sets`` sets of :func:`detr_sets` in
    one call (the sum of the sets' losses), after one uncounted warm-up call."""
    sets = detr_sets(num_sets, device)

    def run() -> None:
        leaves = [ranking_set._replace(logits=ranking_set.logits.detach().requires_grad_(True)) for ranking_set in sets]
        if loss == "alrp":
            errors = [ranking_set.positive_values.detach().requires_grad_(True) for ranking_set in leaves]
            with_errors = [ranking_set._replace(positive_values=error) for ranking_set, error in zip(leaves, errors)]
            terms = our_losses.alrp_loss(with_errors, delta=1.0, path="dense")
            (terms.loss_cls + terms.loss_loc).sum().backward()
        elif loss == "ap":
            our_losses.ap_loss(leaves, eps=None, interpolated=True, path="dense").loss.sum().backward()
        else:
            rank_sort = our_losses.rank_sort_loss(leaves, delta=0.5, path="dense")
            (rank_sort.ranking_loss + rank_sort.sorting_loss).sum().backward()

    run()
    with OperationCounter() as counter:
        run()
    return counter


def detr_adapter_inputs(num_sets: int, device: str) -> Tuple[List[MatchedSet], List[Dict[str, Tensor]]]:
    """The sets of :func:`detr_sets` as the adapter takes them: 8 targets an image, each layer set matched to them
    by a random one-to-one matching, every denoising set by 5 groups of 40 queries (their first 8 matched)."""
    gen = torch.Generator().manual_seed(1)
    centres, sizes = torch.rand(4, 8, 2, generator=gen) * 0.6 + 0.2, torch.rand(4, 8, 2, generator=gen) * 0.3 + 0.05
    targets = [
        {"class_labels": torch.randint(0, 80, (8,), generator=gen), "boxes": b} for b in torch.cat([centres, sizes], 2)
    ]
    matched = []
    for ranking_set in detr_sets(num_sets, "cpu"):
        queries = ranking_set.logits.shape[1]
        if queries == 200:
            indices = [(torch.cat([group * 40 + torch.arange(8) for group in range(5)]), torch.arange(8).repeat(5))] * 4
        else:
            indices = [(torch.randperm(queries, generator=gen)[:8], torch.arange(8)) for _ in range(4)]
        boxes = torch.rand(4, queries, 4, generator=gen) * 0.3 + 0.2
        for image, (query, target) in enumerate(indices):
            boxes[image, query] = targets[image]["boxes"][target] + 0.01
        matched.append(MatchedSet(ranking_set.logits.to(device), boxes.to(device), indices))
    return matched, [{key: value.to(device) for key, value in target.items()} for target in targets]


def count_detr_adapter(loss: str, num_sets: int, device: str = "cpu") -> OperationCounter:
    """The operations of one forward and backward of :meth:`SetRankingLoss.forward` of ``loss``'s criterion
    over the sets of :func:`detr_adapter_inputs`, after one uncounted warm-up call."""
    criterion = {"alrp": "AlrpCriterion", "ap": "InterpolatedAPCriterion", "rank_sort": "RankSortCriterion"}[loss]
    set_loss = SetRankingLoss(set_prediction_criterion(criterion))
    sets, targets = detr_adapter_inputs(num_sets, device)

    def run() -> None:
        leaves = [
            s._replace(
                logits=s.logits.detach().requires_grad_(True), pred_boxes=s.pred_boxes.detach().requires_grad_(True)
            )
            for s in sets
        ]
        terms = set_loss(leaves, targets)
        torch.stack([value for set_terms in terms for value in set_terms.values()]).sum().backward()

    run()
    with OperationCounter() as counter:
        run()
    return counter


def parse_cases(cases: List[str]) -> List[Tuple[int, int]]:
    return [(int(m), int(p)) for m, p in (case.split(":") for case in cases)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="dense", choices=PATHS[1:], help="the ranking path counted")
    parser.add_argument("--device", default="cpu", help="where the losses run (the count does not depend on it)")
    parser.add_argument("--losses", nargs="+", default=list(LOSSES), choices=LOSSES)
    parser.add_argument("--cases", nargs="*", default=CASES, help="M:P, the numbers of logits and positives")
    parser.add_argument("--by-operation", action="store_true", help="also print the count of every operation")
    parser.add_argument("--previous-repo", default="", help="count another checkout's losses, on their own path")
    parser.add_argument("--detr-sets", nargs="*", type=int, default=[13], help="S of the DETR step rows")
    args = parser.parse_args()
    path = None if args.previous_repo else args.path
    label = " previous" if args.previous_repo else "" if args.path == "dense" else f" path={args.path}"
    for num_logits, num_positives in parse_cases(args.cases):
        for loss in args.losses:
            counter = count_operations(loss, num_logits, num_positives, path, args.device, args.previous_repo)
            size = "" if num_logits == 32768 else f" M={num_logits}"
            print(f"{loss} P={num_positives} ops={counter.total}{label}{size}")
            print_by_operation(counter, args.by_operation)
    for num_sets in [] if args.previous_repo else args.detr_sets:
        for loss in args.losses:
            counter = count_detr_step(loss, num_sets, args.device)
            print(f"detr_step sets={num_sets} ops={counter.total} loss={loss}")
            print_by_operation(counter, args.by_operation)
    adapter_path = "scan" if torch.device(args.device).type == "cpu" else "dense"
    for num_sets in [] if args.previous_repo else args.detr_sets:
        for loss in args.losses:
            counter = count_detr_adapter(loss, num_sets, args.device)
            print(f"detr_adapter sets={num_sets} ops={counter.total} loss={loss} path={adapter_path}")
            print_by_operation(counter, args.by_operation)


def print_by_operation(counter: OperationCounter, wanted: bool) -> None:
    if wanted:
        by_name: Dict[str, int] = Counter()
        for func, count in counter.counts.items():
            by_name[str(func)] += count
        print("   ", ", ".join(f"{name} {count}" for name, count in by_name.most_common()))


if __name__ == "__main__":
    main()
