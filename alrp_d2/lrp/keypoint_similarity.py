"""Object keypoint similarity (OKS), the IoU of keypoint detection, vectorised over (detection, ground truth) pairs
with the arithmetic of pycocotools' ``COCOeval.computeOks``.

For a ground truth with labelled keypoints (visibility v > 0), OKS = mean over them of exp(-d^2 / (2 s^2 k^2)), d the
distance of the detected keypoint to the labelled one, s^2 the ground truth's area and k = 2 sigma the keypoint's
falloff. The unlabelled ones (v = 0) count nowhere. For a ground truth without labelled keypoints (a crowd region, or
an object whose keypoints are all unlabelled), d is each detected keypoint's distance to the box that doubles the
ground truth's box about it, and the mean runs over all keypoints."""

from __future__ import annotations

import numpy as np

#: COCO's sigmas of the person's 17 keypoints (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles), as
#: pycocotools' ``Params.kpt_oks_sigmas`` and detectron2's ``TEST.KEYPOINT_OKS_SIGMAS`` default.
COCO_PERSON_SIGMAS = (
    np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87, 0.89, 0.89])
    / 10.0
)


def _outside_doubled_box(det_xy: np.ndarray, gt_box: np.ndarray) -> np.ndarray:
    """Per keypoint, the x and y distances (E x K x 2) of the detected keypoints to the ground truth's XYWH box
    doubled about it (``[x - w, x + 2w] x [y - h, y + 2h]``); 0 inside."""
    low = gt_box[:, None, :2] - gt_box[:, None, 2:]
    high = gt_box[:, None, :2] + gt_box[:, None, 2:] * 2
    return np.maximum(0.0, low - det_xy) + np.maximum(0.0, det_xy - high)


def keypoint_similarities(
    det_xy: np.ndarray, gt_keypoints: np.ndarray, gt_box: np.ndarray, gt_area: np.ndarray, sigmas: np.ndarray
) -> np.ndarray:
    """OKS of E (detection, ground truth) pairs: ``det_xy`` the detected keypoints (E x K x 2), ``gt_keypoints`` the
    ground truths' (E x K x 3: x, y, visibility), ``gt_box`` their XYWH boxes (E x 4), ``gt_area`` their areas (E)
    and ``sigmas`` each pair's per-keypoint sigmas (E x K)."""
    labelled = np.greater(gt_keypoints[:, :, 2], 0)
    has_labelled: np.ndarray = labelled.any(axis=1)
    offsets = np.where(
        has_labelled[:, None, None], det_xy - gt_keypoints[:, :, :2], _outside_doubled_box(det_xy, gt_box)
    )
    variances = (sigmas * 2) ** 2
    scaled = (offsets[:, :, 0] ** 2 + offsets[:, :, 1] ** 2) / variances / (gt_area[:, None] + np.spacing(1)) / 2
    counted = labelled | ~has_labelled[:, None]
    return np.sum(np.exp(-scaled), axis=1, where=counted) / counted.sum(axis=1)


def keypoint_extent(keypoints: np.ndarray) -> np.ndarray:
    """The XYWH box spanned by each row's keypoints (N x K x 2 or 3; all of them, as pycocotools' ``loadRes`` boxes
    keypoint results)."""
    if len(keypoints) == 0:
        return np.zeros((0, 4))
    low, high = keypoints[:, :, :2].min(axis=1), keypoints[:, :, :2].max(axis=1)
    return np.concatenate([low, high - low], axis=1)
