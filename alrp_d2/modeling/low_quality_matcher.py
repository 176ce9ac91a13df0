"""detectron2's ``Matcher`` with the low-quality rule of mmdetection's ``MaxIoUAssigner``, which the official aLRP
RetinaNet and RPNs use (paper configs; docs/paper_notes.md, "Low-quality matches")."""

from __future__ import annotations

from typing import List, Tuple

import torch
from detectron2.modeling.matcher import Matcher
from torch import Tensor

from ..checks.errors import require_argument

__all__ = ["LOW_QUALITY_MATCH_GTS", "MinIoULowQualityMatcher"]

# The ground truth of a low-quality match (a ground truth's best anchor below the positive IoU;
# MODEL.ALRP.LOW_QUALITY_MATCH_GT): "max_iou", the one the anchor overlaps most (detectron2's Matcher); "best_anchor",
# the one it is the best anchor of, the last such ground truth when several are (mmdetection's MaxIoUAssigner, the
# official code).
LOW_QUALITY_MATCH_GTS = ("max_iou", "best_anchor")


class MinIoULowQualityMatcher(Matcher):
    """detectron2's Matcher with low-quality matches (Faster R-CNN's rule (i): each ground truth's best
    predictions, ties included, become positives) made only for the ground truths whose best IoU is at least
    ``min_iou`` (mmdetection's ``min_pos_iou``: 0.3 in the official RPNs, 0 in the official RetinaNet).

    ``low_quality_gt`` chooses the ground truth such a positive is matched to (:data:`LOW_QUALITY_MATCH_GTS`):
    "max_iou" keeps detectron2's, the one the prediction overlaps most; "best_anchor" is mmdetection's
    ``MaxIoUAssigner(gt_max_assign_all=True)``: every prediction whose IoU equals a ground truth's best is
    matched to it, also a prediction already positive for another ground truth, and when several ground truths
    claim it the last one wins. With ``min_iou=0`` and "max_iou" it is detectron2's Matcher. No host
    synchronisation beyond detectron2's."""

    def __init__(self, thresholds: List[float], labels: List[int], *, min_iou: float, low_quality_gt: str = "max_iou"):
        super().__init__(thresholds, labels, allow_low_quality_matches=True)
        require_argument(
            low_quality_gt in LOW_QUALITY_MATCH_GTS,
            type(self).__name__,
            "low_quality_gt",
            low_quality_gt,
            f"must be one of {LOW_QUALITY_MATCH_GTS}",
        )
        self.min_iou = min_iou
        self.low_quality_gt = low_quality_gt

    def __call__(self, match_quality_matrix: Tensor) -> Tuple[Tensor, Tensor]:
        matches, match_labels = super().__call__(match_quality_matrix)
        if self.low_quality_gt == "best_anchor" and match_quality_matrix.numel() > 0:
            best = match_quality_matrix.max(dim=1, keepdim=True).values
            claims = (match_quality_matrix == best) & (best >= self.min_iou)  # (G, R)
            gt_number = torch.arange(1, len(claims) + 1, device=claims.device)[:, None]
            last_claim = torch.where(claims, gt_number, 0).amax(dim=0)  # 0: no ground truth claims it
            matches = torch.where(last_claim > 0, last_claim - 1, matches)
        return matches, match_labels

    def set_low_quality_matches_(self, match_labels: Tensor, match_quality_matrix: Tensor) -> None:
        """detectron2's low-quality matching restricted to the rows (ground truths) whose best IoU >= min_iou:
        the other rows become NaN, which equals no row maximum (no host synchronisation)."""
        eligible = match_quality_matrix.max(dim=1, keepdim=True).values >= self.min_iou
        super().set_low_quality_matches_(match_labels, match_quality_matrix.where(eligible, torch.nan))
