"""detectron2-style focal-loss dense detectors with Correlation Loss added: the baselines of the official Corr
RetinaNet and Corr FoveaBox."""

from __future__ import annotations

from typing import Any, Dict

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import cat
from detectron2.modeling import META_ARCH_REGISTRY, RetinaNet
from torch import Tensor

from ..checks.errors import require_config
from ..criteria.correlation_term import CorrelationTerm, correlation_terms
from ..criteria.targets import PositiveTargets
from ..losses.global_ranking import ranking_group
from .dense_boxes import DenseBoxes
from .foveabox import FoveaBox

__all__ = ["CorrelationFoveaBox", "CorrelationRetinaNet", "WithCorrelationLoss"]


class WithCorrelationLoss:
    """Mixin of a RetinaNet-style detector (``losses(anchors, pred_logits, gt_labels, pred_anchor_deltas,
    gt_boxes)``) whose losses gain ``loss_<correlation_loss_name>_corr``, the Correlation Loss of its positives
    (:class:`CorrelationTerm`, MODEL.ALRP.CORR_KIND, CORR_WEIGHT, CORR_PER_LEVEL; over all workers with
    MODEL.ALRP.RANKING "global"). Mixed in before the detector: ``class CorrelationRetinaNet(WithCorrelationLoss,
    RetinaNet)``."""

    correlation_loss_name = ""
    box2box_transform: Any
    num_classes: int
    smooth_l1_beta: float

    @configurable
    def __init__(self, *, correlation: CorrelationTerm, ranking: str = "per_worker", **kwargs):
        """
        Args:
            correlation: the term.
            ranking: "per_worker" or "global": the positives the correlation is of.
            kwargs: the detector's arguments.
        """
        super().__init__(**kwargs)
        self.correlation = correlation
        self.ranking = ranking

    @classmethod
    def from_config(cls, cfg: CfgNode) -> Dict[str, Any]:
        ret = super().from_config(cfg)  # type: ignore[misc]
        terms = correlation_terms(cfg)
        alrp = cfg.MODEL.ALRP
        require_config(bool(terms), "MODEL.ALRP.CORR_WEIGHT", alrp.CORR_WEIGHT, f"{cls.__name__} needs a weight > 0")
        ret.update(correlation=terms[0], ranking=alrp.RANKING)
        return ret

    def losses(self, *inputs: Any) -> Dict[str, Tensor]:
        """The detector's losses and ``loss_<name>_corr``; arguments as :meth:`detectron2.modeling.RetinaNet.losses`
        (anchors per level, per-level logits, per-image anchor labels, per-level deltas, per-image matched boxes)."""
        losses = super().losses(*inputs)  # type: ignore[misc]
        anchors, pred_logits, gt_labels, pred_anchor_deltas, gt_boxes = inputs
        positives = PositiveTargets.of_labels(torch.stack(gt_labels), self.num_classes)
        boxes = DenseBoxes(self.box2box_transform, anchors, pred_anchor_deltas, gt_boxes, self.smooth_l1_beta)
        logits = cat(pred_logits, dim=1).reshape(len(positives.valid), -1)
        group = ranking_group(self.ranking)
        losses[f"loss_{self.correlation_loss_name}_corr"] = self.correlation(logits, positives, boxes, group)
        return losses


@META_ARCH_REGISTRY.register()
class CorrelationRetinaNet(WithCorrelationLoss, RetinaNet):
    """detectron2's RetinaNet (focal loss, Smooth L1 or GIoU of its config) plus ``loss_retinanet_corr``: the official
    Corr RetinaNet's losses (``configs/corr_retinanet_R50_FPN_1x.yaml``)."""

    correlation_loss_name = "retinanet"


@META_ARCH_REGISTRY.register()
class CorrelationFoveaBox(WithCorrelationLoss, FoveaBox):
    """FoveaBox (focal loss + Smooth L1, mmdetection's ``FoveaHead``) plus ``loss_fovea_corr``: the official Corr
    FoveaBox's losses (``configs/foveabox_corr_R50_500.yaml``)."""

    correlation_loss_name = "fovea"
