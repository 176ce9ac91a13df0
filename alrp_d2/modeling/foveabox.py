"""FoveaBox (Kong et al., IEEE TIP 2020) as a detectron2 RetinaNet with FoveaBox's locations, box
coding and assignment, as mmdetection 2.x's ``FoveaHead`` that the official aLRP code builds on
(paper Sec. 5.4, App. G)."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from detectron2.config import configurable
from detectron2.layers import cat
from detectron2.modeling import META_ARCH_REGISTRY
from detectron2.modeling.anchor_generator import DefaultAnchorGenerator
from detectron2.modeling.meta_arch.retinanet import RetinaNet, RetinaNetHead
from detectron2.structures import Boxes, Instances
from detectron2.utils.events import get_event_storage
from fvcore.nn import sigmoid_focal_loss_jit, smooth_l1_loss
from torch import Tensor

from ..checks.errors import require_config
from .batch_matcher import label_anchors_batched
from .dense_head_inputs import dense_head_inputs
from .official_inference import OfficialOrderInference
from .padding import valid_entries
from .postprocessing import KeepEmptyDetections

__all__ = ["FoveaBox", "FoveaBoxTransform", "FoveaMatcher"]

Tensors = List[Tensor]  # one tensor per feature level, or per image

# Largest predicted distance: exp(SCALE_CLAMP) base edges (detectron2's log(1000 / 16)).
SCALE_CLAMP = math.log(1000.0 / 16)


class FoveaBoxTransform:
    """FoveaBox's box coding (its Eq. 4, mmdet ``FoveaHead``): the log of the distances from a
    location to the four sides of a box, in units of the level's base edge, clamped to
    [1/16, 16] for targets.

    A location is represented by a square "anchor" centred on it whose side is the base edge,
    so the transform has detectron2's ``get_deltas`` / ``apply_deltas`` interface and the
    dense-detector helpers (decoding, E_loc on decoded boxes) apply unchanged. Decoding clamps the
    predicted log-distances at ``scale_clamp`` (detectron2's convention), or not when it is None (the
    official heads). Both compute in the dtype of their inputs (float32 unless AMP casts them), as the
    official heads: centre -/+ edge * exp(delta).
    """

    def __init__(
        self, min_ratio: float = 1.0 / 16, max_ratio: float = 16.0, scale_clamp: Optional[float] = SCALE_CLAMP
    ):
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self.scale_clamp = scale_clamp

    @staticmethod
    def _centres_edges(anchors: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        edge = anchors[:, 2] - anchors[:, 0]
        return 0.5 * (anchors[:, 0] + anchors[:, 2]), 0.5 * (anchors[:, 1] + anchors[:, 3]), edge

    def get_deltas(self, anchors: Tensor, boxes: Tensor) -> Tensor:
        """(R, 4) anchors and (R, 4) xyxy boxes -> (R, 4) log((cx - x1, cy - y1, x2 - cx, y2 - cy) / edge)."""
        cx, cy, edge = self._centres_edges(anchors)
        distances = torch.stack([cx - boxes[:, 0], cy - boxes[:, 1], boxes[:, 2] - cx, boxes[:, 3] - cy], dim=1)
        return torch.log((distances / edge[:, None]).clamp(min=self.min_ratio, max=self.max_ratio))

    def apply_deltas(self, deltas: Tensor, anchors: Tensor) -> Tensor:
        """Inverse of :meth:`get_deltas` (without the target clamp): (R, 4) deltas -> (R, 4) xyxy boxes."""
        anchors = anchors.to(deltas.dtype)
        cx, cy, edge = self._centres_edges(anchors)
        if self.scale_clamp is not None:
            deltas = deltas.clamp(max=self.scale_clamp)
        distances = edge[:, None] * deltas.exp()
        return torch.stack(
            [cx - distances[:, 0], cy - distances[:, 1], cx + distances[:, 2], cy + distances[:, 3]], dim=1
        )

    def target_boxes(self, anchors: Tensor, boxes: Tensor) -> Tensor:
        """The boxes that the (clamped) targets of ``boxes`` decode to: the boxes themselves unless a side is
        closer than 1/16 or farther than 16 base edges from the location (the official aLRP FoveaBox's E_loc
        target)."""
        return self.apply_deltas(self.get_deltas(anchors, boxes), anchors)


class FoveaMatcher:
    """FoveaBox's assignment (mmdet ``FoveaHead._get_target_single``) for a whole batch.

    On each level, an object whose sqrt(w * h) is in the level's scale range (bounds included:
    an object can belong to two levels, three on exact bounds) claims the cells
    ``ceil(x1 / s + (1 - sigma) w / 2s - 1/2) <= column <= floor(x1 / s + (1 + sigma) w / 2s - 1/2)``,
    both clamped to the map (and likewise for rows): the cells whose centres lie in its fovea,
    the central ``sigma`` fraction of the box. A cell claimed by several objects belongs to the
    smallest. FoveaBox ignores nothing.
    """

    def __init__(self, strides: Sequence[int], scale_ranges: Sequence[Tuple[float, float]], sigma: float):
        self.strides = list(strides)
        self.scale_ranges = [(float(low), float(high)) for low, high in scale_ranges]
        self.sigma = sigma

    @torch.no_grad()
    def match_batch(self, gt_boxes: Tensor, num_gt: List[int], anchors: List[Boxes]) -> Tuple[Tensor, Tensor]:
        """See :class:`alrp_d2.modeling.batch_matcher.BatchMatcher`; ``anchors`` are the cells of
        each level (squares centred on the cell centres)."""
        max_gt = gt_boxes.shape[1]
        valid = valid_entries(num_gt, max_gt, gt_boxes.device)
        widths, heights = gt_boxes[..., 2] - gt_boxes[..., 0], gt_boxes[..., 3] - gt_boxes[..., 1]
        areas = widths * heights  # (N, G)
        scales = areas.sqrt()
        owners, positives = [], []
        for anchors_l, stride, (low, high) in zip(anchors, self.strides, self.scale_ranges):
            centres = anchors_l.get_centers()  # (R_l, 2), (column + 1/2) * stride, row-major
            columns, rows = (centres / stride).floor().unbind(dim=1)
            last_column, last_row = columns.max(), rows.max()
            scaled = gt_boxes / stride
            half_w = 0.5 * widths / stride
            half_h = 0.5 * heights / stride
            left = torch.ceil(scaled[..., 0] + (1 - self.sigma) * half_w - 0.5).clamp(min=0).minimum(last_column)
            right = torch.floor(scaled[..., 0] + (1 + self.sigma) * half_w - 0.5).clamp(min=0).minimum(last_column)
            top = torch.ceil(scaled[..., 1] + (1 - self.sigma) * half_h - 0.5).clamp(min=0).minimum(last_row)
            bottom = torch.floor(scaled[..., 1] + (1 + self.sigma) * half_h - 0.5).clamp(min=0).minimum(last_row)
            in_level = valid & (scales >= low) & (scales <= high)
            claims = (
                in_level[..., None]
                & (columns >= left[..., None])
                & (columns <= right[..., None])
                & (rows >= top[..., None])
                & (rows <= bottom[..., None])
            )  # (N, G, R_l)
            claim_area = torch.where(claims, areas[..., None], torch.full_like(areas[..., None], float("inf")))
            smallest, owner = claim_area.min(dim=1)  # (N, R_l)
            positive = torch.isfinite(smallest)
            owners.append(torch.where(positive, owner, 0))
            positives.append(positive.to(torch.int8))
        return cat(owners, dim=1), cat(positives, dim=1)


@META_ARCH_REGISTRY.register()
class FoveaBox(KeepEmptyDetections, OfficialOrderInference, RetinaNet):
    """FoveaBox: detectron2's RetinaNet with one location per cell of P3-P7 (a square "anchor"
    of the level's base edge centred on the cell, :class:`FoveaBoxTransform`'s box coding) and
    :class:`FoveaMatcher`'s assignment: each level is responsible for the objects whose
    sqrt(w * h) is in its scale range, and an object's positives are the cells in its fovea
    (Sec. 3.2-3.3 of the paper).

    Trained with focal loss (gamma 1.5, alpha 0.4, normalised by positives + images) and
    Smooth L1 (beta 0.11) on the encoded distances of the positives, as mmdetection's FoveaBox
    config the aLRP paper compares with (Table 7 / App. G). Inference is RetinaNet's with the
    per-level selection of the official FoveaHead (:class:`OfficialOrderInference`); the official
    heads' decoding, clipping and empty boxes with MODEL.FOVEABOX.CLAMP_PREDICTED_DISTANCES False,
    MODEL.FOVEABOX.CLIP_TO_LAST_PIXEL and TEST.KEEP_EMPTY_DETECTIONS.
    """

    num_classes_key = "MODEL.FOVEABOX.NUM_CLASSES"  # the number of classes the dataset checks compare

    official_inference = True  # FoveaBox always selects detections in the official order

    @configurable
    def __init__(self, *, clip_to_last_pixel: bool = False, keep_empty_detections: bool = False, **kwargs):
        """
        Args:
            clip_to_last_pixel: clip test boxes to [0, W - 1] x [0, H - 1] instead of [0, W] x [0, H].
            keep_empty_detections: keep the detections that clipping made empty.
            kwargs: :class:`detectron2.modeling.RetinaNet` arguments.
        """
        super().__init__(**kwargs)
        self.clip_to_last_pixel = clip_to_last_pixel
        self.keep_empty_detections = keep_empty_detections

    @classmethod
    def from_config(cls, cfg) -> Dict:
        fovea = cfg.MODEL.FOVEABOX
        backbone, head_args = dense_head_inputs(cfg, fovea)
        strides = [backbone.output_shape()[f].stride for f in fovea.IN_FEATURES]
        for key in ("BASE_EDGES", "SCALE_RANGES"):
            require_config(
                len(fovea[key]) == len(fovea.IN_FEATURES),
                f"MODEL.FOVEABOX.{key}",
                fovea[key],
                f"must have one entry per input feature {list(fovea.IN_FEATURES)}",
            )
        require_config(0.0 < fovea.SIGMA <= 1.0, "MODEL.FOVEABOX.SIGMA", fovea.SIGMA, "must be in (0, 1]")
        return {
            "backbone": backbone,
            "head": RetinaNetHead(num_anchors=1, **head_args),
            "head_in_features": fovea.IN_FEATURES,
            "anchor_generator": DefaultAnchorGenerator(
                sizes=[[float(e)] for e in fovea.BASE_EDGES], aspect_ratios=[1.0], strides=strides, offset=0.5
            ),
            "box2box_transform": FoveaBoxTransform(
                scale_clamp=SCALE_CLAMP if fovea.CLAMP_PREDICTED_DISTANCES else None
            ),
            "anchor_matcher": FoveaMatcher(strides, fovea.SCALE_RANGES, fovea.SIGMA),
            "num_classes": fovea.NUM_CLASSES,
            "focal_loss_alpha": fovea.FOCAL_LOSS_ALPHA,
            "focal_loss_gamma": fovea.FOCAL_LOSS_GAMMA,
            "smooth_l1_beta": fovea.SMOOTH_L1_BETA,
            "test_score_thresh": fovea.SCORE_THRESH_TEST,
            "test_topk_candidates": fovea.TOPK_CANDIDATES_TEST,
            "test_nms_thresh": fovea.NMS_THRESH_TEST,
            "max_detections_per_image": cfg.TEST.DETECTIONS_PER_IMAGE,
            "pixel_mean": cfg.MODEL.PIXEL_MEAN,
            "pixel_std": cfg.MODEL.PIXEL_STD,
            "input_format": cfg.INPUT.FORMAT,
            "clip_to_last_pixel": fovea.CLIP_TO_LAST_PIXEL,
            "keep_empty_detections": cfg.TEST.KEEP_EMPTY_DETECTIONS,
        }

    @torch.no_grad()
    def label_anchors(self, anchors: List[Boxes], gt_instances: List[Instances]) -> Tuple[List[Tensor], List[Tensor]]:
        """Per image, (R,) labels (class of the positives, K for background) and (R, 4) the box
        each location is assigned (:class:`FoveaMatcher`)."""
        return label_anchors_batched(self.anchor_matcher, anchors, gt_instances, self.num_classes)

    def losses(
        self, anchors: List[Boxes], pred_logits: Tensors, gt_labels: Tensors, pred_deltas: Tensors, gt_boxes: Tensors
    ) -> Dict[str, Tensor]:
        """Focal loss over all (location, class) pairs / (positives + images), and Smooth L1
        summed over the four encoded distances of each positive / positives (mmdet ``FoveaHead.loss``)."""
        labels = torch.stack(gt_labels)  # (N, R)
        image_index, location_index = torch.nonzero(labels != self.num_classes, as_tuple=True)
        num_positives = len(image_index)
        get_event_storage().put_scalar("num_pos_anchors", num_positives / len(labels))
        classes = torch.arange(self.num_classes, device=labels.device)
        targets = (labels[..., None] == classes).to(pred_logits[0].dtype)  # background rows are all zero
        loss_cls = sigmoid_focal_loss_jit(
            cat(pred_logits, dim=1), targets, alpha=self.focal_loss_alpha, gamma=self.focal_loss_gamma, reduction="sum"
        )
        target_deltas = self.box2box_transform.get_deltas(
            Boxes.cat(anchors).tensor[location_index], torch.stack(gt_boxes)[image_index, location_index]
        )
        loss_box = smooth_l1_loss(
            cat(pred_deltas, dim=1)[image_index, location_index],
            target_deltas,
            self.smooth_l1_beta,
            reduction="sum",
        )
        return {
            "loss_cls": loss_cls / (num_positives + len(labels)),
            "loss_box_reg": loss_box / max(num_positives, 1),
        }
