#!/usr/bin/env python3
"""Reference values and gradients from the official Correlation Loss code, for
``tests/test_correlation_loss.py``.

Runs the official correlation functions (fehmikahraman/CorrLoss, an mmdetection 2.18 fork, at commit
ce4e3fe61643791759f5b553d5a7e3901706b1a4: ``concordancer``, ``pearsonr`` and ``spearmanr`` of
``CorrATSSHead`` in ``mmdet/models/dense_heads/corr_atss_head.py``, which every official head repeats, and
the ``concordancer`` of ``CorrFoveaHead``, which adds 1e-6 to Pearson's denominator) with ``torchsort``'s
``soft_rank``, in float64 on the CPU, and writes their inputs, values and gradients to
``tests/fixtures/correlation/correlation_reference.pt``. The functions are read from OFFICIAL's source
with ``ast`` and run as they are; only the heads' few lines around them are followed here: the IoUs
``clamp(min=1e-6).detach()``, the loss taken only with at least two positives, a NaN loss replaced by
``scores.sum() * 0``, and (``use_loss_single=1``) the mean over the FPN levels with at least two positives.

Set-up, once, outside this repository (torchsort publishes only a source distribution, which compiles a
C++ extension; its setup script also compiles a CUDA one whenever an ``nvcc`` is on the PATH, so it is
built here from the unpacked source with ``cuda_toolkit_available`` returning False):

    git clone https://github.com/fehmikahraman/CorrLoss OFFICIAL
    git -C OFFICIAL checkout ce4e3fe61643791759f5b553d5a7e3901706b1a4
    python3 -m venv --system-site-packages VENV
    VENV/bin/pip download torchsort==0.1.10 --no-deps --no-binary :all: --no-build-isolation -d DOWNLOADS
    tar xzf DOWNLOADS/torchsort-0.1.10.tar.gz -C DOWNLOADS
    sed -i 's/^def cuda_toolkit_available():$/&\\n    return False/' DOWNLOADS/torchsort-0.1.10/setup.py
    VENV/bin/pip install --no-build-isolation --no-deps DOWNLOADS/torchsort-0.1.10

Run (a few seconds):

    VENV/bin/python tools/correlation_reference.py --official-repo OFFICIAL

This script is never imported by the package or the tests, which do not need torchsort.
"""

from __future__ import annotations

import argparse
import ast
import os
from functools import partial
from typing import Callable, Dict, List

import torch
import torchsort

OFFICIAL_COMMIT = "ce4e3fe61643791759f5b553d5a7e3901706b1a4"
KINDS = ("spearman", "concordance", "pearson")
FUNCTION_OF_KIND = {"spearman": "spearmanr", "concordance": "concordancer", "pearson": "pearsonr"}
IOU_FLOOR = 1e-6


def official_functions(repo: str, head_file: str, class_name: str) -> Dict[str, Callable]:
    """The correlation methods of ``class_name`` in ``head_file``, compiled from the official source and
    bound to no instance (they use neither ``self`` nor anything but torch and torchsort)."""
    with open(os.path.join(repo, "mmdet", "models", "dense_heads", head_file)) as source:
        tree = ast.parse(source.read())
    (head,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    methods = [
        node for node in head.body if isinstance(node, ast.FunctionDef) and node.name in FUNCTION_OF_KIND.values()
    ]
    namespace: Dict[str, object] = {"torch": torch, "torchsort": torchsort}
    exec(compile(ast.Module(body=methods, type_ignores=[]), head_file, "exec"), namespace)
    return {kind: (lambda x, y, f=namespace[name]: f(None, x, y)) for kind, name in FUNCTION_OF_KIND.items()}


def official_loss(function: Callable, scores: torch.Tensor, ious: torch.Tensor) -> torch.Tensor:
    """The heads' lines around the function: IoU floor and detach, at least two positives, NaN -> 0."""
    ious = ious.clamp(min=IOU_FLOOR).detach()
    if scores.numel() < 2:
        return scores.sum() * 0
    loss = function(scores, ious)
    return scores.sum() * 0 if torch.isnan(loss).any() else loss


def official_per_level(function: Callable, scores, ious, levels, num_levels: int) -> torch.Tensor:
    """``use_loss_single=1``: one loss per level (0 unless it has at least two positives), summed and divided
    by the number of levels with at least two positives (a level with a NaN loss counts)."""
    losses, active = [], 0
    for level in range(num_levels):
        mask = levels == level
        losses.append(official_loss(function, scores[mask], ious[mask]))
        active += int(mask.sum() > 1)
    return sum(losses) / active if active else sum(losses)


def with_gradient(loss_of: Callable[..., torch.Tensor], scores: torch.Tensor, *args):
    """``loss_of(scores, *args)`` and its gradient with respect to ``scores``."""
    leaf = scores.clone().requires_grad_(True)
    loss = loss_of(leaf, *args)
    (gradient,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    return loss.detach(), torch.zeros_like(scores) if gradient is None else gradient


def loss_cases(generator: torch.Generator) -> Dict[str, Dict[str, torch.Tensor]]:
    def uniform(n: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return low + (high - low) * torch.rand(n, generator=generator, dtype=torch.float64)

    tied_scores = uniform(40)
    tied_scores[::4] = tied_scores[1]
    tied_ious = uniform(40)
    tied_ious[1::3] = 0.0  # below the floor: tied at 1e-6 after the clamp
    tied_ious[2::5] = 0.75
    return {
        "random": {"scores": uniform(25), "ious": uniform(25)},
        "ties_in_scores": {"scores": tied_scores, "ious": uniform(40)},
        "ties_in_ious": {"scores": uniform(40), "ious": tied_ious},
        "two_positives": {"scores": uniform(2), "ious": uniform(2)},
        "one_positive": {"scores": uniform(1), "ious": uniform(1)},
        "no_positive": {"scores": uniform(0), "ious": uniform(0)},
        "constant_scores": {"scores": torch.full((8,), 0.5, dtype=torch.float64), "ious": uniform(8)},
        "constant_ious": {"scores": uniform(8), "ious": torch.full((8,), 0.25, dtype=torch.float64)},
        "large": {"scores": uniform(300, 0.01, 0.99), "ious": uniform(300, 0.3, 1.0)},
    }


def soft_rank_cases(generator: torch.Generator) -> Dict[str, Dict[str, object]]:
    def normal(*shape: int, scale: float) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=generator, dtype=torch.float64)

    ties = normal(30, scale=4.0)
    ties[::3] = ties[4]
    ties[1::7] = ties[2]
    # Blocks 2 and 3 (sorted): y = s - w gives solution values 1 + 5e-10 and 1, which torchsort's
    # backward pass merges (closer than 1e-9) while its forward pass keeps them apart.
    near_tie = torch.tensor([5.0, 3.0 + 5e-10, 2.0, -4.0], dtype=torch.float64)
    cases: Dict[str, Dict[str, object]] = {
        "scores": {"values": torch.rand(50, generator=generator, dtype=torch.float64), "strength": 1.0},
        "spread": {"values": normal(60, scale=5.0), "strength": 1.0},
        "ties": {"values": ties, "strength": 1.0},
        "near_tie_blocks": {"values": near_tie, "strength": 1.0},
        "strength_0.1": {"values": normal(40, scale=1.0), "strength": 0.1},
        "strength_3": {"values": normal(40, scale=10.0), "strength": 3.0},
        "large": {"values": normal(300, scale=30.0), "strength": 1.0},
        "batch": {"values": normal(3, 20, scale=6.0), "strength": 1.0},
        "single": {"values": normal(1, scale=1.0), "strength": 1.0},
    }
    for case in cases.values():
        values = case["values"]
        assert isinstance(values, torch.Tensor)
        leaf = values.clone().requires_grad_(True)
        ranks = torchsort.soft_rank(leaf if leaf.dim() == 2 else leaf[None], regularization_strength=case["strength"])
        ranks = ranks if values.dim() == 2 else ranks[0]
        upstream = torch.randn(values.shape, generator=generator, dtype=torch.float64)
        (gradient,) = torch.autograd.grad((ranks * upstream).sum(), leaf)
        case.update(ranks=ranks.detach(), upstream=upstream, gradient=gradient)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official-repo", required=True, help="checkout of fehmikahraman/CorrLoss")
    parser.add_argument(
        "--output", default=os.path.join("tests", "fixtures", "correlation", "correlation_reference.pt")
    )
    args = parser.parse_args()
    functions = official_functions(args.official_repo, "corr_atss_head.py", "CorrATSSHead")
    fovea_concordance = official_functions(args.official_repo, "corr_fovea_head.py", "CorrFoveaHead")["concordance"]
    generator = torch.Generator().manual_seed(20230207)

    losses: List[Dict[str, object]] = []
    for name, case in loss_cases(generator).items():
        for kind in KINDS:
            value, gradient = with_gradient(partial(official_loss, functions[kind]), case["scores"], case["ious"])
            losses.append({"case": name, "kind": kind, **case, "loss": value, "gradient": gradient})
        if name in ("constant_scores", "constant_ious"):
            # With the FoveaBox epsilon, a constant group gives 1 - 0 (not NaN), and NaN gradients for
            # constant scores: the loss returns 0 there, as for the other heads (docs/paper_notes.md).
            continue
        value, gradient = with_gradient(partial(official_loss, fovea_concordance), case["scores"], case["ious"])
        losses.append(
            {"case": name, "kind": "concordance", "concordance_eps": 1e-6, **case, "loss": value, "gradient": gradient}
        )

    # Five levels: 30, 1, 0, 12 positives and 6 with constant IoUs (NaN -> 0, but the level counts).
    levels = torch.cat([torch.full((n,), level) for level, n in enumerate((30, 1, 0, 12, 6))])
    levels = levels[torch.randperm(levels.numel(), generator=generator)]
    scores = torch.rand(levels.numel(), generator=generator, dtype=torch.float64)
    ious = torch.rand(levels.numel(), generator=generator, dtype=torch.float64)
    ious[levels == 4] = 0.5
    per_level: List[Dict[str, object]] = []
    for kind in KINDS:
        value, gradient = with_gradient(partial(official_per_level, functions[kind]), scores, ious, levels, 5)
        per_level.append(
            {
                "kind": kind,
                "scores": scores,
                "ious": ious,
                "levels": levels,
                "num_levels": 5,
                "loss": value,
                "gradient": gradient,
            }
        )

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    torch.save(
        {
            "official_commit": OFFICIAL_COMMIT,
            "torchsort_version": getattr(torchsort, "__version__", "0.1.10"),
            "losses": losses,
            "per_level": per_level,
            "soft_rank": soft_rank_cases(generator),
        },
        args.output,
    )
    print(f"wrote {args.output}: {len(losses)} loss cases, {len(per_level)} per-level cases")


if __name__ == "__main__":
    main()
