"""The official LRP-Error fixtures (tests/fixtures/lrp_official, tools/lrp_reference.py): the COCO files, the official
results in this project's keys and scale, and the same detections as the per-image dicts of ``alrp_d2.lrp.LRP``."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import torch
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lrp_official"
CASES = ("boxes", "boxes_crowded", "masks", "keypoints")
#: The keypoints of the keypoint cases' objects (COCO's person's, the official default sigmas).
KEYPOINTS = 17
#: Keypoints with tied scores: where the official code also cuts between tied detections (docs/lrp.md).
TIED_CASE = "keypoints_tied"
#: The official per-class arrays and the project's keys (x100 but the threshold).
PER_CLASS = {
    "olrp": "oLRP_per_class",
    "olrp_loc": "oLRP_loc_per_class",
    "olrp_fp": "oLRP_FP_per_class",
    "olrp_fn": "oLRP_FN_per_class",
    "lrp_opt_thr": "thresholds",
}


def case_files(case: str) -> Tuple[Path, Path]:
    return FIXTURES / f"{case}_gt.json", FIXTURES / f"{case}_dt.json"


def official(case: str) -> Dict[str, Any]:
    """The official results of ``case`` in the project's keys: means x100, per-class lists by category id (NaN:
    undefined)."""
    reference = json.loads((FIXTURES / f"{case}_official.json").read_text())
    results: Dict[str, Any] = {key: 100.0 * value for key, value in reference["summary"].items()}
    results["iou_type"] = reference["iou_type"]
    results["classes"] = reference["category_ids"]
    for key, ours in PER_CLASS.items():
        scale = 1.0 if key == "lrp_opt_thr" else 100.0
        results[ours] = [math.nan if v is None else scale * v for v in reference[key]]
    return results


def coco_pair(case: str) -> Tuple[COCO, COCO]:
    gt_file, dt_file = case_files(case)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_file))
        return coco_gt, coco_gt.loadRes(str(dt_file))


def _masks(coco: COCO, anns: List[Dict[str, Any]], size: Tuple[int, int]) -> torch.Tensor:
    if not anns:
        return torch.zeros((0, *size), dtype=torch.bool)
    return torch.from_numpy(np.stack([mask_utils.decode(coco.annToRLE(ann)) for ann in anns]).astype(bool))


def _keypoints(anns: List[Dict[str, Any]]) -> torch.Tensor:
    return torch.tensor([a["keypoints"] for a in anns], dtype=torch.float64).reshape(len(anns), KEYPOINTS, 3)


def _image_dict(coco: COCO, image_id: int, with_scores: bool, iou_type: str) -> Dict[str, torch.Tensor]:
    anns = coco.imgToAnns.get(image_id, [])
    boxes = torch.from_numpy(np.asarray([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4))
    entry = {"labels": torch.tensor([a["category_id"] for a in anns], dtype=torch.int64)}
    if iou_type == "keypoints":
        entry["keypoints"] = _keypoints(anns)
        if not with_scores:  # the ground truth's boxes and object areas, for OKS
            entry["boxes"] = torch.cat([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], dim=1)
            entry["area"] = torch.tensor([a["area"] for a in anns], dtype=torch.float64)
    elif iou_type == "bbox":
        entry["boxes"] = torch.cat([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], dim=1)
    else:
        image = coco.imgs[image_id]
        entry["masks"] = _masks(coco, anns, (image["height"], image["width"]))
    if with_scores:
        entry["scores"] = torch.tensor([a["score"] for a in anns], dtype=torch.float64)
    else:
        entry["iscrowd"] = torch.tensor([a["iscrowd"] for a in anns], dtype=torch.int64)
    return entry


def metric_inputs(case: str) -> Tuple[List[Dict[str, torch.Tensor]], List[Dict[str, torch.Tensor]]]:
    """``(preds, target)`` of every image of ``case`` for ``LRP.update`` (XYXY boxes, masks, or keypoints with the
    ground truth's boxes and areas)."""
    coco_gt, coco_dt = coco_pair(case)
    iou_type = official(case)["iou_type"]
    image_ids = sorted(coco_gt.getImgIds())
    preds = [_image_dict(coco_dt, i, True, iou_type) for i in image_ids]
    target = [_image_dict(coco_gt, i, False, iou_type) for i in image_ids]
    return preds, target


def by_class(results: Dict[str, Any], key: str) -> Dict[int, float]:
    """A per-class list of ``results`` keyed by class (category id or label)."""
    return {int(c): float(v) for c, v in zip(list(results["classes"]), list(results[key]))}
