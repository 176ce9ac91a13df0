"""Time of the LRP metrics against the COCO evaluation they are computed from.

Builds a synthetic result set (default: 5,000 images, 80 classes, about 7 ground truths per
image of which about 1 % are crowds, 100 detections per image: jittered copies of the ground
truths, mostly of the right class, and random boxes of random classes), then in one run times

* COCOeval: what detectron2's COCOEvaluator runs (``loadRes``, ``evaluate``, ``accumulate``,
  ``summarize``) with its fast ``COCOeval_opt`` (``--impl python``: pycocotools' COCOeval);
* LRP: matching at IoU 0.5 read from that COCOeval, oLRP and components, rho and AP90;

and prints both times and their ratio.

    python benchmarks/eval_speed.py                  # 5,000 images
    python benchmarks/eval_speed.py --images 500
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from typing import Dict, List, Tuple

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from detectron2.evaluation.coco_evaluation import _evaluate_predictions_on_coco  # noqa: E402
from detectron2.evaluation.fast_eval_api import COCOeval_opt  # noqa: E402

from alrp_d2.evaluation.coco_lrp_evaluation import AP90_IOU, ap_at_iou  # noqa: E402
from alrp_d2.lrp.coco_matching import detection_matches  # noqa: E402
from alrp_d2.lrp.lrp_metric import LRP_TAU, evaluate_classes, summarise  # noqa: E402

WIDTH, HEIGHT = 640, 480
NUM_CLASSES = 80
GT_PER_IMAGE = 7
DETS_PER_IMAGE = 100
CROWD_FRACTION = 0.01


def random_boxes(rng: np.random.Generator, count: int) -> np.ndarray:
    """XYWH boxes with log-uniform sides between 8 and 320 pixels inside the image."""
    sides = np.exp(rng.uniform(np.log(8), np.log(320), size=(count, 2)))
    corners = rng.uniform(0, 1, size=(count, 2)) * ([WIDTH, HEIGHT] - sides)
    return np.concatenate([corners, sides], axis=1)


def jittered(rng: np.random.Generator, boxes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Copies of ``boxes`` moved and rescaled by a few percent to a third of their size, and
    scores that fall, noisily, with the size of the jitter."""
    scale = rng.uniform(0.02, 0.35, size=(len(boxes), 1))
    shift = rng.normal(0, 1, size=(len(boxes), 2)) * scale * boxes[:, 2:]
    sides = boxes[:, 2:] * np.exp(rng.normal(0, 1, size=(len(boxes), 2)) * scale)
    scores = np.clip(0.95 - 1.5 * scale[:, 0] + rng.normal(0, 0.2, len(boxes)), 0.01, 1.0)
    return np.concatenate([boxes[:, :2] + shift, sides], axis=1), scores


def class_frequencies(rng: np.random.Generator) -> np.ndarray:
    """A long-tailed class distribution, as in COCO."""
    weights = 1.0 / np.arange(1, NUM_CLASSES + 1) ** 0.8
    return rng.permutation(weights / weights.sum())


def synthetic_image(
    rng: np.random.Generator, image_id: int, frequencies: np.ndarray, next_ann_id: int
) -> Tuple[List[Dict], List[Dict]]:
    num_gt = int(rng.poisson(GT_PER_IMAGE))
    gt_boxes = random_boxes(rng, num_gt)
    gt_classes = rng.choice(NUM_CLASSES, size=num_gt, p=frequencies) + 1
    crowd = rng.random(num_gt) < CROWD_FRACTION
    annotations = [
        {
            "id": next_ann_id + i,
            "image_id": image_id,
            "category_id": int(gt_classes[i]),
            "bbox": gt_boxes[i].tolist(),
            "area": float(gt_boxes[i, 2] * gt_boxes[i, 3]),
            "iscrowd": int(crowd[i]),
        }
        for i in range(num_gt)
    ]
    copies = np.minimum(rng.poisson(3, size=num_gt), DETS_PER_IMAGE // max(num_gt, 1))
    source = np.repeat(np.arange(num_gt), copies)
    near_boxes, near_scores = jittered(rng, gt_boxes[source])
    near_classes = np.where(
        rng.random(len(source)) < 0.8, gt_classes[source], rng.integers(1, NUM_CLASSES + 1, len(source))
    )
    num_random = DETS_PER_IMAGE - len(source)
    boxes = np.concatenate([near_boxes, random_boxes(rng, num_random)])
    classes = np.concatenate([near_classes, rng.choice(NUM_CLASSES, size=num_random, p=frequencies) + 1])
    scores = np.round(np.concatenate([near_scores, rng.beta(1, 6, num_random)]), 4)
    detections = [
        {"image_id": image_id, "category_id": int(c), "bbox": b.tolist(), "score": float(s)}
        for b, c, s in zip(boxes, classes, scores)
    ]
    return annotations, detections


def synthetic_dataset(num_images: int, seed: int = 0) -> Tuple[COCO, List[Dict]]:
    rng = np.random.default_rng(seed)
    frequencies = class_frequencies(rng)
    annotations, detections = [], []
    for image_id in range(1, num_images + 1):
        image_annotations, image_detections = synthetic_image(rng, image_id, frequencies, len(annotations) + 1)
        annotations += image_annotations
        detections += image_detections
    coco_gt = COCO()
    coco_gt.dataset = {
        "images": [{"id": i, "width": WIDTH, "height": HEIGHT} for i in range(1, num_images + 1)],
        "annotations": annotations,
        "categories": [{"id": c, "name": f"class_{c}"} for c in range(1, NUM_CLASSES + 1)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt.createIndex()
    return coco_gt, detections


def run_cocoeval(coco_gt: COCO, detections: List[Dict], impl: str) -> COCOeval:
    cocoeval_fn = COCOeval_opt if impl == "fast" else COCOeval
    with contextlib.redirect_stdout(io.StringIO()):
        return _evaluate_predictions_on_coco(coco_gt, detections, "bbox", cocoeval_fn=cocoeval_fn)


def run_lrp(coco_eval: COCOeval) -> Dict[str, float]:
    results = summarise(evaluate_classes(detection_matches(coco_eval, LRP_TAU), LRP_TAU))
    results["AP90"] = ap_at_iou(coco_eval, AP90_IOU)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=5000, help="number of synthetic images (default 5000)")
    parser.add_argument("--impl", choices=["fast", "python"], default="fast", help="COCOeval_opt or pycocotools")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    start = time.perf_counter()
    coco_gt, detections = synthetic_dataset(args.images, args.seed)
    num_gt = len(coco_gt.dataset["annotations"])
    num_crowd = sum(a["iscrowd"] for a in coco_gt.dataset["annotations"])
    print(
        f"synthetic set: {args.images} images, {NUM_CLASSES} classes, {num_gt} GTs ({num_crowd} crowd), "
        f"{len(detections)} detections (built in {time.perf_counter() - start:.1f} s)"
    )

    start = time.perf_counter()
    coco_eval = run_cocoeval(coco_gt, detections, args.impl)
    cocoeval_time = time.perf_counter() - start
    start = time.perf_counter()
    lrp = run_lrp(coco_eval)
    lrp_time = time.perf_counter() - start

    print(f"COCO AP {100 * coco_eval.stats[0]:.2f}, " + ", ".join(f"{k} {v:.2f}" for k, v in lrp.items()))
    print(f"COCOeval ({args.impl}): {cocoeval_time:.2f} s")
    print(f"LRP addition:        {lrp_time:.2f} s")
    print(f"ratio LRP / COCOeval: {lrp_time / cocoeval_time:.3f} (budget 0.5)")


if __name__ == "__main__":
    main()
