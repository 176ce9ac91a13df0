"""What the dense detectors of the project share: the head's inputs from a config, batched
labelling by a matcher that sees the whole batch, and the ranking loss over all (anchor,
class) pairs of the batch."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Protocol, Tuple

import torch
from detectron2.config import CfgNode
from detectron2.layers import cat
from detectron2.modeling import Backbone, build_backbone
from detectron2.structures import Boxes, Instances
from detectron2.utils.events import get_event_storage
from torch import Tensor

from .padding import pad_per_image
from .ranking_loss import HeadRankingLoss, PositiveTargets

__all__ = [
    "BatchMatcher",
    "DensePositives",
    "dense_head_inputs",
    "dense_ranking_losses",
    "label_anchors_batched",
]


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


class BatchMatcher(Protocol):
    """A matcher that labels the anchors of all images of a batch in one call (ATSS, FoveaBox)."""

    def match_batch(self, gt_boxes: Tensor, num_gt: List[int], anchors: List[Boxes]) -> Tuple[Tensor, Tensor]:
        """(N, G, 4) padded ground truths, their numbers per image and the anchors of each
        level -> (N, R) matched ground-truth index (0 for negatives) and (N, R) int8 labels
        (1 positive, 0 negative)."""
        ...


def label_anchors_batched(
    matcher: BatchMatcher, anchors: List[Boxes], gt_instances: List[Instances], num_classes: int
) -> Tuple[List[Tensor], List[Tensor]]:
    """detectron2's ``label_anchors`` result for a :class:`BatchMatcher`: per image, (R,) labels
    (the class of positives, ``num_classes`` for background) and (R, 4) matched boxes (the
    first ground truth's for background anchors, zeros in an image without ground truth)."""
    gt_boxes = pad_per_image([x.gt_boxes.tensor for x in gt_instances], 0.0)  # (N, G, 4)
    gt_classes = pad_per_image([x.gt_classes for x in gt_instances], num_classes)  # (N, G)
    matched_idxs, anchor_labels = matcher.match_batch(gt_boxes, [len(x) for x in gt_instances], anchors)
    gt_labels = torch.where(anchor_labels == 1, gt_classes.gather(1, matched_idxs), num_classes)
    matched_gt_boxes = gt_boxes.gather(1, matched_idxs.unsqueeze(-1).expand(-1, -1, 4))
    return list(gt_labels.unbind(0)), list(matched_gt_boxes.unbind(0))


class DensePositives(NamedTuple):
    """The positive anchors of a dense head's batch, rows being (image, anchor) pairs in
    row-major order: their targets, anchors, predicted deltas and matched boxes."""

    targets: PositiveTargets
    anchors: Tensor
    pred_deltas: Tensor
    gt_boxes: Tensor

    @staticmethod
    def gather(
        targets: PositiveTargets, anchors: List[Boxes], pred_deltas: List[Tensor], gt_boxes: List[Tensor]
    ) -> DensePositives:
        """``anchors``: per level (the same for every image); ``pred_deltas``: per level
        (N, R_level, 4); ``gt_boxes``: per image (R, 4)."""
        all_anchors = Boxes.cat(anchors).tensor
        anchor_index = targets.row % len(all_anchors)
        return DensePositives(
            targets,
            all_anchors[anchor_index],
            cat(pred_deltas, dim=1).reshape(-1, 4)[targets.row],
            torch.stack(gt_boxes).reshape(-1, 4)[targets.row],
        )


def dense_ranking_losses(
    ranking_loss: HeadRankingLoss,
    box2box_transform: Any,
    targets: PositiveTargets,
    anchors: List[Boxes],
    pred_logits: List[Tensor],
    pred_deltas: List[Tensor],
    gt_boxes: List[Tensor],
    loc_errors_of: Optional[Callable[[DensePositives], Tensor]] = None,
    num_positives_key: str = "num_pos_anchors",
) -> Dict[str, Tensor]:
    """The ranking loss of a dense head (aLRP RetinaNet, FoveaBox, FCOS, the RPN) over all
    (anchor, class) pairs of the batch: ``targets`` from the per-image labels (e.g.
    ``PositiveTargets.of_labels(torch.stack(gt_labels), K)``), the other arguments as
    :meth:`detectron2.modeling.RetinaNet.losses` (``pred_logits`` per level (N, R_level, K), or
    (N, R_level) for the RPN's objectness). ``loc_errors_of`` gives the positives' localisation
    errors; by default E_loc of their boxes decoded by ``box2box_transform`` (App. E line 12).
    The number of positives per image is logged under ``num_positives_key``."""
    positives = DensePositives.gather(targets, anchors, pred_deltas, gt_boxes)
    if loc_errors_of is None:
        pred_boxes = box2box_transform.apply_deltas(positives.pred_deltas, positives.anchors)
        loc_errors = ranking_loss.loc_errors(pred_boxes, positives.gt_boxes)
    else:
        loc_errors = loc_errors_of(positives)
    get_event_storage().put_scalar(num_positives_key, len(targets.row) / len(gt_boxes))
    logits = cat(pred_logits, dim=1).reshape(len(targets.valid), -1)
    return ranking_loss(logits, targets, loc_errors)
