"""Build and training-step time of every LazyConfig recipe under configs/, at full size on the CPU.

For each recipe (or those named): the time of ``LazyConfig.load`` + ``instantiate(cfg.model)`` (random init, no
weights read) and of one training step (forward, backward, optimizer step) on two noise images of ``--size`` px
with two objects, instance masks included. ViTDet pads every image to 1024 x 1024 (``square_pad``): its step needs
several GB of memory.

    python benchmarks/lazyconfig_build_step.py
    python benchmarks/lazyconfig_build_step.py --size 512 COCO-Detection/rs_atss_R_50_FPN_1x.py
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import List

import torch
from detectron2.config import LazyConfig, instantiate
from detectron2.structures import BitMasks, Boxes, Instances
from detectron2.utils.events import EventStorage

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def recipes() -> List[str]:
    return sorted(str(p.relative_to(CONFIG_DIR)) for p in CONFIG_DIR.rglob("*.py") if "common" not in p.parts)


def batch(size: int) -> List[dict]:
    gen = torch.Generator().manual_seed(0)
    images = []
    for _ in range(2):
        objects = Instances((size, size))
        boxes = torch.tensor([[0.1, 0.1, 0.5, 0.6], [0.4, 0.2, 0.9, 0.8]]) * size
        objects.gt_boxes = Boxes(boxes)
        objects.gt_classes = torch.tensor([0, 1])
        masks = torch.zeros(2, size, size, dtype=torch.bool)
        for i, (x1, y1, x2, y2) in enumerate(boxes.int().tolist()):
            masks[i, y1:y2, x1:x2] = True
        objects.gt_masks = BitMasks(masks)
        images.append({"image": torch.rand(3, size, size, generator=gen) * 255, "instances": objects})
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", help="recipes relative to configs/ (default: all)")
    parser.add_argument("--size", type=int, default=256, help="side of the two training images")
    args = parser.parse_args()
    print(f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}, images {args.size} px")
    for name in args.configs or recipes():
        start = time.perf_counter()
        cfg = LazyConfig.load(str(CONFIG_DIR / name))
        model = instantiate(cfg.model)
        built = time.perf_counter()
        cfg.optimizer.params.model = model
        optimizer = instantiate(cfg.optimizer)
        model.train()
        with EventStorage():
            losses = model(batch(args.size))
        optimizer.zero_grad()
        sum(losses.values()).backward()
        optimizer.step()
        stepped = time.perf_counter()
        print(f"{name:60s} build {built - start:5.1f} s  step {stepped - built:5.1f} s")


if __name__ == "__main__":
    main()
