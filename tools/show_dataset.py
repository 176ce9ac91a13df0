#!/usr/bin/env python3
# ruff: noqa: E402  (the warning filters below come before detectron2 is imported)
"""Draw the ground truth of a registered dataset (boxes, class names, masks) to look at it before training:

    python tools/show_dataset.py shapes_val --output output/shapes_val_gt --num 8 --scale 4
    python tools/show_dataset.py my_train --dataset my_train train.json images/ --output output/my_train_gt

NAME is a dataset of the project (``shapes_train``, ``shapes_val``, generated on first use), one of ``--dataset``
(validated as train_net.py validates it) or any other registered in detectron2's catalog (COCO's, with
``$DETECTRON2_DATASETS``). The first ``--num`` images are drawn into ``--output`` under their file names, with
detectron2's ``Visualizer.draw_dataset_dict``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence

from alrp_d2.known_warnings import ignore_third_party_deprecations

ignore_third_party_deprecations()  # before detectron2 is imported

from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.detection_utils import read_image
from detectron2.utils.visualizer import Visualizer
from PIL import Image

from alrp_d2.data import SHAPES_DATASETS, register_shapes_datasets
from alrp_d2.data.user_datasets import add_dataset_argument, register_user_datasets


def show_dataset(name: str, output_dir: str, num: int = 8, scale: float = 1.0) -> List[str]:
    """Draws the ground truth of the first ``num`` images of dataset ``name`` into ``output_dir``; returns the paths."""
    if name in SHAPES_DATASETS:
        register_shapes_datasets()
    if name not in DatasetCatalog.list():
        raise KeyError(f"dataset {name!r} is not registered: give it with --dataset {name} ANNOTATIONS_JSON IMAGE_DIR")
    metadata = MetadataCatalog.get(name)
    os.makedirs(output_dir, exist_ok=True)
    written = []
    for record in DatasetCatalog.get(name)[:num]:
        image = read_image(record["file_name"], format="RGB")
        drawing = Visualizer(image, metadata, scale=scale).draw_dataset_dict(record).get_image()
        target = os.path.join(output_dir, os.path.basename(record["file_name"]))
        Image.fromarray(drawing).save(target)
        written.append(target)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="a registered dataset, e.g. shapes_val")
    parser.add_argument("--output", required=True, metavar="DIR", help="directory of the drawn images")
    parser.add_argument("--num", type=int, default=8, help="number of images to draw (default 8)")
    parser.add_argument("--scale", type=float, default=1.0, help="size of the drawings relative to the images")
    add_dataset_argument(parser)
    args = parser.parse_args(argv)
    if args.num < 1 or not args.scale > 0:
        parser.error(f"--num must be >= 1 and --scale > 0, got {args.num} and {args.scale}")
    register_user_datasets(args.dataset)
    try:
        written = show_dataset(args.name, args.output, args.num, args.scale)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    print(f"Wrote {len(written)} image(s) to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
