"""A small shapes dataset registered in the test process, for trainers built in it."""

from __future__ import annotations

from typing import Dict, Tuple

from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances

from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths


def register_small_shapes(root: str, prefix: str, num_images: Dict[str, int]) -> Tuple[str, str]:
    """Generates ``num_images`` ({"train": n, "val": m}) shapes images in ``root`` and registers them as
    ``<prefix>_train`` and ``<prefix>_val``; returns the two names."""
    prepare_shapes_dataset(root, num_images=num_images)
    names = (f"{prefix}_train", f"{prefix}_val")
    for name, split in zip(names, ("train", "val")):
        if name not in DatasetCatalog:
            register_coco_instances(name, {}, *shapes_paths(root, split))
    return names
