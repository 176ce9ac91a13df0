"""Adaptive Training Sample Selection (Zhang et al., "Bridging the Gap Between Anchor-based and
Anchor-free Detection via Adaptive Training Sample Selection", CVPR 2020, Alg. 1)."""

from __future__ import annotations

from itertools import accumulate
from typing import List, Tuple

import torch
from detectron2.structures import Boxes, pairwise_iou
from torch import Tensor

from ..checks.errors import require_argument
from .padding import pad_per_image, valid_entries

__all__ = ["AtssMatcher"]


class AtssMatcher:
    """Labels anchors positive for a ground truth when they are among the ``topk`` anchors
    closest to its centre on some pyramid level, their IoU is at least the mean + std of the
    IoUs of those candidates, and their centre lies inside the ground truth. An anchor
    positive for several ground truths takes the one with the highest IoU. There is no
    ignored label: every other anchor is negative.
    """

    #: minimum distance of an anchor centre to the GT border to count as inside (as in ATSS).
    INSIDE_MARGIN = 0.01

    def __init__(self, topk: int = 9):
        integer = isinstance(topk, int) and not isinstance(topk, bool) and topk >= 1
        require_argument(integer, type(self).__name__, "topk", topk, "must be an integer >= 1")
        self.topk = topk

    def __call__(self, gt_boxes: Boxes, anchors: List[Boxes]) -> Tuple[Tensor, Tensor]:
        """
        Args:
            gt_boxes: G ground-truth boxes of one image.
            anchors: the anchors of each pyramid level (R anchors in total).

        Returns:
            matched_idxs: (R,) int64 index of the matched ground truth (0 for negatives).
            labels: (R,) int8, 1 for positives and 0 for negatives (as detectron2's Matcher).
        """
        matched_idxs, labels = self.match_batch(pad_per_image([gt_boxes.tensor], 0.0), [len(gt_boxes)], anchors)
        return matched_idxs[0], labels[0]

    def match_batch(self, gt_boxes: Tensor, num_gt: List[int], anchors: List[Boxes]) -> Tuple[Tensor, Tensor]:
        """All images of a batch at once; every ground truth is one row of the same computation.

        Args:
            gt_boxes: (N, G, 4) ground-truth boxes, image ``n`` holding ``num_gt[n]`` valid rows
                (see :func:`pad_per_image`).
            num_gt: the number of ground truths of each image.
            anchors: the anchors of each pyramid level (R anchors in total, the same for every image).

        Returns:
            matched_idxs: (N, R) int64 index into the image's ground truths (0 for negatives).
            labels: (N, R) int8, 1 for positives and 0 for negatives.
        """
        num_images, max_gt = gt_boxes.shape[:2]
        rows = Boxes(gt_boxes.reshape(-1, 4))
        valid = valid_entries(num_gt, max_gt, gt_boxes.device)
        all_anchors = Boxes.cat(anchors)
        ious = pairwise_iou(rows, all_anchors)  # NG x R
        anchor_centers = all_anchors.get_centers()
        # Exact distances, as the official assigner: cdist's matrix-product form is off by up to ~0.01 px at
        # 512 px, differently for different numbers of rows, which would make labels depend on the batch.
        distances = torch.cdist(rows.get_centers(), anchor_centers, compute_mode="donot_use_mm_for_euclid_dist")
        candidates = self._closest_per_level(distances, [len(level) for level in anchors])  # NG x C

        candidate_ious = ious.gather(1, candidates)
        correction = 1 if candidates.shape[1] > 1 else 0
        threshold = candidate_ious.mean(1) + candidate_ious.std(1, correction=correction)
        positive = (
            (candidate_ious >= threshold[:, None])
            & self._centers_inside(anchor_centers[candidates], rows.tensor)
            & valid.reshape(-1, 1)
        )

        positive_ious = torch.full_like(ious, -1.0)
        positive_ious.scatter_(1, candidates, torch.where(positive, candidate_ious, -1.0))
        best_iou, matched_idxs = positive_ious.view(num_images, max_gt, -1).max(dim=1)
        labels = best_iou > -1.0
        return torch.where(labels, matched_idxs, 0), labels.to(torch.int8)

    def _closest_per_level(self, distances: Tensor, level_sizes: List[int]) -> Tensor:
        """Indices of the ``topk`` anchors nearest to each GT centre on every level."""
        candidates = []
        offsets = [0, *accumulate(level_sizes)]
        for level_distances, offset in zip(torch.split(distances, level_sizes, dim=1), offsets):
            k = min(self.topk, level_distances.shape[1])
            candidates.append(level_distances.topk(k, dim=1, largest=False).indices + offset)
        return torch.cat(candidates, dim=1)

    def _centers_inside(self, centers: Tensor, gt_boxes: Tensor) -> Tensor:
        """(G, C, 2) candidate centres strictly inside their (G, 4) ground truth."""
        x, y = centers.unbind(-1)
        x1, y1, x2, y2 = (coord[:, None] for coord in gt_boxes.unbind(-1))
        margins = torch.stack([x - x1, y - y1, x2 - x, y2 - y], dim=-1)
        return margins.min(dim=-1).values > self.INSIDE_MARGIN
