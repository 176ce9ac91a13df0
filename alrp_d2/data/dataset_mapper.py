"""detectron2 ``DatasetMapper`` that also feeds the ground-truth boxes to the augmentations, which
the SSD min-IoU crop needs (detectron2's mapper gives them only the image and sem_seg)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from detectron2.config import CfgNode, configurable
from detectron2.data import DatasetMapper
from detectron2.data import transforms as T
from detectron2.structures import BoxMode

from .augmentation import build_ssd_augmentation
from .dataset_classes import model_num_classes
from .inference_resize import build_test_resize

__all__ = ["AlrpDatasetMapper", "build_alrp_mapper"]


def _annotation_boxes(annotations: List[Dict[str, Any]]) -> np.ndarray:
    """(N, 4) XYXY_ABS boxes of all annotations, crowd ones included: they take part in the min-IoU
    crop's IoU and centre tests as mmdet's ``gt_bboxes_ignore`` (the mapper drops them afterwards)."""
    boxes = [BoxMode.convert(obj["bbox"], obj["bbox_mode"], BoxMode.XYXY_ABS) for obj in annotations]
    return np.asarray(boxes, dtype=np.float64).reshape(-1, 4)


class _BoxesToAugmentations:
    """Wraps a mapper's ``AugmentationList``: sets ``aug_input.boxes`` before running it, which is the
    one thing detectron2's ``DatasetMapper.__call__`` (``T.AugInput(image, sem_seg=...)``) leaves out."""

    def __init__(self, augmentations: T.AugmentationList, boxes: np.ndarray):
        self.augmentations = augmentations
        self.boxes = boxes

    def __call__(self, aug_input: T.AugInput) -> T.Transform:
        aug_input.boxes = self.boxes
        return self.augmentations(aug_input)


class AlrpDatasetMapper(DatasetMapper):
    """detectron2's ``DatasetMapper``; with ``boxes_to_augmentations`` (INPUT.SSD.ENABLED in training)
    the augmentations also get the boxes of all annotations (``AugInput.boxes``). detectron2's
    ``__call__`` does the rest: crowd annotations are dropped and boxes a crop removed (made empty)
    are filtered by ``utils.filter_empty_instances``; an image may end with zero instances. In
    training, an annotation whose class is not one of the model's ``num_classes`` is an error
    naming the image (a dataset without class metadata is not checked before training). At test time
    the image is resized as INPUT.TEST_RESIZE says (:func:`build_test_resize`)."""

    @configurable
    def __init__(
        self,
        is_train: bool,
        *,
        boxes_to_augmentations: bool = False,
        num_classes: Optional[Tuple[str, int]] = None,
        **kwargs,
    ):
        """
        Args:
            boxes_to_augmentations: give the augmentations the annotations' boxes.
            num_classes: the config key and value of the model's number of classes (None: unchecked).
            kwargs: :class:`detectron2.data.DatasetMapper` arguments.
        """
        super().__init__(is_train, **kwargs)
        self.boxes_to_augmentations = boxes_to_augmentations
        self.num_classes = num_classes

    @classmethod
    def from_config(cls, cfg: CfgNode, is_train: bool = True) -> Dict[str, Any]:
        ret = super().from_config(cfg, is_train)
        if is_train:
            ret["num_classes"] = model_num_classes(cfg)
        if cfg.INPUT.SSD.ENABLED:
            _check_ssd_compatible(cfg)
            ret["augmentations"] = build_ssd_augmentation(cfg, is_train)
            ret["boxes_to_augmentations"] = is_train
        if not is_train and cfg.INPUT.TEST_RESIZE != "detectron2":
            ret["augmentations"] = [build_test_resize(cfg)]
        return ret

    def __call__(self, dataset_dict: Dict[str, Any]) -> Dict[str, Any]:
        """detectron2's ``DatasetMapper.__call__`` on a shallow copy of this mapper whose augmentations
        receive the boxes of ``dataset_dict`` (a copy, so that the mapper holds no per-image state)."""
        if self.num_classes is not None:
            _check_classes(dataset_dict, *self.num_classes)
        if not self.boxes_to_augmentations:
            return super().__call__(dataset_dict)
        if "sem_seg_file_name" in dataset_dict:
            raise ValueError("INPUT.SSD.ENABLED supports detection datasets only (got a sem_seg_file_name)")
        mapper = copy.copy(self)
        mapper.augmentations = _BoxesToAugmentations(
            self.augmentations, _annotation_boxes(dataset_dict.get("annotations", []))
        )
        return super(AlrpDatasetMapper, mapper).__call__(dataset_dict)


def _check_classes(dataset_dict: Dict[str, Any], key: str, num_classes: int) -> None:
    """Every annotation's class is in [0, num_classes)."""
    for annotation in dataset_dict.get("annotations", []):
        category = annotation.get("category_id")
        if not (isinstance(category, int) and 0 <= category < num_classes):
            raise ValueError(
                f"{dataset_dict.get('file_name', 'an image')}: an annotation has class {category!r}, not one of "
                f"the model's {key}={num_classes} classes [0, {num_classes}); check the dataset's categories "
                f"and {key}"
            )


def _check_ssd_compatible(cfg: CfgNode) -> None:
    """INPUT.SSD replaces detectron2's crop and is for box-only training data."""
    if cfg.INPUT.CROP.ENABLED:
        raise ValueError("Invalid config: INPUT.CROP.ENABLED and INPUT.SSD.ENABLED cannot both be True")
    if cfg.MODEL.LOAD_PROPOSALS:
        raise ValueError("Invalid config: MODEL.LOAD_PROPOSALS is not supported with INPUT.SSD.ENABLED")


def build_alrp_mapper(cfg: CfgNode, is_train: bool) -> AlrpDatasetMapper:
    """The data mapper of alrp-d2: SSD augmentation (``build_ssd_augmentation``) when
    INPUT.SSD.ENABLED, otherwise exactly detectron2's ``DatasetMapper`` (``utils.build_augmentation``);
    at test time the resize of INPUT.TEST_RESIZE."""
    return AlrpDatasetMapper(cfg, is_train)
