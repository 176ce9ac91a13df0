"""What the losses' hyperparameters at and beyond the bounds of ``alrp_d2/checks/hyperparameter_ranges.py`` do to
training: the total loss of the first SGD steps (lr 0.01, momentum 0.9) of aLRP RetinaNet at test scale (ResNet-18,
16-channel FPN, two 96 x 128 noise images with two objects), or the step at which it became infinite or NaN. The model
is built with valid values, then given the value measured (the checks would refuse it at construction); the localisation
weight is the float32 buffer's value (1e300 becomes inf).

    python benchmarks/hyperparameter_limits.py
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, List

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from detectron2.modeling import build_model  # noqa: E402
from detectron2.utils.events import EventStorage  # noqa: E402

from alrp_d2.engine import find_ranking_losses  # noqa: E402
from tests.d2.tiny_configs import tiny_batch, tiny_retinanet_cfg  # noqa: E402

CASES = {
    "delta": ([1e-3, 1e-6, 1e-40, 1e-320], lambda loss, value: setattr(loss.criterion, "delta", value)),
    "tau": ([0.95, 0.99, 0.9999, 0.999999999], lambda loss, value: setattr(loss.criterion, "tau", value)),
    "loc_weight": ([1e3, 1e4, 1e6, 1e30, 1e300], lambda loss, value: loss.loc_weight.copy_(torch.tensor(value))),
}


def first_steps(set_value: Callable, value: float, steps: int) -> str:
    torch.manual_seed(0)
    model = build_model(tiny_retinanet_cfg()).train()
    (loss,) = find_ranking_losses(model).values()
    set_value(loss, value)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    totals: List[float] = []
    with EventStorage():
        for step in range(steps):
            total = sum(model(tiny_batch()).values())
            totals.append(float(total))
            if not torch.isfinite(total):
                return f"{totals[-1]} at iteration {step}"
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
    return "finite: " + ", ".join(f"{t:.4g}" for t in totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    for name, (values, set_value) in CASES.items():
        for value in values:
            print(f"{name}={value!r}: {first_steps(set_value, value, args.steps)}", flush=True)


if __name__ == "__main__":
    main()
