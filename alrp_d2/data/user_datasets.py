"""COCO-format datasets named on the command line (``--dataset NAME ANNOTATIONS_JSON IMAGE_DIR``
of train_net.py and demo.py), registered in detectron2's catalogs with their class names, and the
check of their number of classes against the config (README, "Your own dataset")."""

from __future__ import annotations

import argparse
import json
import os
from typing import Dict, List, Sequence, Tuple

from detectron2.config import CfgNode
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets import register_coco_instances

__all__ = [
    "DatasetSpec",
    "add_dataset_argument",
    "check_num_classes",
    "coco_categories",
    "num_classes_key",
    "register_user_datasets",
]

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


def coco_categories(json_file: str) -> List[Tuple[int, str]]:
    """The (id, name) of the categories of a COCO annotation file, sorted by id (the contiguous
    class order of detectron2's ``load_coco_json``)."""
    try:
        with open(json_file) as f:
            content = json.load(f)
    except OSError as error:
        raise FileNotFoundError(f"cannot read the annotation file {json_file}: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"{json_file} is not valid JSON: {error}") from error
    categories = content.get("categories") if isinstance(content, dict) else None
    if not categories or not all(isinstance(c, dict) and "id" in c and "name" in c for c in categories):
        raise ValueError(f"{json_file} has no COCO 'categories' list of {{'id': ..., 'name': ...}} objects")
    return sorted((int(c["id"]), str(c["name"])) for c in categories)


def register_user_datasets(specs: Sequence[Sequence[str]]) -> Dict[str, int]:
    """Registers each (name, annotations json, image directory) as a COCO instances dataset whose
    metadata already holds ``thing_classes`` (class names, e.g. for demo.py) and the id mapping.
    Call it in the launching process and in every worker (detectron2's ``launch`` spawns fresh
    processes); registering the same spec again does nothing. Returns {name: number of classes}."""
    counts: Dict[str, int] = {}
    for name, json_file, image_root in specs:
        json_file, image_root = (os.path.abspath(os.path.expanduser(p)) for p in (json_file, image_root))
        if not os.path.isdir(image_root):
            raise FileNotFoundError(f"--dataset {name}: image directory {image_root} not found")
        categories = coco_categories(json_file)
        counts[name] = len(categories)
        if name in DatasetCatalog.list():
            metadata = MetadataCatalog.get(name)
            if metadata.get("json_file") == json_file and metadata.get("image_root") == image_root:
                continue
            raise ValueError(f"--dataset {name}: the name is already registered (choose another name)")
        register_coco_instances(name, {}, json_file, image_root)
        MetadataCatalog.get(name).set(
            thing_classes=[category_name for _, category_name in categories],
            thing_dataset_id_to_contiguous_id={category_id: i for i, (category_id, _) in enumerate(categories)},
        )
    return counts


def num_classes_key(cfg: CfgNode) -> str:
    """The config key of the number of classes of cfg's detector."""
    architecture = cfg.MODEL.META_ARCHITECTURE
    if architecture == "GeneralizedRCNN":
        return "MODEL.ROI_HEADS.NUM_CLASSES"
    for family in ("FOVEABOX", "FCOS"):
        if family in architecture.upper():
            return f"MODEL.{family}.NUM_CLASSES"
    return "MODEL.RETINANET.NUM_CLASSES"


def check_num_classes(cfg: CfgNode, counts: Dict[str, int]) -> None:
    """Raises ValueError when a registered dataset used by cfg (DATASETS.TRAIN / TEST) has another
    number of classes than the model, naming both numbers and the key to set."""
    key = num_classes_key(cfg)
    node = cfg
    for part in key.split(".")[:-1]:
        node = node[part]
    expected = node.NUM_CLASSES
    for name in list(cfg.DATASETS.TRAIN) + list(cfg.DATASETS.TEST):
        if name in counts and counts[name] != expected:
            raise ValueError(
                f"dataset {name!r} has {counts[name]} categories but {key} is {expected}: "
                f"add `{key} {counts[name]}` to the command line"
            )
