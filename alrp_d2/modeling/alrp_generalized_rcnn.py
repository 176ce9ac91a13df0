"""detectron2's ``GeneralizedRCNN`` that can keep the detections clipping made empty (the official Faster R-CNN
models)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY, GeneralizedRCNN
from detectron2.structures import Instances
from torch import Tensor

from .postprocessing import postprocess_batch

__all__ = ["AlrpGeneralizedRCNN"]


@META_ARCH_REGISTRY.register()
class AlrpGeneralizedRCNN(GeneralizedRCNN):
    """detectron2's ``GeneralizedRCNN`` whose inference keeps the empty boxes with TEST.KEEP_EMPTY_DETECTIONS
    (the official Faster R-CNN models); otherwise unchanged."""

    @configurable
    def __init__(self, *, keep_empty_detections: bool = False, **kwargs):
        """
        Args:
            keep_empty_detections: keep the detections that clipping made empty.
            kwargs: :class:`detectron2.modeling.GeneralizedRCNN` arguments.
        """
        super().__init__(**kwargs)
        self.keep_empty_detections = keep_empty_detections

    @classmethod
    def from_config(cls, cfg) -> Dict[str, Any]:
        ret = super().from_config(cfg)
        ret["keep_empty_detections"] = cfg.TEST.KEEP_EMPTY_DETECTIONS
        return ret

    def inference(
        self,
        batched_inputs: List[Dict[str, Tensor]],
        detected_instances: Optional[List[Instances]] = None,
        do_postprocess: bool = True,
    ):
        if not (do_postprocess and self.keep_empty_detections):
            return super().inference(batched_inputs, detected_instances, do_postprocess)
        results = super().inference(batched_inputs, detected_instances, do_postprocess=False)
        return postprocess_batch(results, batched_inputs, [r.image_size for r in results])
