"""The segmentations of the datasets a config trains and evaluates on (DATASETS.TRAIN and
DATASETS.TEST) when the model has masks (MODEL.MASK_ON, which also evaluates the "segm" task),
checked before detectron2 loads them and before anything rasterises them
(:mod:`.segmentation_check`): a COCO dataset's annotation file (``register_coco_instances``, the
built-in COCO datasets, the shapes set; ``--dataset`` files are checked when they are registered,
for every model), or the dataset dicts of other datasets."""

from __future__ import annotations

import functools
import os
from typing import Any, Dict, List, Sequence

from detectron2.config import CfgNode
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.structures import BoxMode

from .coco_json_check import MAX_LISTED, CocoJsonError, check_coco_segmentations
from .segmentation_check import segmentation_problem

__all__ = ["check_dataset_dicts_segmentations", "check_dataset_segmentations", "check_segmentations"]


@functools.lru_cache(maxsize=32)
def _checked_json(json_file: str, modified: int, size: int) -> None:
    """:func:`check_coco_segmentations` for a mask model, once per file version (``modified``, ``size``)."""
    check_coco_segmentations(json_file, masks=True)


def check_dataset_dicts_segmentations(dataset_dicts: List[Dict[str, Any]], dataset: str) -> None:
    """Raises :class:`~alrp_d2.data.coco_json_check.CocoJsonError` naming the dataset, the image
    (file and id) and the annotation of every annotation of ``dataset_dicts`` (detectron2's
    format) without a usable segmentation, for a model with masks."""
    problems = []
    for record in dataset_dicts:
        for index, annotation in enumerate(record.get("annotations", [])):
            bbox = annotation.get("bbox")
            box = None
            if bbox is not None and "bbox_mode" in annotation:
                box = BoxMode.convert(list(bbox), annotation["bbox_mode"], BoxMode.XYWH_ABS)
            problem = segmentation_problem(
                annotation.get("segmentation"), record["width"], record["height"], box, required=True
            )
            if problem:
                label = f"annotation id {annotation['id']!r}" if "id" in annotation else f"annotations[{index}]"
                problems.append(
                    f"image {record.get('file_name')!r} (image id {record.get('image_id')!r}), {label}: {problem}"
                )
    if problems:
        listed = "\n".join(f"  {problem}" for problem in problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise CocoJsonError(f"dataset {dataset!r} has {len(problems)} unusable segmentation(s):\n{listed}{more}")


def check_dataset_segmentations(cfg: CfgNode) -> None:
    """Checks the segmentations of every registered dataset of DATASETS.TRAIN and DATASETS.TEST
    when MODEL.MASK_ON (module docstring): :func:`check_segmentations`."""
    if cfg.MODEL.MASK_ON:
        check_segmentations(list(cfg.DATASETS.TRAIN) + list(cfg.DATASETS.TEST))


def check_segmentations(dataset_names: Sequence[str]) -> None:
    """Checks the segmentations of every registered dataset of ``dataset_names`` for a model with masks: each
    annotation needs a usable one. A COCO annotation file is read once per version and process. Raises
    :class:`~alrp_d2.data.coco_json_check.CocoJsonError` naming the file or dataset, the image and the
    annotation."""
    for name in dict.fromkeys(dataset_names):
        if name not in DatasetCatalog.list():
            continue
        json_file = MetadataCatalog.get(name).get("json_file")
        if json_file:
            if os.path.isfile(json_file):
                stat = os.stat(json_file)
                _checked_json(json_file, stat.st_mtime_ns, stat.st_size)
        else:
            check_dataset_dicts_segmentations(DatasetCatalog.get(name), name)
