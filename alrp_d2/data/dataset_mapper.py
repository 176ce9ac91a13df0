"""detectron2 ``DatasetMapper`` that also feeds the ground-truth boxes to the augmentations, which
the SSD min-IoU crop needs (detectron2's mapper gives them only the image and sem_seg)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List

import numpy as np
import torch
from detectron2.config import CfgNode, configurable
from detectron2.data import DatasetMapper
from detectron2.data import detection_utils as utils
from detectron2.data import transforms as T
from detectron2.structures import BoxMode

from .augmentation import build_ssd_augmentation

__all__ = ["AlrpDatasetMapper", "build_alrp_mapper", "annotation_boxes"]


def annotation_boxes(annotations: List[Dict[str, Any]]) -> np.ndarray:
    """(N, 4) XYXY_ABS boxes of the non-crowd annotations (crowd ones are dropped by the mapper anyway)."""
    boxes = [
        BoxMode.convert(obj["bbox"], obj["bbox_mode"], BoxMode.XYXY_ABS)
        for obj in annotations
        if obj.get("iscrowd", 0) == 0
    ]
    return np.asarray(boxes, dtype=np.float64).reshape(-1, 4)


class AlrpDatasetMapper(DatasetMapper):
    """detectron2's ``DatasetMapper``; with ``boxes_to_augmentations`` (INPUT.SSD.ENABLED in training)
    the augmentations get ``T.AugInput(image, boxes=...)``. Boxes a crop removes become empty and are
    dropped by ``utils.filter_empty_instances``; an image may end with zero instances."""

    @configurable
    def __init__(self, is_train: bool, *, boxes_to_augmentations: bool = False, **kwargs):
        super().__init__(is_train, **kwargs)
        self.boxes_to_augmentations = boxes_to_augmentations

    @classmethod
    def from_config(cls, cfg: CfgNode, is_train: bool = True) -> Dict[str, Any]:
        ret = super().from_config(cfg, is_train)
        if cfg.INPUT.SSD.ENABLED:
            _check_ssd_compatible(cfg)
            ret["augmentations"] = build_ssd_augmentation(cfg, is_train)
            ret["boxes_to_augmentations"] = is_train
        return ret

    def __call__(self, dataset_dict: Dict[str, Any]) -> Dict[str, Any]:
        if not self.boxes_to_augmentations:
            return super().__call__(dataset_dict)
        if "sem_seg_file_name" in dataset_dict:
            raise ValueError("INPUT.SSD.ENABLED supports detection datasets only (got a sem_seg_file_name)")
        dataset_dict = copy.deepcopy(dataset_dict)
        image = utils.read_image(dataset_dict["file_name"], format=self.image_format)
        utils.check_image_size(dataset_dict, image)
        aug_input = T.AugInput(image, boxes=annotation_boxes(dataset_dict.get("annotations", [])))
        transforms = self.augmentations(aug_input)
        image = aug_input.image
        dataset_dict["image"] = torch.as_tensor(np.ascontiguousarray(image.transpose(2, 0, 1)))
        if "annotations" in dataset_dict:
            self._transform_annotations(dataset_dict, transforms, image.shape[:2])
        return dataset_dict


def _check_ssd_compatible(cfg: CfgNode) -> None:
    """INPUT.SSD replaces detectron2's crop and is for box-only training data."""
    if cfg.INPUT.CROP.ENABLED:
        raise ValueError("Invalid config: INPUT.CROP.ENABLED and INPUT.SSD.ENABLED cannot both be True")
    if cfg.MODEL.LOAD_PROPOSALS:
        raise ValueError("Invalid config: MODEL.LOAD_PROPOSALS is not supported with INPUT.SSD.ENABLED")


def build_alrp_mapper(cfg: CfgNode, is_train: bool) -> AlrpDatasetMapper:
    """The data mapper of alrp-d2: SSD augmentation (``build_ssd_augmentation``) when
    INPUT.SSD.ENABLED, otherwise exactly detectron2's ``DatasetMapper`` (``utils.build_augmentation``)."""
    return AlrpDatasetMapper(cfg, is_train)
