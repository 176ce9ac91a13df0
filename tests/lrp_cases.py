"""A hand-made COCO dataset with hand-computed LRP results, shared by the metric tests and the
evaluator tests."""

from __future__ import annotations

import contextlib
import io
from typing import Dict, List, Tuple

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from alrp_d2.lrp.lrp_metric import OptimalLRP

# ---------------------------------------------------------------------------------------------
# A hand-made dataset. Categories: cat_a (1), cat_b (2, ground truth, no detection), cat_c (3,
# detections, no ground truth). Boxes are XYWH; a detection [0, 0, 10, h] on a ground truth
# [0, 0, 10, 10] has IoU h / 10.
#
# cat_a, 4 counted ground truths (1, 2, 5, 6) and one crowd (3). Detections, by score:
#   0.95 img 1  inside the crowd (crowd IoU 1)      -> ignored
#   0.90 img 1  on GT 1, IoU 0.80                   -> TP
#   0.80 img 1  on GT 2, IoU 0.95                   -> TP   } tied scores
#   0.80 img 2  nowhere                             -> FP   }
#   0.50 img 2  on GT 5, IoU 0.60                   -> TP
#   0.40 img 1  on GT 1 again, IoU 0.70             -> FP (duplicate)
#   0.30 img 2  nowhere                             -> FP
# GT 6 is never detected. LRP at the valid cuts (sum (1-IoU)/0.5 + FP + FN) / (FP + 4):
#   after 0.9: (0.4 + 0 + 3) / 4 = 0.85      after 0.8: (0.5 + 1 + 2) / 5 = 0.70
#   after 0.5: (1.3 + 1 + 1) / 5 = 0.66 *    after 0.4: (1.3 + 2 + 1) / 6 = 0.7167
#   after 0.3: (1.3 + 3 + 1) / 7 = 0.7571
# Between the two 0.8 detections (not a valid cut) LRP would be (0.5 + 0 + 2) / 4 = 0.625.
# oLRP = 0.66 at threshold 0.5: loc = (0.2 + 0.05 + 0.4) / 3, FP = 1 / 4, FN = 1 / 4.
# rho: TP scores (0.9, 0.8, 0.5) vs IoUs (0.8, 0.95, 0.6): ranks (3, 2, 1) vs (2, 3, 1) -> 0.5.
# cat_b: oLRP = 1, FN = 1 (its GT is missed at every threshold), no threshold. cat_c: left out.
# Means: oLRP (0.66 + 1) / 2 = 0.83, FN (0.25 + 1) / 2 = 0.625; loc and FP of cat_a alone.
# AP at IoU 0.9, cat_a: only the IoU 0.95 detection is a TP, ranked 2nd among the counted ones
# -> precision 0.5 up to recall 0.25 (26 of 101 recall thresholds); cat_b: 0; cat_c: no GT.
# ---------------------------------------------------------------------------------------------
CLASS_NAMES = ["cat_a", "cat_b", "cat_c"]
HAND_GROUND_TRUTHS = [
    # (id, image, category, bbox, iscrowd)
    (1, 1, 1, [0, 0, 10, 10], 0),
    (2, 1, 1, [20, 0, 10, 10], 0),
    (3, 1, 1, [50, 50, 40, 40], 1),
    (4, 1, 2, [0, 30, 10, 10], 0),
    (5, 2, 1, [0, 0, 10, 10], 0),
    (6, 2, 1, [20, 20, 10, 10], 0),
]
HAND_DETECTIONS = [
    # (image, category, bbox, score)
    (1, 1, [52, 52, 10, 10], 0.95),
    (1, 1, [0, 0, 10, 8], 0.9),
    (1, 1, [20, 0, 10, 9.5], 0.8),
    (1, 1, [0, 0, 10, 7], 0.4),
    (1, 3, [0, 30, 10, 10], 0.7),
    (2, 1, [100, 100, 10, 10], 0.8),
    (2, 1, [0, 0, 10, 6], 0.5),
    (2, 1, [150, 150, 10, 10], 0.3),
]
HAND_EXPECTED_A = OptimalLRP(olrp=0.66, loc=0.65 / 3, fp=0.25, fn=0.25, threshold=0.5)
HAND_EXPECTED_SUMMARY = {
    "oLRP": 83.0,
    "oLRP_loc": 100 * 0.65 / 3,
    "oLRP_FP": 25.0,
    "oLRP_FN": 62.5,
    "rho": 0.5,
}
HAND_EXPECTED_AP90 = 100 * (26 * 0.5 / 101 + 0.0) / 2
HAND_EXPECTED_THRESHOLDS = {"cat_a": 0.5, "cat_b": None, "cat_c": None}


def hand_made_coco_dict() -> Dict:
    """The hand-made ground truth as a COCO json dict."""
    return {
        "images": [{"id": i, "width": 200, "height": 200, "file_name": f"{i}.jpg"} for i in (1, 2)],
        "annotations": [
            {"id": a, "image_id": i, "category_id": c, "bbox": b, "area": b[2] * b[3], "iscrowd": crowd}
            for a, i, c, b, crowd in HAND_GROUND_TRUTHS
        ],
        "categories": [{"id": i + 1, "name": name} for i, name in enumerate(CLASS_NAMES)],
    }


def run_cocoeval(gt_dict: Dict, detections: List[Dict], max_dets: Tuple[int, int, int] = (1, 10, 100)) -> COCOeval:
    """pycocotools' Python COCOeval (bbox) after evaluate()."""
    coco_gt = COCO()
    coco_gt.dataset = gt_dict
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt.createIndex()
        coco_eval = COCOeval(coco_gt, coco_gt.loadRes(detections), "bbox")
        coco_eval.params.maxDets = list(max_dets)
        coco_eval.evaluate()
    return coco_eval


def hand_made_cocoeval() -> COCOeval:
    detections = [{"image_id": i, "category_id": c, "bbox": b, "score": s} for i, c, b, s in HAND_DETECTIONS]
    return run_cocoeval(hand_made_coco_dict(), detections)
