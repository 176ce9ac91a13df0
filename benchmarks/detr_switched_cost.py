"""What switching a Hugging Face DETR to a ranking loss with its own box terms costs (docs/performance.md, "DETR: the
switched model against the stock one"): ``use_ranking_loss(model, RankSortCriterion(delta=0.5,
loc_error_kind="giou"), box_terms="model")`` against the stock model, on RT-DETR v2 R18 and D-FINE-S of
``benchmarks/hf_detr_models.py`` (300 queries, up to 100 denoising queries, 80 classes, random init).

    python benchmarks/detr_switched_cost.py                                   # this checkout
    git archive fd35013 | tar -x -C /tmp/previous                             # any other checkout of this project
    python benchmarks/detr_switched_cost.py --previous-repo /tmp/previous     # ... and that one's switched loss
    python benchmarks/detr_switched_cost.py --device cuda --scales 4:640 16:640      # on a GPU

Two rows a model and scale (``--scales`` images:px; 1 to 20 objects an image, seeded):

* ``loss fn``: the loss function alone, forward and backward, on the model's outputs of one forward pass captured
  as leaves (``hf_detr_models.loss_call``): HF's own (``own``) against the switched model's (``ours``, and
  ``previous`` with ``--previous-repo``: that checkout's ``alrp_d2`` loaded under another name);
* ``step``: a training step of the model (forward and backward, the denoising draws seeded alike), stock against
  switched, the models from the same random init.

Time: one warm-up round, then the variants take turns in one process (a change of the machine's load hits all
alike); the medians of ``--repeats`` rounds of the process's CPU time (on a machine shared with other work the
steadier figure) or, with ``--device cuda``, of the synchronised wall-clock time. Each ratio is a variant's median
over ``own``'s.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.hf_detr_models import MODELS, loss_call  # noqa: E402
from benchmarks.loss_speed import load_average, set_threads, synchronise  # noqa: E402

MAX_OBJECTS = 20
#: images:px of the steps (128 px: the smallest at which the encoder holds 300 queries' worth of tokens).
SCALES = ["4:128", "16:128"]
NUM_CLASSES = 80


def load_previous_package(repo: str) -> types.ModuleType:
    """The ``alrp_d2`` package of another checkout of this project, imported as ``previous_alrp_d2`` beside this
    checkout's (its imports are relative)."""
    name = "previous_alrp_d2"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(repo, "alrp_d2")
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(path, "__init__.py"), submodule_search_locations=[path]
    )
    if spec is None or spec.loader is None or not os.path.isfile(os.path.join(path, "detr", "hf_loss_function.py")):
        raise FileNotFoundError(
            f"{path} holds no alrp_d2 package with detr/: is --previous-repo a checkout of this project?"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def switch_functions(previous: Optional[types.ModuleType]) -> Dict[str, Callable[[Any], Any]]:
    """``use_ranking_loss(model, RankSortCriterion(delta=0.5, loc_error_kind="giou"), box_terms="model")`` of this
    checkout (``ours``) and of ``previous``."""
    from alrp_d2.criteria import RankSortCriterion
    from alrp_d2.detr import use_ranking_loss

    switches = {
        "ours": lambda model: use_ranking_loss(
            model, RankSortCriterion(delta=0.5, loc_error_kind="giou"), box_terms="model"
        )
    }
    if previous is not None:
        module = importlib.import_module("previous_alrp_d2.detr.hf_loss_function")
        criterion = importlib.import_module("previous_alrp_d2.criteria").RankSortCriterion
        switches["previous"] = lambda model: module.use_ranking_loss(
            model, criterion(delta=0.5, loc_error_kind="giou"), box_terms="model"
        )
    return switches


def make_targets(images: int, device: str, seed: int = 0) -> List[Dict[str, torch.Tensor]]:
    """1 to ``MAX_OBJECTS`` objects an image (HF's ``class_labels`` and normalised cx, cy, w, h ``boxes``)."""
    generator = torch.Generator().manual_seed(seed)
    targets = []
    for count in torch.randint(1, MAX_OBJECTS + 1, (images,), generator=generator).tolist():
        centres = torch.rand(count, 2, generator=generator) * 0.8 + 0.1
        sizes = torch.rand(count, 2, generator=generator) * 0.3 + 0.02
        labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
        targets.append({"class_labels": labels.to(device), "boxes": torch.cat([centres, sizes], 1).to(device)})
    return targets


def loss_runs(name: str, targets: List[Dict[str, torch.Tensor]], switches: Dict, size: int, device: str) -> Dict:
    """Forward and backward of the stock and the switched loss functions on one captured call of ``name`` (on
    ``size`` px images)."""
    model, arguments, keywords = loss_call(name, targets, size, device)
    functions = {"own": model.loss_function}
    for variant, switch in switches.items():
        functions[variant] = switch(model).loss_function
    leaves = [value for value in list(arguments) + list(keywords.values()) if isinstance(value, torch.Tensor)]

    def run(function: Callable) -> Callable[[], None]:
        def once() -> None:
            function(*arguments, **keywords)[0].backward()
            for leaf in leaves:
                leaf.grad = None

        return once

    return {variant: run(function) for variant, function in functions.items()}


def step_runs(name: str, targets: List[Dict[str, torch.Tensor]], switches: Dict, size: int, device: str) -> Dict:
    """A training step (forward and backward) of the stock model ``name`` and of its switched copies, one init."""
    pixels = torch.rand(len(targets), 3, size, size, generator=torch.Generator().manual_seed(1)).to(device)
    models = {}
    for variant in ["own", *switches]:
        torch.manual_seed(0)
        model = MODELS[name]().to(device).train()
        models[variant] = model if variant == "own" else switches[variant](model)

    def run(model: torch.nn.Module) -> Callable[[], None]:
        def once() -> None:
            torch.manual_seed(0)
            model(pixel_values=pixels, labels=targets).loss.backward()
            model.zero_grad(set_to_none=True)

        return once

    return {variant: run(model) for variant, model in models.items()}


def median_seconds(runs: Dict[str, Callable[[], None]], repeats: int, device: str) -> Dict[str, float]:
    """The median time of every run (CPU time, or synchronised wall-clock time on CUDA), the runs taking turns,
    after one warm-up round."""
    clock = time.perf_counter if device == "cuda" else time.process_time
    times: Dict[str, List[float]] = {variant: [] for variant in runs}
    for round_ in range(repeats + 1):
        for variant, run in runs.items():
            synchronise(device)
            start = clock()
            run()
            synchronise(device)
            if round_:
                times[variant].append(clock() - start)
    return {variant: statistics.median(values) for variant, values in times.items()}


def print_rows(models: Sequence[str], scales: Sequence[str], repeats: int, device: str, previous: Any) -> None:
    """The markdown table of both rows of every model and scale (images:px)."""
    switches = switch_functions(previous)
    variants = ["own", *switches]
    clock = "wall-clock" if device == "cuda" else "CPU"
    seconds_columns = " | ".join(f"{variant} ({clock} s)" for variant in variants)
    ratio_columns = " | ".join(f"{variant} / own" for variant in switches)
    print(f"| model | images | row | {seconds_columns} | {ratio_columns} |")
    print("|---" * (3 + len(variants) + len(switches)) + "|")
    for name in models:
        for scale in scales:
            images, size = (int(value) for value in scale.split(":"))
            targets = make_targets(images, device)
            rows = {"loss fn": loss_runs(name, targets, switches, size, device)}
            rows["step"] = step_runs(name, targets, switches, size, device)
            for row, runs in rows.items():
                times = median_seconds(runs, repeats, device)
                seconds = " | ".join(f"{times[variant]:.3f}" for variant in variants)
                ratios = " | ".join(f"{times[variant] / times['own']:.3f}x" for variant in switches)
                print(f"| {name} | {images} x {size} px | {row} | {seconds} | {ratios} |")
                sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--scales", nargs="+", default=SCALES, help="images:px of a step")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median reported)")
    parser.add_argument("--previous-repo", help="another checkout of this project (git archive COMMIT | tar -x)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device")
    set_threads()
    previous = None if args.previous_repo is None else load_previous_package(args.previous_repo)
    print(
        f"device: {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, load average "
        f"{load_average()}, median of {args.repeats}"
    )
    print_rows(args.models, args.scales, args.repeats, args.device, previous)
    print(f"load average at the end {load_average()}")


if __name__ == "__main__":
    main()
