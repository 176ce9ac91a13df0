"""The ranking-based loss of one detection head over the whole per-device batch."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import cat, nonzero_tuple
from detectron2.modeling.box_regression import Box2BoxTransform
from detectron2.structures import Boxes
from detectron2.utils.events import get_event_storage
from torch import Tensor

from ..config import CLS_LOSSES, validate_alrp_config
from ..engine.self_balance import LocalisationWeight
from ..losses import NonFiniteInputError, alrp_loss_terms, ap_loss_terms, loc_error
from ..losses.global_ranking import RANKINGS, global_mean, ranking_group

__all__ = [
    "DetectionRankingLoss",
    "RankingLossDetector",
    "build_ranking_loss",
    "class_ranking_labels",
    "dense_loc_errors",
    "dense_ranking_losses",
]

logger = logging.getLogger(__name__)

Tensors = List[Tensor]  # one tensor per feature level, or per image


@dataclass(eq=False)
class DetectionRankingLoss:
    """aLRP Loss (or AP Loss with a localisation loss) of one head: all (example, class)
    pairs of the batch in one ranking, as the paper trains (Sec. 5, App. E).

    ``ranking`` chooses the batch: "per_worker" (the paper's training) ranks this worker's
    images; "global" ranks the images of all workers of the default process group as one
    ranking (:mod:`alrp_d2.losses.global_ranking`): every worker gets the global loss values,
    and the logits' and E_loc's gradients are multiplied by the world size so that DDP's
    average is the gradient of one process on the whole batch.

    Returns ``loss_<name>_cls`` and ``loss_<name>_loc``, the latter multiplied by the
    localisation weight; both multiplied by ``loss_weight`` (the RPN's 0.2, App. G.4). Every
    iteration it writes the unweighted components to EventStorage under ``sb/<name>/cls`` and
    ``sb/<name>/loc`` (read by the self-balance hook) and the ratio of the summed negative to
    positive score-gradient magnitudes under ``<name>/grad_ratio`` (paper Fig. 3), with one
    host synchronisation.
    """

    name: str
    cls_loss: str
    delta: float
    loc_weight: LocalisationWeight
    loss_weight: float = 1.0
    eps: float = 1e-5
    ranking: str = "per_worker"

    def __post_init__(self) -> None:
        if self.cls_loss not in CLS_LOSSES:
            raise ValueError(f"cls_loss must be one of {CLS_LOSSES}, got {self.cls_loss!r}")
        if self.ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}, got {self.ranking!r}")

    @property
    def loss_names(self) -> List[str]:
        return [f"loss_{self.name}_cls", f"loss_{self.name}_loc"]

    def __call__(self, logits: Tensor, labels: Tensor, loc_errors: Tensor) -> Dict[str, Tensor]:
        """
        Args:
            logits: (M,) flattened logits of every (example, class) pair of the batch.
            labels: (M,) 1 positive, 0 negative, -1 ignored.
            loc_errors: (P,) E_loc of the positives in the order in which they appear in ``logits``.
        """
        try:
            loss_cls, loss_loc, grad_positive, grad_negative = self._components(logits, labels, loc_errors)
        except NonFiniteInputError as error:
            # Hand detectron2's trainer a non-finite loss: it stops with its FloatingPointError.
            logger.error("%s: %s", self.name, error)
            nan = logits.sum() * float("nan")
            return dict(zip(self.loss_names, (nan, nan)))
        self._record(loss_cls, loss_loc, grad_positive, grad_negative)
        return {
            self.loss_names[0]: self.loss_weight * loss_cls,
            self.loss_names[1]: (self.loss_weight * self.loc_weight.value) * loss_loc,
        }

    def _components(self, logits: Tensor, labels: Tensor, loc_errors: Tensor):
        # Resolved per call: the process group may be initialised after the model is built.
        group = ranking_group(self.ranking)
        if self.cls_loss == "alrp":
            return alrp_loss_terms(logits, labels, loc_errors, self.delta, self.eps, group)
        # "ap_interpolated" is the official APLoss, which has no N_FP gate.
        interpolated = self.cls_loss == "ap_interpolated"
        ranking = ap_loss_terms(logits, labels, self.delta, None if interpolated else self.eps, group, interpolated)
        loss_loc = global_mean(loc_errors, group)
        return ranking.loss, loss_loc, ranking.positive_gradient_magnitude, ranking.negative_gradient_magnitude

    def _record(self, loss_cls: Tensor, loss_loc: Tensor, grad_positive: Tensor, grad_negative: Tensor) -> None:
        values = torch.stack([loss_cls.detach(), loss_loc.detach().to(loss_cls.dtype), grad_positive, grad_negative])
        cls_value, loc_value, positive, negative = values.tolist()
        scalars = {f"sb/{self.name}/cls": cls_value, f"sb/{self.name}/loc": loc_value}
        if positive > 0:
            scalars[f"{self.name}/grad_ratio"] = negative / positive
        get_event_storage().put_scalars(**scalars)


def class_ranking_labels(gt_labels: Tensor, num_classes: int) -> Tensor:
    """Ranking labels of every (example, class) pair from detectron2's per-example labels.

    Args:
        gt_labels: (..., R) class in [0, K) for positives, K for background, -1 for ignored.
        num_classes: K.

    Returns:
        (..., R, K) int8: 1 for (positive, its class), 0 for the other pairs of labelled
        examples, -1 for every pair of an ignored example. Built without host synchronisation.
    """
    positive = (gt_labels >= 0) & (gt_labels < num_classes)
    labels = torch.zeros(*gt_labels.shape, num_classes, dtype=torch.int8, device=gt_labels.device)
    labels.scatter_(-1, gt_labels.clamp(0, num_classes - 1).unsqueeze(-1), positive.unsqueeze(-1).to(torch.int8))
    return labels.masked_fill_((gt_labels < 0).unsqueeze(-1), -1)


def build_ranking_loss(cfg: CfgNode, head: str, delta: float, loss_weight: float = 1.0) -> DetectionRankingLoss:
    """The ranking loss of one head with its own localisation weight, self-balanced from
    MODEL.ALRP.SB_INIT_WEIGHT (Sec. 4.2) or the constant MODEL.ALRP.LOC_WEIGHT (Table 3).

    Its name is MODEL.ALRP.CLS_LOSS prefixed by ``head`` when given: "alrp" for RetinaNet,
    "rpn_alrp" and "box_alrp" for Faster R-CNN.
    """
    alrp = cfg.MODEL.ALRP
    name = f"{head}_{alrp.CLS_LOSS}" if head else alrp.CLS_LOSS
    return DetectionRankingLoss(
        name=name,
        cls_loss=alrp.CLS_LOSS,
        delta=delta,
        loc_weight=LocalisationWeight(
            name, alrp.SB_INIT_WEIGHT if alrp.SB_ENABLED else alrp.LOC_WEIGHT, self_balanced=alrp.SB_ENABLED
        ),
        loss_weight=loss_weight,
        ranking=alrp.RANKING,
    )


def dense_loc_errors(
    box2box_transform: Box2BoxTransform,
    anchors: List[Boxes],
    pred_anchor_deltas: List[Tensor],
    gt_boxes: List[Tensor],
    positive: Tensor,
    kind: str,
    tau: float,
) -> Tensor:
    """E_loc of the positive anchors of a dense head, on their decoded boxes (App. E line 12).

    Args:
        anchors: the anchors of each level (R in total, the same for every image).
        pred_anchor_deltas: per level, (N, R_level, 4) predicted deltas.
        gt_boxes: per image, (R, 4) the box matched to each anchor.
        positive: (N, R) bool.

    Returns:
        (P,) errors of the positives in row-major (image, anchor) order, the order of the
        positives in the flattened (N, R[, K]) logits.
    """
    image_index, anchor_index = nonzero_tuple(positive)
    pred_boxes = box2box_transform.apply_deltas(
        cat(pred_anchor_deltas, dim=1)[image_index, anchor_index], Boxes.cat(anchors).tensor[anchor_index]
    )
    return loc_error(pred_boxes, torch.stack(gt_boxes)[image_index, anchor_index], kind, tau)


def dense_ranking_losses(
    head: Any,
    anchors: List[Boxes],
    pred_logits: Tensors,
    gt_labels: Tensors,
    pred_anchor_deltas: Tensors,
    gt_boxes: Tensors,
) -> Dict[str, Tensor]:
    """The ranking loss of a dense detector (aLRP RetinaNet, aLRP FCOS) over all (anchor, class)
    pairs of the batch: the positives are the (anchor, its GT class) pairs and their E_loc is
    computed on the decoded boxes (:func:`dense_loc_errors`).

    Args:
        head: the detector; its ``ranking_loss``, ``box2box_transform``, ``loc_error_kind``,
            ``tau`` and ``num_classes`` are used.
        gt_labels: per image, (R,) detectron2's anchor labels: class in [0, K), K for background,
            -1 for ignored.
        Other arguments as :meth:`detectron2.modeling.RetinaNet.losses`.
    """
    anchor_labels = torch.stack(gt_labels)  # (N, R)
    positive = (anchor_labels >= 0) & (anchor_labels != head.num_classes)
    loc_errors = dense_loc_errors(
        head.box2box_transform, anchors, pred_anchor_deltas, gt_boxes, positive, head.loc_error_kind, head.tau
    )
    get_event_storage().put_scalar("num_pos_anchors", len(loc_errors) / len(anchor_labels))
    labels = class_ranking_labels(anchor_labels, head.num_classes)
    return head.ranking_loss(cat(pred_logits, dim=1).flatten(), labels.flatten(), loc_errors)


class RankingLossDetector:
    """Mixin of a detectron2 dense detector trained by a ranking loss (aLRP RetinaNet, FoveaBox,
    FCOS): ``ranking_loss`` (a :class:`DetectionRankingLoss` named ``ranking_loss_name`` + the
    loss, with its localisation weight), ``loc_error_kind`` and ``tau`` of E_loc, from
    MODEL.ALRP. Mixed in before detectron2's class: ``class AlrpFCOS(RankingLossDetector, FCOS)``.
    """

    ranking_loss_name: str = ""

    @configurable
    def __init__(self, *, ranking_loss: DetectionRankingLoss, loc_error_kind: str, tau: float, **kwargs):
        """
        Args:
            ranking_loss: the aLRP (or AP) loss of the head and its localisation weight.
            loc_error_kind: "giou" or "iou" (see :func:`alrp_d2.losses.loc_error`).
            tau: positive-labelling IoU threshold that normalises E_loc.
            kwargs: the detector's arguments (its focal-loss ones unused).
        """
        super().__init__(**kwargs)
        self.ranking_loss = ranking_loss
        self.loc_error_kind = loc_error_kind
        self.tau = tau

    @classmethod
    def from_config(cls, cfg: CfgNode) -> Dict[str, Any]:
        validate_alrp_config(cfg)
        alrp = cfg.MODEL.ALRP
        ret = super().from_config(cfg)  # type: ignore[misc]
        ret.update(
            ranking_loss=build_ranking_loss(cfg, cls.ranking_loss_name, alrp.DELTA),
            loc_error_kind=alrp.LOC_ERROR,
            tau=alrp.TAU,
        )
        return ret
