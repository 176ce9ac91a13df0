"""COCO-format datasets named on the command line (``--dataset NAME ANNOTATIONS_JSON IMAGE_DIR``
of train_net.py and demo.py), validated (:mod:`.coco_json_check`) and registered in detectron2's
catalogs with their class names (docs/getting_started.md, "Your own dataset")."""

from __future__ import annotations

import argparse
import os
from typing import Collection, Dict, Sequence, Tuple

from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets import register_coco_instances

from .coco_json_check import check_coco_json

__all__ = ["DatasetSpec", "add_dataset_argument", "register_user_datasets"]

DatasetSpec = Tuple[str, str, str]  # (name, annotations json, image directory)


def add_dataset_argument(parser: argparse.ArgumentParser) -> None:
    """Adds the repeatable ``--dataset NAME ANNOTATIONS_JSON IMAGE_DIR`` option (``args.dataset``)."""
    parser.add_argument(
        "--dataset",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "ANNOTATIONS_JSON", "IMAGE_DIR"),
        help="register a COCO-format dataset under NAME (repeatable); use NAME in DATASETS.TRAIN / DATASETS.TEST",
    )


def register_user_datasets(specs: Sequence[Sequence[str]], evaluated: Collection[str] = ()) -> Dict[str, int]:
    """Validates each (name, annotations json, image directory) with :func:`check_coco_json` (the
    stricter rules of evaluation for the names in ``evaluated``, i.e. DATASETS.TEST) and registers it
    as a COCO instances dataset whose metadata already holds ``thing_classes`` (class names, e.g.
    for demo.py) and the id mapping. Call it in the launching process and in every worker
    (detectron2's ``launch`` spawns fresh processes); registering the same spec again does nothing.
    Returns {name: number of classes}."""
    counts: Dict[str, int] = {}
    for name, json_file, image_root in specs:
        json_file, image_root = (os.path.abspath(os.path.expanduser(p)) for p in (json_file, image_root))
        if not os.path.isdir(image_root):
            raise FileNotFoundError(f"--dataset {name}: image directory {image_root} not found")
        if name in DatasetCatalog.list():
            metadata = MetadataCatalog.get(name)
            if metadata.get("json_file") != json_file or metadata.get("image_root") != image_root:
                raise ValueError(f"--dataset {name}: the name is already registered (choose another name)")
            counts[name] = len(metadata.thing_classes)  # validated when it was registered
            continue
        categories = check_coco_json(json_file, evaluated=name in evaluated)
        counts[name] = len(categories)
        register_coco_instances(name, {}, json_file, image_root)
        MetadataCatalog.get(name).set(
            thing_classes=[category_name for _, category_name in categories],
            thing_dataset_id_to_contiguous_id={category_id: i for i, (category_id, _) in enumerate(categories)},
        )
    return counts
