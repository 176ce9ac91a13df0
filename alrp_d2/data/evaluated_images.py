"""Evaluation on the first N images of a test dataset: a dataset of those images, derived from the registered one,
that both the test loader and the evaluator read, so that COCO AP and LRP score exactly the images inferred."""

from __future__ import annotations

import copy
import hashlib
import logging
from typing import Any

from detectron2.data import DatasetCatalog, MetadataCatalog

from ..checks.errors import require_integer

__all__ = ["first_images_dataset"]

logger = logging.getLogger(__name__)


def first_images_dataset(dataset_name: str, max_images: Any, key: str, log: bool = True) -> str:
    """The name of a dataset of the first ``max_images`` images of ``dataset_name`` (``key``, the config key that
    gives it, names a bad value: an integer >= 0 is needed), registered with the dataset's metadata but its
    ``json_file``, so that a COCO evaluator converts exactly these images to COCO json; ``dataset_name`` itself when
    ``max_images`` is 0 or None (all images) or covers the whole dataset. The name holds a digest of the images'
    records: an evaluator's cached COCO json of other images is never reused. With ``log``, logs how many images are
    evaluated."""
    if max_images is None:
        max_images = 0
    require_integer(key, max_images, 0, " (0: all images)")
    if max_images == 0:
        return dataset_name
    dicts = DatasetCatalog.get(dataset_name)
    if max_images >= len(dicts):
        if log:
            logger.info("Evaluating all %d images of %s", len(dicts), dataset_name)
        return dataset_name
    subset = dicts[:max_images]
    digest = hashlib.sha256(repr(subset).encode()).hexdigest()[:8]
    name = f"{dataset_name}_first{max_images}_{digest}"
    if name not in DatasetCatalog.list():  # the digest: a registered name holds these images
        DatasetCatalog.register(name, lambda: copy.deepcopy(subset))
        metadata = MetadataCatalog.get(dataset_name).as_dict()
        kept = {k: v for k, v in metadata.items() if k not in ("name", "json_file", "evaluated_subset_of")}
        # The evaluator records in its threshold file that they come from a subset (LRPThresholdPredictor warns).
        MetadataCatalog.get(name).set(**kept, evaluated_subset_of={"dataset": dataset_name, "images": len(dicts)})
    if log:
        logger.info("Evaluating the first %d of the %d images of %s (%s)", max_images, len(dicts), dataset_name, key)
    return name
