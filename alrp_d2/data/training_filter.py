"""mmdetection's training-set filter (``CocoDataset`` in training), which the official models were trained with
(DATALOADER.TRAIN_FILTER "mmdet"; docs/paper_notes.md, "Training-set filter"), and the refusal of a training set
without any object."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Sequence

from detectron2.config import CfgNode
from detectron2.data import get_detection_dataset_dicts
from detectron2.structures import BoxMode

from ..checks.errors import ConfigError

__all__ = ["MMDET_MIN_IMAGE_SIDE", "mmdet_training_filter", "require_objects", "training_dataset_dicts"]

#: Images whose shorter side is below this are dropped (mmdetection's ``_filter_imgs(min_size=32)``).
MMDET_MIN_IMAGE_SIDE = 32


def _kept(annotation: Dict[str, Any], width: float, height: float) -> bool:
    """mmdetection's ``_parse_ann_info``: a box of at least 1 x 1 px and positive area that overlaps the image.
    The area is the annotation's ``area`` where the dataset dicts carry it, else the box's."""
    x1, y1, x2, y2 = BoxMode.convert(list(annotation["bbox"]), annotation["bbox_mode"], BoxMode.XYXY_ABS)
    w, h = x2 - x1, y2 - y1
    inside_w = max(0.0, min(x2, width) - max(x1, 0.0))
    inside_h = max(0.0, min(y2, height) - max(y1, 0.0))
    area = annotation.get("area", w * h)
    return inside_w * inside_h > 0 and area > 0 and w >= 1 and h >= 1


def mmdet_training_filter(dataset_dicts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The images and boxes mmdetection 2.x trains on, from detectron2's dataset dicts (unfiltered:
    ``get_detection_dataset_dicts(..., filter_empty=False)``):

    - an image is kept if it has at least one annotation of any kind, a crowd one included (detectron2's
      ``filter_images_with_only_crowd_annotations`` drops crowd-only images), and both sides >= 32 px;
    - a box is dropped if it is narrower or lower than 1 px, has zero area or does not overlap the image
      (detectron2 drops boxes of 1e-5 px or less, after augmentation).

    Crowd boxes stay in the dicts; the dataset mapper leaves them out of the ground truth, as the official
    training pipeline does (it never collects ``gt_bboxes_ignore``). Returns new dicts; the input is unchanged."""
    kept = []
    for record in dataset_dicts:
        annotations = record.get("annotations", [])
        if not annotations or min(record["width"], record["height"]) < MMDET_MIN_IMAGE_SIDE:
            continue
        record = copy.copy(record)
        record["annotations"] = [a for a in annotations if _kept(a, record["width"], record["height"])]
        kept.append(record)
    return kept


def require_objects(dataset_dicts: List[Dict[str, Any]], key: str, names: Sequence[str]) -> None:
    """Raises :class:`ConfigError` naming the config ``key`` and its datasets ``names`` when no image of the training
    set holds an object (a non-crowd annotation): every loss would be 0 and every metric NaN (with detectron2's
    ``filter_empty=False`` such a set reaches the loader)."""
    if not any(not a.get("iscrowd", 0) for record in dataset_dicts for a in record.get("annotations", ())):
        raise ConfigError(
            f"{key} {tuple(names)}: none of its {len(dataset_dicts)} images holds an object (no annotation, or only "
            "crowd ones): there is nothing to train on; annotate the images or train on another dataset"
        )


def training_dataset_dicts(cfg: CfgNode) -> List[Dict[str, Any]]:
    """The dataset dicts of DATASETS.TRAIN filtered as DATALOADER.TRAIN_FILTER says: "detectron2" is
    detectron2's ``get_detection_dataset_dicts`` (DATALOADER.FILTER_EMPTY_ANNOTATIONS), "mmdet"
    :func:`mmdet_training_filter` on the unfiltered dicts; a set without any object is refused
    (:func:`require_objects`)."""
    mmdet = cfg.DATALOADER.TRAIN_FILTER == "mmdet"
    dataset_dicts = get_detection_dataset_dicts(
        cfg.DATASETS.TRAIN,
        filter_empty=cfg.DATALOADER.FILTER_EMPTY_ANNOTATIONS and not mmdet,
        proposal_files=cfg.DATASETS.PROPOSAL_FILES_TRAIN if cfg.MODEL.LOAD_PROPOSALS else None,
    )
    if mmdet:
        dataset_dicts = _mmdet_kept(dataset_dicts, cfg.DATASETS.TRAIN)
    require_objects(dataset_dicts, "DATASETS.TRAIN", cfg.DATASETS.TRAIN)
    return dataset_dicts


def _mmdet_kept(dataset_dicts: List[Dict[str, Any]], names: Sequence[str]) -> List[Dict[str, Any]]:
    """:func:`mmdet_training_filter` of the datasets ``names`` (DATASETS.TRAIN), which must keep an image."""
    kept = mmdet_training_filter(dataset_dicts)
    if dataset_dicts and not kept:
        unannotated = sum(1 for record in dataset_dicts if not record.get("annotations"))
        raise ConfigError(
            f"DATALOADER.TRAIN_FILTER 'mmdet' keeps none of the {len(dataset_dicts)} images of DATASETS.TRAIN "
            f"{tuple(names)}: {unannotated} have no annotation and the others a side below "
            f"{MMDET_MIN_IMAGE_SIDE} px (mmdetection trains only on annotated images of at least "
            f"{MMDET_MIN_IMAGE_SIDE} x {MMDET_MIN_IMAGE_SIDE} px); annotate the images, or set DATALOADER.TRAIN_FILTER "
            "detectron2"
        )
    return kept
