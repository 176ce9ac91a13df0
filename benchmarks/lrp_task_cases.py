"""Seeded synthetic pairs of benchmarks/lrp_tasks_speed.py, written as files both evaluations read.

* keypoints: COCO keypoint ground truth of people (17 keypoints, a third unlabelled, 1 % crowds) in 640 x 480 images
  (2.2 an image on average) and keypoint results: up to 3 jittered copies of each person and 1.2 random people an
  image, continuous scores;
* panoptic: COCO panoptic PNGs of 480 x 640 with four stuff bands and about 36 things (rectangles, 1 % crowds) of 80
  thing and 53 stuff classes, and predictions: shifted bands (some of another class), jittered things (some of
  another class, some missed) and 5 false positives an image;
* lvis: an LVIS ground truth of 300 categories (rare, common, frequent), about 12 objects an image of 4 positive
  categories, 5 negative ones, one not-exhaustive category in a fifth of the images, and 300 box detections an
  image: up to 3 jittered copies of each object, the rest random boxes of categories drawn as the objects'.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
from PIL import Image

WIDTH, HEIGHT, KEYPOINTS = 640, 480, 17
THINGS, STUFF, BANDS = 80, 53, 4
LVIS_CLASSES, LVIS_DETECTIONS = 300, 300


def _boxes(rng: np.random.Generator, count: int, low: float, high: float) -> np.ndarray:
    """XYWH boxes with log-uniform sides between ``low`` and ``high`` pixels inside the image."""
    sides = np.exp(rng.uniform(np.log(low), np.log(high), size=(count, 2)))
    return np.concatenate([rng.uniform(0, 1, size=(count, 2)) * ([WIDTH, HEIGHT] - sides), sides], axis=1)


def _copies(rng: np.random.Generator, count: int, most: int) -> np.ndarray:
    """Indices of 0 to ``most`` copies of each of ``count`` things."""
    return np.repeat(np.arange(count), rng.integers(0, most + 1, count))


def _write(path: Path, content: Any) -> None:
    path.write_text(json.dumps(content))


def write_keypoints(folder: Path, seed: int, images: int) -> Dict[str, int]:
    """gt.json and dt.json of the keypoint case (see the module); returns its sizes."""
    rng = np.random.default_rng(seed)
    image = np.sort(rng.integers(1, images + 1, round(2.2 * images)))
    box, crowd = _boxes(rng, len(image), 16, 400), rng.random(len(image)) < 0.01
    points = box[:, None, :2] + rng.uniform(0.05, 0.95, (len(image), KEYPOINTS, 2)) * box[:, None, 2:]
    visible = np.where(rng.random((len(image), KEYPOINTS)) < 0.3, 0, rng.integers(1, 3, (len(image), KEYPOINTS)))
    visible[crowd] = 0
    labelled = np.concatenate([np.where(visible[..., None] > 0, points, 0.0), visible[..., None]], axis=2)
    area = box[:, 2] * box[:, 3] * rng.uniform(0.4, 0.9, len(image))
    annotations = [
        {"id": k + 1, "image_id": int(m), "category_id": 1, "bbox": b.tolist(), "area": float(a), "iscrowd": int(c),
         "keypoints": p.ravel().tolist(), "num_keypoints": int(np.count_nonzero(v))}
        for k, (m, b, a, c, p, v) in enumerate(zip(image, box, area, crowd, labelled, visible))
    ]  # fmt: skip
    source = _copies(rng, len(image), 3)
    jitter = rng.uniform(0.01, 0.12, (len(source), 1, 1)) * np.sqrt(area[source])[:, None, None]
    near = points[source] + rng.normal(0, 1, (len(source), KEYPOINTS, 2)) * jitter
    random_image = rng.integers(1, images + 1, round(1.2 * images))
    random_box = _boxes(rng, len(random_image), 16, 400)
    far = random_box[:, None, :2] + rng.uniform(0, 1, (len(random_image), KEYPOINTS, 2)) * random_box[:, None, 2:]
    xy = np.concatenate([near, far])
    score = np.r_[np.clip(0.95 - 4 * jitter[:, 0, 0] / np.sqrt(area[source]), 0.01, 1), rng.beta(1, 5, len(far))]
    results = [
        {"image_id": int(m), "category_id": 1, "keypoints": np.c_[p, np.ones(KEYPOINTS)].ravel().tolist(),
         "score": float(s)}
        for m, p, s in zip(np.r_[image[source], random_image], xy, score + rng.uniform(0, 1e-4, len(score)))
    ]  # fmt: skip
    categories = [{"id": 1, "name": "person", "keypoints": [f"k{k}" for k in range(KEYPOINTS)], "skeleton": []}]
    files = [{"id": i, "width": WIDTH, "height": HEIGHT, "file_name": f"{i}.jpg"} for i in range(1, images + 1)]
    _write(folder / "gt.json", {"images": files, "annotations": annotations, "categories": categories})
    _write(folder / "dt.json", results)
    return {"images": images, "objects": len(annotations), "detections": len(results)}


def _rgb(ids: np.ndarray) -> np.ndarray:
    """COCO panoptic PNG colours of segment ids: id = R + 256 G + 256^2 B."""
    return np.stack([ids % 256, ids // 256 % 256, ids // 65536], axis=-1).astype(np.uint8)


def _paint(rng: np.random.Generator, classes: List[int], cuts: np.ndarray, boxes: np.ndarray, labels: List[int]):
    """An id map (ids unique in the image) of stuff bands split at rows ``cuts`` with the boxes painted over in order,
    and the category of every id left in it."""
    index = np.zeros((HEIGHT, WIDTH), np.int64)
    for k, rows in enumerate(np.split(np.arange(HEIGHT), cuts)):
        index[rows] = k
    for k, (x, y, w, h) in enumerate(boxes.astype(int)):
        index[y : y + max(h, 1), x : x + max(w, 1)] = len(classes) + k
    ids = rng.choice(256**3 - 1, len(classes) + len(labels), replace=False) + 1
    left = np.unique(index)
    return ids[index], ids[left], np.asarray(classes + labels)[left], index, left


def _segments(index: np.ndarray, left: np.ndarray, ids: np.ndarray, categories: np.ndarray, crowd: Any = None):
    """segments_info of the ids left in the image; with ``crowd`` (per drawn index), the ground truth's area, bbox
    and iscrowd."""
    segments = [{"id": int(i), "category_id": int(c)} for i, c in zip(ids, categories)]
    if crowd is None:
        return segments
    area = np.bincount(index.ravel(), minlength=left.max() + 1)[left]
    rows, cols = np.indices(index.shape)
    low, high = np.full((len(left) and left.max() + 1, 2), 10**6), np.full((len(left) and left.max() + 1, 2), -1)
    np.minimum.at(low, index.ravel(), np.c_[cols.ravel(), rows.ravel()])
    np.maximum.at(high, index.ravel(), np.c_[cols.ravel(), rows.ravel()])
    for segment, k, a in zip(segments, left, area):
        segment.update(area=int(a), bbox=[*low[k].tolist(), *(high[k] - low[k] + 1).tolist()], iscrowd=int(crowd[k]))
    return segments


def _panoptic_image(rng: np.random.Generator, things: int):
    """The ground truth's and the prediction's id maps and segments_info of one image."""
    cuts = np.sort(rng.integers(40, HEIGHT - 40, BANDS - 1))
    stuff = [int(c) for c in rng.choice(STUFF, BANDS, replace=False) + THINGS + 1]
    boxes, labels = _boxes(rng, things, 12, 220), [int(c) for c in rng.integers(1, THINGS + 1, things)]
    crowd = np.r_[np.zeros(BANDS, bool), rng.random(things) < 0.01]
    gt_ids, ids, categories, index, left = _paint(rng, stuff, cuts, boxes, labels)
    gt = gt_ids, _segments(index, left, ids, categories, crowd)
    swapped = rng.random(BANDS) < 0.15
    pred_stuff = [int(c) for c in np.where(swapped, rng.integers(THINGS + 1, THINGS + STUFF + 1, BANDS), stuff)]
    kept = rng.random(things) < 0.85
    moved = boxes[kept] + rng.normal(0, 0.05, (int(kept.sum()), 4)) * boxes[kept][:, [2, 3, 2, 3]]
    pred_labels = np.where(rng.random(things) < 0.1, rng.integers(1, THINGS + 1, things), labels)[kept].tolist()
    extra = _boxes(rng, 5, 12, 150)
    boxes = np.clip(np.r_[moved, extra], 0, [WIDTH - 1, HEIGHT - 1, WIDTH, HEIGHT])
    pred_cuts = np.clip(cuts + rng.integers(-10, 11, BANDS - 1), 1, HEIGHT - 1)
    painted = _paint(rng, pred_stuff, np.sort(pred_cuts), boxes, pred_labels + rng.integers(1, 81, 5).tolist())
    return gt, (painted[0], _segments(painted[3], painted[4], painted[1], painted[2]))


def write_panoptic(folder: Path, seed: int, images: int) -> Dict[str, int]:
    """gt.json, gt/, pred.json and pred/ of the panoptic case (see the module); returns its sizes."""
    rng = np.random.default_rng(seed)
    categories = [{"id": c, "name": f"thing{c}", "isthing": 1} for c in range(1, THINGS + 1)]
    categories += [{"id": c, "name": f"stuff{c}", "isthing": 0} for c in range(THINGS + 1, THINGS + STUFF + 1)]
    gt: Dict[str, Any] = {"images": [], "annotations": [], "categories": categories}
    pred: Dict[str, Any] = {"annotations": []}
    counts = {"images": images, "gt_segments": 0, "pred_segments": 0}
    for side in ("gt", "pred"):
        (folder / side).mkdir(parents=True, exist_ok=True)
    for image_id in range(1, images + 1):
        name = f"{image_id:06d}.png"
        for side, (ids, segments) in zip(("gt", "pred"), _panoptic_image(rng, int(rng.integers(30, 43)))):
            Image.fromarray(_rgb(ids)).save(folder / side / name)
            (gt if side == "gt" else pred)["annotations"].append(
                {"image_id": image_id, "file_name": name, "segments_info": segments}
            )
            counts[f"{side}_segments"] += len(segments)
        gt["images"].append({"id": image_id, "file_name": f"{image_id:06d}.jpg", "height": HEIGHT, "width": WIDTH})
    _write(folder / "gt.json", gt)
    _write(folder / "pred.json", pred)
    return counts


def _lvis_images(rng: np.random.Generator, images: int, weights: np.ndarray):
    """Each image's positive, negative and not-exhaustive category ids."""
    positives, records = [], []
    for image_id in range(1, images + 1):
        chosen = rng.choice(LVIS_CLASSES, 9, replace=False, p=weights) + 1
        positives.append(chosen[:4])
        not_exhaustive = chosen[:1].tolist() if rng.random() < 0.2 else []
        records.append({"id": image_id, "width": WIDTH, "height": HEIGHT, "neg_category_ids": chosen[4:].tolist(),
                        "not_exhaustive_category_ids": not_exhaustive})  # fmt: skip
    return np.asarray(positives), records


def write_lvis(folder: Path, seed: int, images: int) -> Dict[str, int]:
    """gt.json and dt.json of the LVIS case (see the module); returns its sizes."""
    rng = np.random.default_rng(seed)
    weights = rng.permutation(1.0 / np.arange(1, LVIS_CLASSES + 1) ** 0.8)
    weights /= weights.sum()
    positives, records = _lvis_images(rng, images, weights)
    per_category = rng.integers(1, 6, positives.shape)
    image = np.repeat(np.repeat(np.arange(1, images + 1), 4), per_category.ravel())
    label = np.repeat(positives.ravel(), per_category.ravel())
    box = _boxes(rng, len(image), 6, 400)
    annotations = [
        {"id": k + 1, "image_id": int(m), "category_id": int(c), "bbox": b, "area": b[2] * b[3],
         "segmentation": [[b[0], b[1], b[0] + b[2], b[1], b[0] + b[2], b[1] + b[3], b[0], b[1] + b[3]]]}
        for k, (m, c, b) in enumerate(zip(image, label, box.tolist()))
    ]  # fmt: skip
    source = _copies(rng, len(image), 3)
    source = source[np.bincount(image[source], minlength=images + 1)[image[source]] <= LVIS_DETECTIONS]
    scale = rng.uniform(0.02, 0.35, (len(source), 1))
    near = box[source] * np.exp(rng.normal(0, 1, (len(source), 4)) * scale * [0, 0, 1, 1])
    near[:, :2] += rng.normal(0, 1, (len(source), 2)) * scale * box[source, 2:]
    other = rng.choice(LVIS_CLASSES, len(source), p=weights) + 1
    near_score = np.clip(0.95 - 1.5 * scale[:, 0] + rng.normal(0, 0.2, len(source)), 0.001, 1)
    fill = LVIS_DETECTIONS - np.bincount(image[source], minlength=images + 1)[1:]
    random_image = np.repeat(np.arange(1, images + 1), fill)
    detection_image = np.r_[image[source], random_image]
    detection_label = np.r_[
        np.where(rng.random(len(source)) < 0.8, label[source], other),
        rng.choice(LVIS_CLASSES, len(random_image), p=weights) + 1,
    ]
    detection_box = np.r_[near, _boxes(rng, len(random_image), 6, 400)]
    score = np.r_[near_score, rng.beta(1, 6, len(random_image))] + rng.uniform(0, 1e-4, len(detection_image))
    detections = [
        {"image_id": int(m), "category_id": int(c), "bbox": b.tolist(), "score": float(s)}
        for m, c, b, s in zip(detection_image, detection_label, detection_box, score)
    ]
    frequency = np.asarray(["r", "c", "f"])[rng.choice(3, LVIS_CLASSES, p=[0.28, 0.38, 0.34])]
    categories = [{"id": c + 1, "name": f"class{c + 1}", "frequency": str(f), "synset": f"class{c + 1}.n.01"}
                  for c, f in enumerate(frequency)]  # fmt: skip
    _write(folder / "gt.json", {"images": records, "annotations": annotations, "categories": categories})
    _write(folder / "dt.json", detections)
    return {"images": images, "objects": len(annotations), "detections": len(detections)}
