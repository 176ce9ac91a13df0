"""detectron2's focal-loss RetinaNet with Correlation Loss added: the baseline of the official Corr RetinaNet."""

from __future__ import annotations

from typing import Dict, List

import torch
from detectron2.config import configurable
from detectron2.layers import cat
from detectron2.modeling import META_ARCH_REGISTRY, RetinaNet
from detectron2.structures import Boxes
from torch import Tensor

from ..losses.global_ranking import ranking_group
from .correlation_term import CorrelationTerm, correlation_terms
from .dense_boxes import DenseBoxes
from .ranking_targets import PositiveTargets

__all__ = ["CorrelationRetinaNet"]


@META_ARCH_REGISTRY.register()
class CorrelationRetinaNet(RetinaNet):
    """detectron2's RetinaNet (focal loss, Smooth L1 or GIoU of its config) plus ``loss_retinanet_corr``, the
    Correlation Loss of its positives (:class:`CorrelationTerm`, MODEL.ALRP.CORR_KIND, CORR_WEIGHT, CORR_PER_LEVEL;
    over all workers with MODEL.ALRP.RANKING "global")."""

    @configurable
    def __init__(self, *, correlation: CorrelationTerm, ranking: str = "per_worker", **kwargs):
        """
        Args:
            correlation: the term.
            ranking: "per_worker" or "global": the positives the correlation is of.
            kwargs: :class:`detectron2.modeling.RetinaNet` arguments.
        """
        super().__init__(**kwargs)
        self.correlation = correlation
        self.ranking = ranking

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        terms = correlation_terms(cfg)
        if not terms:
            raise ValueError("Invalid config value MODEL.ALRP.CORR_WEIGHT=0.0: CorrelationRetinaNet needs a weight > 0")
        ret.update(correlation=terms[0], ranking=cfg.MODEL.ALRP.RANKING)
        return ret

    def losses(
        self,
        anchors: List[Boxes],
        pred_logits: List[Tensor],
        gt_labels: List[Tensor],
        pred_anchor_deltas: List[Tensor],
        gt_boxes: List[Tensor],
    ) -> Dict[str, Tensor]:
        losses = super().losses(anchors, pred_logits, gt_labels, pred_anchor_deltas, gt_boxes)
        positives = PositiveTargets.of_labels(torch.stack(gt_labels), self.num_classes)
        boxes = DenseBoxes(self.box2box_transform, anchors, pred_anchor_deltas, gt_boxes, self.smooth_l1_beta)
        logits = cat(pred_logits, dim=1).reshape(len(positives.valid), -1)
        losses["loss_retinanet_corr"] = self.correlation(logits, positives, boxes, ranking_group(self.ranking))
        return losses
