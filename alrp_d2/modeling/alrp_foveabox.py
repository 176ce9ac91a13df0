"""aLRP FoveaBox: FoveaBox trained with aLRP Loss (paper Sec. 5.4, App. G), or with AP Loss +
Smooth L1 (the paper's AP Loss row)."""

from __future__ import annotations

from typing import Dict, List

from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY
from detectron2.structures import Boxes
from torch import Tensor

from ..checks.errors import built_naming_config_keys, require_argument
from .dense_boxes import DenseBoxes, DensePositives
from .dense_ranking_detector import DenseRankingDetector
from .foveabox import FoveaBox

__all__ = ["FOVEABOX_LOC_TARGETS", "AlrpFoveaBox", "DecodedTargetBoxes"]

#: E_loc's target of aLRP FoveaBox (MODEL.FOVEABOX.ALRP_LOC_TARGET): the ground-truth box, or the box decoded from
#: the clamped target distances (the official head).
FOVEABOX_LOC_TARGETS = ("gt_box", "decoded_target")


class DecodedTargetBoxes(DenseBoxes):
    """FoveaBox's rows whose localisation targets are the boxes decoded from their target distances, clamped to
    [1/16, 16] base edges (the official head's E_loc target)."""

    def target_boxes(self, positives: DensePositives) -> Tensor:
        return self.box2box_transform.target_boxes(positives.anchors, positives.gt_boxes)


@META_ARCH_REGISTRY.register()
class AlrpFoveaBox(DenseRankingDetector, FoveaBox):
    """FoveaBox (head, assignment, inference) whose loss is one ranking over all (location,
    class) pairs of all images of the per-device batch (:class:`~alrp_d2.modeling.HeadRankingLoss`
    named "fovea": ``loss_fovea_cls`` and ``loss_fovea_loc``); the positives are the (fovea cell,
    its object's class) pairs.

    With aLRP Loss, E_loc is the GIoU error of the decoded boxes (App. E line 12; MODEL.ALRP.LOC_ERROR and TAU,
    whose paper values "giou" and 0.5 give 1 - GIoU, as the official head), against the ground-truth box or, with
    MODEL.FOVEABOX.ALRP_LOC_TARGET "decoded_target" (the official head), against the box decoded from the target
    distances clamped to [1/16, 16] base edges. With an AP criterion, the localisation loss is MODEL.ALRP.AP_LOC_LOSS:
    "smooth_l1" (beta MODEL.FOVEABOX.SMOOTH_L1_BETA, mean over the encoded distances, as the official AP Loss
    FoveaBox) or "giou".
    """

    ranking_loss_name = "fovea"

    @built_naming_config_keys({"loc_target": "MODEL.FOVEABOX.ALRP_LOC_TARGET"})
    @configurable
    def __init__(self, *, loc_target: str = "gt_box", **kwargs):
        """
        Args:
            loc_target: the localisation target, one of :data:`FOVEABOX_LOC_TARGETS`.
            kwargs: :class:`DenseRankingDetector` and :class:`FoveaBox` arguments.
        """
        super().__init__(**kwargs)
        require_argument(
            loc_target in FOVEABOX_LOC_TARGETS,
            type(self).__name__,
            "loc_target",
            loc_target,
            f"must be one of {FOVEABOX_LOC_TARGETS}",
        )
        self.loc_target = loc_target

    @classmethod
    def from_config(cls, cfg) -> Dict:
        ret = super().from_config(cfg)
        ret["loc_target"] = cfg.MODEL.FOVEABOX.ALRP_LOC_TARGET
        return ret

    def dense_boxes(self, anchors: List[Boxes], pred_anchor_deltas: List[Tensor], gt_boxes: List[Tensor]) -> DenseBoxes:
        """The rows' boxes, whose targets are the ground truths or their clamped targets' boxes."""
        boxes = DecodedTargetBoxes if self.loc_target == "decoded_target" else DenseBoxes
        return boxes(self.box2box_transform, anchors, pred_anchor_deltas, gt_boxes, self.smooth_l1_beta)
