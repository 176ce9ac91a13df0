"""Per-level selection of detections in the order of the official aLRP code (mmdetection 2.x)."""

from __future__ import annotations

from typing import Tuple

from detectron2.modeling.meta_arch.dense_detector import DenseDetector
from detectron2.structures import Boxes, Instances
from torch import Tensor

__all__ = ["OfficialOrderInference"]


class OfficialOrderInference(DenseDetector):
    """A dense detector whose inference selects the detections of each level as the official test
    does (mmdetection 2.x ``AnchorHead._get_bboxes_single`` / ``FoveaHead._get_bboxes_single`` with
    ``nms_pre``): the ``topk_candidates`` anchors (locations) with the highest best-class score,
    then every (anchor, class) pair above ``score_thresh``, boxes clipped to the image before the
    per-class NMS of ``inference_single_image``. detectron2's order (threshold, the top-k
    (anchor, class) pairs, clip after NMS) is kept when ``official_inference`` is False. With
    ``clip_to_last_pixel`` the boxes are clipped to [0, W - 1] x [0, H - 1] (the official FoveaBox heads),
    otherwise to [0, W] x [0, H].

    Mixed in before detectron2's class: ``class AlrpRetinaNet(OfficialOrderInference, RetinaNet)``.
    """

    official_inference: bool  # set by the detector (MODEL.ALRP.OFFICIAL_INFERENCE for AlrpRetinaNet)
    clip_to_last_pixel = False

    def _decode_per_level_predictions(
        self,
        anchors: Boxes,
        pred_scores: Tensor,
        pred_deltas: Tensor,
        score_thresh: float,
        topk_candidates: int,
        image_size: Tuple[int, int],
    ) -> Instances:
        if not self.official_inference:
            return super()._decode_per_level_predictions(
                anchors, pred_scores, pred_deltas, score_thresh, topk_candidates, image_size
            )
        if len(pred_scores) > topk_candidates:
            top_anchors = pred_scores.max(dim=1).values.topk(topk_candidates).indices
            anchors, pred_scores, pred_deltas = anchors[top_anchors], pred_scores[top_anchors], pred_deltas[top_anchors]
        # detectron2's thresholding and decoding, keeping every pair above the threshold.
        instances = super()._decode_per_level_predictions(
            anchors, pred_scores, pred_deltas, score_thresh, pred_scores.numel(), image_size
        )
        height, width = image_size
        instances.pred_boxes.clip((height - 1, width - 1) if self.clip_to_last_pixel else image_size)
        return instances
