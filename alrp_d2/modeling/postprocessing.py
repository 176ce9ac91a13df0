"""Detections in the input image's resolution, optionally keeping the boxes that clipping made empty, as
mmdetection does (``TEST.KEEP_EMPTY_DETECTIONS``; docs/paper_notes.md, "Zero-area boxes"), and the mixin that does
it for dense detectors."""

from __future__ import annotations

from typing import Any, Dict, List

from detectron2.modeling.meta_arch.dense_detector import DenseDetector
from detectron2.modeling.postprocessing import detector_postprocess
from detectron2.structures import Instances, ROIMasks
from torch import Tensor

__all__ = ["KeepEmptyDetections", "postprocess_batch", "postprocess_detections"]

MASK_THRESHOLD = 0.5  # detectron2's detector_postprocess default


def postprocess_detections(results: Instances, height: int, width: int, keep_empty: bool) -> Instances:
    """detectron2's ``detector_postprocess`` (boxes scaled to ``height`` x ``width`` and clipped, empty ones
    dropped); with ``keep_empty`` the empty boxes stay, as in mmdetection's test (``multiclass_nms`` has no area
    filter); their masks are pasted into the image as detectron2 does (empty for an empty box)."""
    if not keep_empty:
        return detector_postprocess(results, height, width)
    scale_x, scale_y = width / results.image_size[1], height / results.image_size[0]
    results = Instances((height, width), **results.get_fields())
    results.pred_boxes.scale(scale_x, scale_y)
    results.pred_boxes.clip(results.image_size)
    if results.has("pred_masks"):
        masks = results.pred_masks
        roi_masks = masks if isinstance(masks, ROIMasks) else ROIMasks(masks[:, 0, :, :])
        results.pred_masks = roi_masks.to_bitmasks(results.pred_boxes, height, width, MASK_THRESHOLD).tensor
    return results


def postprocess_batch(results: List[Instances], batched_inputs: List[Dict[str, Any]], image_sizes) -> List[Dict]:
    return [
        {"instances": postprocess_detections(r, x.get("height", size[0]), x.get("width", size[1]), True)}
        for r, x, size in zip(results, batched_inputs, image_sizes)
    ]


class KeepEmptyDetections(DenseDetector):
    """Mixin of a detectron2 dense detector whose inference keeps the empty boxes when the detector's
    ``keep_empty_detections`` is True (TEST.KEEP_EMPTY_DETECTIONS); training and the default are detectron2's."""

    keep_empty_detections = False

    def forward(self, batched_inputs: List[Dict[str, Tensor]]):
        if self.training or not self.keep_empty_detections:
            return super().forward(batched_inputs)
        images = self.preprocess_image(batched_inputs)
        features = self.backbone(images.tensor)
        features = [features[f] for f in self.head_in_features]
        results = self.forward_inference(images, features, self.head(features))
        return postprocess_batch(results, batched_inputs, images.image_sizes)
