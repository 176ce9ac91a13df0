"""What the dense detectors of the project share: the head's inputs from a config, batched
labelling by a matcher that sees the whole batch, and the ranking loss over all (anchor,
class) pairs of the batch (:class:`DenseRankingDetector`)."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import cat
from detectron2.modeling import Backbone, build_backbone
from detectron2.structures import Boxes, Instances
from detectron2.utils.events import get_event_storage
from fvcore.nn import smooth_l1_loss
from torch import Tensor

from ..config import require_config
from ..losses.localisation_error import paired_iou_giou
from .padding import pad_per_image
from .ranking_loss import HeadRankingLoss, PositiveTargets, RankSortTargets, Targets

__all__ = [
    "BatchMatcher",
    "DensePositives",
    "DenseRankingDetector",
    "dense_head_inputs",
    "dense_ranking_loss",
    "dense_targets",
    "label_anchors_batched",
    "predicted_overlaps",
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

    def loc_errors(self, ranking_loss: HeadRankingLoss, box2box_transform: Any) -> Tensor:
        """E_loc of the boxes decoded from the predicted deltas (App. E line 12)."""
        pred_boxes = box2box_transform.apply_deltas(self.pred_deltas, self.anchors)
        return ranking_loss.loc_errors(pred_boxes, self.gt_boxes)

    def smooth_l1(self, box2box_transform: Any, beta: float) -> Tensor:
        """Smooth L1 of each positive's predicted deltas against its encoded target, averaged over the four (the
        localisation loss of the official AP Loss heads)."""
        target_deltas = box2box_transform.get_deltas(self.anchors, self.gt_boxes)
        return smooth_l1_loss(self.pred_deltas, target_deltas, beta).mean(dim=1)


@torch.no_grad()
def predicted_overlaps(
    box2box_transform: Any, anchors: List[Boxes], pred_deltas: List[Tensor], gt_boxes: List[Tensor]
) -> Tensor:
    """(N * R,) the IoU of every (image, anchor) row's predicted box with its matched box, detached:
    Rank & Sort Loss's targets (meaningful for the positive rows). ``anchors``: per level (the same
    for every image); ``pred_deltas``: per level (N, R_level, 4); ``gt_boxes``: per image (R, 4)."""
    deltas = cat(pred_deltas, dim=1)
    all_anchors = Boxes.cat(anchors).tensor.repeat(len(deltas), 1)
    pred_boxes = box2box_transform.apply_deltas(deltas.reshape(-1, 4), all_anchors)
    return paired_iou_giou(pred_boxes, torch.stack(gt_boxes).reshape(-1, 4))[0]


def dense_targets(
    ranking_loss: HeadRankingLoss,
    gt_labels: List[Tensor],
    num_classes: Optional[int],
    box2box_transform: Any,
    anchors: List[Boxes],
    pred_deltas: List[Tensor],
    gt_boxes: List[Tensor],
) -> Targets:
    """The ranking targets of a dense head from its per-image (R,) anchor labels (classes, or the
    RPN's 1 / 0 / -1 with ``num_classes`` None): :class:`PositiveTargets`, or with Rank & Sort Loss
    :class:`RankSortTargets` from the IoUs of the predicted boxes (:func:`predicted_overlaps`)."""
    labels = torch.stack(gt_labels)
    if not ranking_loss.value_balanced:
        if num_classes is None:
            return PositiveTargets.of_objectness(labels)
        return PositiveTargets.of_labels(labels, num_classes)
    overlaps = predicted_overlaps(box2box_transform, anchors, pred_deltas, gt_boxes)
    if num_classes is None:
        return RankSortTargets.of_objectness(labels, overlaps)
    return RankSortTargets.of_labels(labels, num_classes, overlaps)


def dense_ranking_loss(
    ranking_loss: HeadRankingLoss,
    targets: Targets,
    loc_errors: Tensor,
    pred_logits: List[Tensor],
    num_positives_key: str = "num_pos_anchors",
) -> Dict[str, Tensor]:
    """The ranking loss of a dense head over all (anchor, class) pairs of the batch, from its
    per-level (N, R_level, K) logits, or (N, R_level) for the RPN's objectness, and the
    localisation errors of ``targets.box``; the number of positives per image is logged under
    ``num_positives_key``."""
    num_images = len(pred_logits[0])
    get_event_storage().put_scalar(num_positives_key, len(targets.box.row) / num_images)
    logits = cat(pred_logits, dim=1).reshape(len(targets.box.valid), -1)
    return ranking_loss(logits, targets, loc_errors)


class DenseRankingDetector:
    """Mixin of a detectron2 dense detector (RetinaNet, FCOS) trained by one
    :class:`HeadRankingLoss` over all (anchor, class) pairs of the batch, named
    ``ranking_loss_name``: its constructor argument ``ranking_loss`` (from MODEL.ALRP) and its
    ``losses``. Mixed in before detectron2's class: ``class AlrpRetinaNet(DenseRankingDetector,
    RetinaNet)``. A subclass changes the positives' localisation errors by overriding
    :meth:`positive_loc_errors`, and allows Rank & Sort Loss (MODEL.ALRP.CLS_LOSS "rank_sort") with
    ``rank_sort_supported``."""

    ranking_loss_name = ""
    rank_sort_supported = False
    ranking_loss: HeadRankingLoss
    box2box_transform: Any
    num_classes: int

    @configurable
    def __init__(self, *, ranking_loss: HeadRankingLoss, **kwargs):
        """
        Args:
            ranking_loss: the head's aLRP (or AP) loss.
            kwargs: the detector's arguments (its focal-loss ones unused).
        """
        super().__init__(**kwargs)
        self.ranking_loss = ranking_loss

    @classmethod
    def from_config(cls, cfg: CfgNode) -> Dict[str, Any]:
        ret = super().from_config(cfg)  # type: ignore[misc]
        alrp = cfg.MODEL.ALRP
        require_config(
            alrp.CLS_LOSS != "rank_sort" or cls.rank_sort_supported,
            "MODEL.ALRP.CLS_LOSS",
            alrp.CLS_LOSS,
            f"{cls.__name__} does not support Rank & Sort Loss (AlrpRetinaNet, RankSortATSS and aLRP Faster R-CNN do)",
        )
        ret["ranking_loss"] = HeadRankingLoss.from_config(cfg, cls.ranking_loss_name, delta=alrp.DELTA, tau=alrp.TAU)
        return ret

    def losses(self, *inputs: Any) -> Dict[str, Tensor]:
        """``loss_<name>_cls`` and ``loss_<name>_loc`` (see :class:`HeadRankingLoss`) from the
        inputs of :meth:`ranking_losses`."""
        return self.ranking_losses(*inputs)[0]

    def ranking_losses(
        self,
        anchors: List[Boxes],
        pred_logits: List[Tensor],
        gt_labels: List[Tensor],
        pred_anchor_deltas: List[Tensor],
        gt_boxes: List[Tensor],
    ) -> Tuple[Dict[str, Tensor], DensePositives]:
        """:meth:`losses` and the positives of the localisation loss they were computed on; arguments as
        :meth:`detectron2.modeling.RetinaNet.losses`."""
        targets = dense_targets(
            self.ranking_loss,
            gt_labels,
            self.num_classes,
            self.box2box_transform,
            anchors,
            pred_anchor_deltas,
            gt_boxes,
        )
        positives = DensePositives.gather(targets.box, anchors, pred_anchor_deltas, gt_boxes)
        losses = dense_ranking_loss(self.ranking_loss, targets, self.positive_loc_errors(positives), pred_logits)
        return losses, positives

    def positive_loc_errors(self, positives: DensePositives) -> Tensor:
        """The positives' localisation errors: E_loc of their decoded boxes."""
        return positives.loc_errors(self.ranking_loss, self.box2box_transform)
