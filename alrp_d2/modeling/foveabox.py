"""FoveaBox (Kong et al., IEEE TIP 2020) on detectron2's DenseDetector, as mmdetection 2.x's
``FoveaHead`` that the official aLRP code builds on (paper Sec. 5.4, App. G)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import cat
from detectron2.modeling import META_ARCH_REGISTRY, Backbone, build_backbone
from detectron2.modeling.anchor_generator import DefaultAnchorGenerator
from detectron2.modeling.meta_arch.retinanet import RetinaNet, RetinaNetHead
from detectron2.structures import Boxes, ImageList, Instances
from detectron2.utils.events import get_event_storage
from fvcore.nn import sigmoid_focal_loss_jit, smooth_l1_loss
from torch import Tensor, nn
from torch.nn import functional as F

from .official_inference import OfficialOrderInference

__all__ = ["FoveaBox", "FoveaBoxTransform"]

# Largest predicted distance: exp(SCALE_CLAMP) base edges (detectron2's log(1000 / 16)).
SCALE_CLAMP = math.log(1000.0 / 16)


class FoveaBoxTransform:
    """FoveaBox's box coding (its Eq. 4, mmdet ``FoveaHead``): the log of the distances from a
    location to the four sides of a box, in units of the level's base edge, clamped to
    [1/16, 16] for targets.

    A location is represented by a square "anchor" centred on it whose side is the base edge,
    so the transform has detectron2's ``get_deltas`` / ``apply_deltas`` interface and the
    dense-detector helpers (decoding, E_loc on decoded boxes) apply unchanged.
    """

    def __init__(self, min_ratio: float = 1.0 / 16, max_ratio: float = 16.0, scale_clamp: float = SCALE_CLAMP):
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
        distances = deltas.clamp(max=self.scale_clamp).exp() * edge[:, None]
        return torch.stack(
            [cx - distances[:, 0], cy - distances[:, 1], cx + distances[:, 2], cy + distances[:, 3]], dim=1
        )


@META_ARCH_REGISTRY.register()
class FoveaBox(OfficialOrderInference):
    """FoveaBox: one location per cell of P3-P7, each level responsible for the objects whose
    sqrt(area) is in its scale range; the positives of an object are the cells whose centres lie
    in its fovea, the central ``sigma`` fraction of the box (Sec. 3.2-3.3 of the paper).

    Trained with focal loss (gamma 1.5, alpha 0.4, normalised by positives + images) and
    Smooth L1 (beta 0.11) on the encoded distances of the positives, as mmdetection's FoveaBox
    config the aLRP paper compares with (Table 7 / App. G).
    """

    @configurable
    def __init__(
        self,
        *,
        backbone: Backbone,
        head: nn.Module,
        head_in_features: List[str],
        num_classes: int,
        base_edges: Sequence[float],
        scale_ranges: Sequence[Tuple[float, float]],
        sigma: float = 0.4,
        focal_loss_alpha: float = 0.4,
        focal_loss_gamma: float = 1.5,
        smooth_l1_beta: float = 0.11,
        test_score_thresh: float = 0.05,
        test_topk_candidates: int = 1000,
        test_nms_thresh: float = 0.5,
        max_detections_per_image: int = 100,
        pixel_mean: Sequence[float],
        pixel_std: Sequence[float],
    ):
        """
        Args:
            head: a module mapping per-level features to ([N, K, H, W] logits, [N, 4, H, W] deltas).
            base_edges: per level, the edge length that normalises the distances (16 ... 256).
            scale_ranges: per level, the inclusive range of sqrt(w * h) of the objects it learns.
            sigma: the fovea's side as a fraction of the box side (0.4).
            Other arguments as :class:`detectron2.modeling.RetinaNet`.
        """
        super().__init__(backbone, head, head_in_features, pixel_mean=pixel_mean, pixel_std=pixel_std)
        if not len(base_edges) == len(scale_ranges) == len(head_in_features):
            raise ValueError(
                f"FoveaBox needs one base edge and one scale range per input feature {list(head_in_features)}, "
                f"got {len(base_edges)} base edges and {len(scale_ranges)} scale ranges"
            )
        if not 0.0 < sigma <= 1.0:
            raise ValueError(f"FoveaBox sigma must be in (0, 1], got {sigma}")
        shapes = backbone.output_shape()
        self.strides = [shapes[f].stride for f in head_in_features]
        self.num_classes = num_classes
        self.base_edges = [float(e) for e in base_edges]
        self.scale_ranges = [(float(low), float(high)) for low, high in scale_ranges]
        self.sigma = sigma
        # One square "anchor" of side base edge per cell, centred on the cell centre.
        self.anchor_generator = DefaultAnchorGenerator(
            sizes=[[e] for e in self.base_edges], aspect_ratios=[1.0], strides=self.strides, offset=0.5
        )
        self.box2box_transform = FoveaBoxTransform()
        self.focal_loss_alpha = focal_loss_alpha
        self.focal_loss_gamma = focal_loss_gamma
        self.smooth_l1_beta = smooth_l1_beta
        self.test_score_thresh = test_score_thresh
        self.test_topk_candidates = test_topk_candidates
        self.test_nms_thresh = test_nms_thresh
        self.max_detections_per_image = max_detections_per_image

    @classmethod
    def from_config(cls, cfg) -> Dict:
        fovea = cfg.MODEL.FOVEABOX
        backbone, head_args = dense_head_inputs(cfg, fovea)
        return {
            "backbone": backbone,
            "head": RetinaNetHead(num_anchors=1, **head_args),
            "head_in_features": fovea.IN_FEATURES,
            "num_classes": fovea.NUM_CLASSES,
            "base_edges": fovea.BASE_EDGES,
            "scale_ranges": fovea.SCALE_RANGES,
            "sigma": fovea.SIGMA,
            "focal_loss_alpha": fovea.FOCAL_LOSS_ALPHA,
            "focal_loss_gamma": fovea.FOCAL_LOSS_GAMMA,
            "smooth_l1_beta": fovea.SMOOTH_L1_BETA,
            "test_score_thresh": fovea.SCORE_THRESH_TEST,
            "test_topk_candidates": fovea.TOPK_CANDIDATES_TEST,
            "test_nms_thresh": fovea.NMS_THRESH_TEST,
            "max_detections_per_image": cfg.TEST.DETECTIONS_PER_IMAGE,
            "pixel_mean": cfg.MODEL.PIXEL_MEAN,
            "pixel_std": cfg.MODEL.PIXEL_STD,
        }

    def forward_training(self, images: ImageList, features: List[Tensor], predictions, gt_instances):
        pred_logits, pred_deltas = self._transpose_dense_predictions(predictions, [self.num_classes, 4])
        anchors = self.anchor_generator(features)
        gt_labels, gt_boxes = self.label_anchors(anchors, gt_instances)
        return self.losses(anchors, pred_logits, gt_labels, pred_deltas, gt_boxes)

    @torch.no_grad()
    def label_anchors(self, anchors: List[Boxes], gt_instances: List[Instances]) -> Tuple[Tensor, Tensor]:
        """FoveaBox's assignment (mmdet ``FoveaHead._get_target_single``), for the whole batch.

        On each level, an object whose sqrt(w * h) is in the level's scale range (bounds
        included: an object can belong to two levels, three on exact bounds) claims the cells ``ceil(x1 / s + (1 -
        sigma) w / 2s - 1/2) <= column <= floor(x1 / s + (1 + sigma) w / 2s - 1/2)``, both
        clamped to the map (and likewise for rows); a cell claimed by several objects belongs to
        the smallest.

        Returns:
            (N, R) labels: class in [0, K) for positives, K for background (FoveaBox ignores nothing);
            (N, R, 4) the box each location is assigned (zeros for background).
        """
        boxes, classes, valid = _padded_targets(gt_instances, anchors[0].tensor.device, self.num_classes)
        widths, heights = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
        areas = widths * heights  # (N, M)
        scales = areas.sqrt()
        labels, matched = [], []
        for anchors_l, stride, (low, high) in zip(anchors, self.strides, self.scale_ranges):
            centres = anchors_l.get_centers()  # (R_l, 2), (column + 1/2) * stride, row-major
            columns, rows = (centres / stride).floor().unbind(dim=1)
            last_column, last_row = columns.max(), rows.max()
            scaled = boxes / stride
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
            )  # (N, M, R_l)
            claim_area = torch.where(claims, areas[..., None], torch.full_like(areas[..., None], float("inf")))
            smallest, owner = claim_area.min(dim=1)  # (N, R_l)
            positive = torch.isfinite(smallest)
            labels.append(torch.where(positive, classes.gather(1, owner), torch.full_like(owner, self.num_classes)))
            owner_boxes = boxes.gather(1, owner[..., None].expand(-1, -1, 4))
            matched.append(owner_boxes * positive[..., None])
        return cat(labels, dim=1), cat(matched, dim=1)

    def losses(
        self,
        anchors: List[Boxes],
        pred_logits: List[Tensor],
        gt_labels: Tensor,
        pred_deltas: List[Tensor],
        gt_boxes: Tensor,
    ) -> Dict[str, Tensor]:
        """Focal loss over all (location, class) pairs / (positives + images), and Smooth L1
        summed over the four encoded distances of each positive / positives (mmdet ``FoveaHead.loss``)."""
        num_images = len(gt_labels)
        positive = gt_labels != self.num_classes
        num_positives = positive.sum()
        get_event_storage().put_scalar("num_pos_anchors", num_positives.item() / num_images)
        targets = F.one_hot(gt_labels, self.num_classes + 1)[..., :-1].to(pred_logits[0].dtype)
        loss_cls = sigmoid_focal_loss_jit(
            cat(pred_logits, dim=1), targets, alpha=self.focal_loss_alpha, gamma=self.focal_loss_gamma, reduction="sum"
        )
        image_index, location_index = positive.nonzero(as_tuple=True)
        target_deltas = self.box2box_transform.get_deltas(
            Boxes.cat(anchors).tensor[location_index], gt_boxes[image_index, location_index]
        )
        loss_box = smooth_l1_loss(
            cat(pred_deltas, dim=1)[image_index, location_index], target_deltas, self.smooth_l1_beta, reduction="sum"
        )
        return {
            "loss_cls": loss_cls / (num_positives + num_images),
            "loss_box_reg": loss_box / num_positives.clamp(min=1),
        }

    # Inference as detectron2's RetinaNet (sigmoid scores, per-image NMS over all levels), with the
    # per-level selection of the official FoveaHead (OfficialOrderInference).
    forward_inference = RetinaNet.forward_inference
    inference_single_image = RetinaNet.inference_single_image


def dense_head_inputs(cfg: CfgNode, head_cfg: CfgNode) -> Tuple[Backbone, Dict[str, Any]]:
    """The backbone of ``cfg`` and the arguments of a RetinaNet-style head (one anchor per
    location) on its ``head_cfg.IN_FEATURES`` levels (``head_cfg``: MODEL.FOVEABOX or MODEL.FCOS)."""
    backbone = build_backbone(cfg)
    shapes = backbone.output_shape()
    feature_shapes = [shapes[f] for f in head_cfg.IN_FEATURES]
    head_args = dict(
        input_shape=feature_shapes,
        num_classes=head_cfg.NUM_CLASSES,
        conv_dims=[feature_shapes[0].channels] * head_cfg.NUM_CONVS,
        norm=head_cfg.NORM,
        prior_prob=head_cfg.PRIOR_PROB,
    )
    return backbone, head_args


def _padded_targets(gt_instances: List[Instances], device: torch.device, num_classes: int):
    """(N, M, 4) boxes, (N, M) classes (``num_classes`` for padding) and (N, M) validity of
    the batch's objects, M = max(1, objects per image)."""
    counts = [len(x) for x in gt_instances]
    size = max(1, *counts)
    boxes = torch.zeros(len(gt_instances), size, 4, device=device)
    classes = torch.full((len(gt_instances), size), num_classes, dtype=torch.int64, device=device)
    valid = torch.arange(size, device=device)[None] < torch.tensor(counts, device=device)[:, None]
    if any(counts):
        boxes[valid] = cat([x.gt_boxes.tensor.to(device) for x in gt_instances])
        classes[valid] = cat([x.gt_classes.to(device) for x in gt_instances])
    return boxes, classes, valid
