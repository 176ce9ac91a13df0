"""The keypoint entries of COCO files checked for ``--iou-type keypoints`` (:mod:`.coco_files` names the file and the
entry): ``keypoints`` lists of x, y, v for each keypoint of the sigmas, COCO's visibility v in 0, 1, 2 and
``num_keypoints`` counting the labelled ones (v > 0) in the ground truth; x, y and a finite third value (a score) in
the results."""

from __future__ import annotations

import math
from typing import Any, Dict


def _numbers_problem(values: Any, count: int) -> str:
    if not isinstance(values, list) or len(values) != 3 * count:
        return (
            f"'keypoints' must be a list of {3 * count} numbers (x, y, v for each of the {count} keypoints of the "
            f"sigmas), got {values!r:.200}"
        )
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        return f"'keypoints' must hold finite numbers, got {values!r:.200}"
    return ""


def ground_truth_keypoint_problem(ann: Dict[str, Any], count: int) -> str:
    """What is wrong with the keypoints of a ground-truth annotation; empty when nothing is."""
    problem = _numbers_problem(ann.get("keypoints"), count)
    if problem:
        return problem
    visibility = ann["keypoints"][2::3]
    if any(v not in (0, 1, 2) for v in visibility):
        return f"'keypoints' visibilities (every third value) must be 0, 1 or 2, got {visibility}"
    labelled, given = sum(1 for v in visibility if v > 0), ann.get("num_keypoints")
    if given != labelled or isinstance(given, bool):
        return f"'num_keypoints' must be the number of labelled keypoints (v > 0), {labelled}, got {given!r}"
    return ""


def detection_keypoint_problem(det: Dict[str, Any], count: int) -> str:
    """What is wrong with the keypoints of a keypoint result; empty when nothing is."""
    return _numbers_problem(det.get("keypoints"), count)
