"""The predictor of a LazyConfig, in one call: detectron2's way of predicting with a LazyConfig (``instantiate``
the model, load the weights, resize as the test mapper does) with the checks of :class:`AlrpPredictor`::

    predictor = LazyPredictor(load_lazy_config("configs/quickstart/rtdetr_shapes.py"), "model_final.pth")
    instances = predictor(read_image("image.jpg", format="BGR"))["instances"]
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import numpy as np
import torch
from detectron2.config import instantiate
from detectron2.data import transforms as T
from omegaconf import DictConfig

from ..checkpoint import AlrpCheckpointer, check_weights_classes
from ..config.lazy_fields import lazy_dataset_names, train_option
from ..data.dataset_classes import dataset_classes
from ..data.image_size import ImageSizeError, resize_problem
from .predictor import check_image

__all__ = ["LazyPredictor"]

logger = logging.getLogger(__name__)


def _device(cfg: DictConfig) -> str:
    """``train.device`` (detectron2's default "cuda"), "cpu" on a machine without a CUDA device."""
    device = cfg.train.get("device", "cuda")
    return device if torch.device(device).type != "cuda" or torch.cuda.is_available() else "cpu"


class LazyPredictor:
    """Predicts one image at a time with the model of a LazyConfig (``cfg.model``, built by ``instantiate``) and
    ``weights`` (default ``train.init_checkpoint``; "" gives a randomly initialised model, with a warning), loaded by
    :class:`AlrpCheckpointer` (checked: they must fit the model, hold finite values and, when the checkpoint records
    its classes, be those of the first dataset of ``dataloader.test``). Images go through the augmentations of
    ``dataloader.test.mapper`` (the test-time resize) as the evaluation's do. Called as detectron2's
    ``DefaultPredictor``: a BGR uint8 image (H, W, 3) in, ``{"instances": Instances}`` at its size out."""

    def __init__(self, cfg: DictConfig, weights: Optional[str] = None):
        self.device = _device(cfg)
        self.model = instantiate(cfg.model).to(self.device).eval()
        weights = cfg.train.get("init_checkpoint", "") if weights is None else weights
        if not weights:
            logger.warning("No weights (train.init_checkpoint is empty): the predictor's model is randomly initialised")
        checkpointer = AlrpCheckpointer(self.model, allow_partial=train_option(cfg, "allow_partial_weights"))
        checkpoint = checkpointer.load(weights)
        test_datasets = lazy_dataset_names(cfg, "test")
        if weights and test_datasets:
            check_weights_classes(checkpoint, weights, [dataset_classes(test_datasets[0])])
        mapper = instantiate(cfg.dataloader.test.mapper)
        self.augmentations: T.AugmentationList = mapper.augmentations
        self.input_format: str = mapper.image_format

    def __call__(self, original_image: np.ndarray) -> Dict[str, Any]:
        """The prediction of one BGR image (``read_image(path, format="BGR")``, OpenCV's order, as detectron2's
        ``DefaultPredictor``) after :func:`check_image`; an image the test-time resize would make 0 pixels wide
        raises :class:`~alrp_d2.data.image_size.ImageSizeError`."""
        check_image(original_image, "BGR")
        height, width = original_image.shape[:2]
        problem = resize_problem(self.augmentations.augs, height, width)
        if problem:
            raise ImageSizeError(f"the predictor cannot take {problem}")
        image = original_image[:, :, ::-1] if self.input_format == "RGB" else original_image
        augmented = T.AugInput(np.ascontiguousarray(image))
        self.augmentations(augmented)
        tensor = torch.as_tensor(augmented.image.astype("float32").transpose(2, 0, 1), device=self.device)
        with torch.no_grad():
            return self.model([{"image": tensor, "height": height, "width": width}])[0]
