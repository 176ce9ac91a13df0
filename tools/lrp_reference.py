"""Reference LRP results of the official LRP-Error code (kemaloksuz/LRP-Error, its pycocotools fork) on small COCO
cases, written as fixtures for tests/test_lrp_official.py (set-up and re-run: tests/fixtures/lrp_official/README.md).

Runs in a virtual environment that holds released packages from PyPI only: numpy, pycocotools (its compiled COCO mask
API) and matplotlib (the fork's ``coco.py`` imports it); nothing is built. The fork's pure-Python ``coco.py`` and
``cocoeval.py`` are loaded from ``--official-repo`` (a checkout of kemaloksuz/LRP-Error, as cloned) as submodules of
PyPI's ``pycocotools`` (:func:`load_official`); it imports nothing of this project. For every case it writes
``<case>_gt.json`` and ``<case>_dt.json`` (COCO files, generated here from a seed) and ``<case>_official.json``: the
official COCOeval's per-class ``olrp``, ``olrp_loc``, ``olrp_fp``, ``olrp_fn`` and ``lrp_opt_thr`` (area 'all', 100
detections, 20 for keypoints) and the means its ``summarize`` prints (NaN as null).

    VENV/bin/python tools/lrp_reference.py --official-repo LRP-Error --output tests/fixtures/lrp_official
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

#: case name: (seed, IoU type, images, classes, image size). Scores are continuous (no ties: the official code also
#: evaluates LRP between tied scores, where no score threshold can cut), but in ``keypoints_tied``.
CASES = {
    "boxes": (0, "bbox", 14, 5, 120),
    "boxes_crowded": (1, "bbox", 30, 3, 60),
    "masks": (2, "segm", 10, 4, 48),
    "keypoints": (6, "keypoints", 16, 4, 96),
    "keypoints_tied": (4, "keypoints", 16, 4, 96),
}
#: COCO's person keypoints, the official COCOeval's default sigmas (one set for every category).
KEYPOINTS = 17
#: The official ``stats`` indices of oLRP and its components ('all', the largest maxDets) per IoU type.
SUMMARY_STATS = {"bbox": 12, "segm": 12, "keypoints": 10}


def _polygon(box: np.ndarray, rng: np.random.Generator) -> List[float]:
    """A polygon inside the XYWH box: its corners, one of them cut (masks that are not boxes)."""
    x, y, w, h = box.tolist()
    cut = float(rng.uniform(0.2, 0.6))
    return [x, y, x + w, y, x + w, y + h * (1 - cut), x + w * (1 - cut), y + h, x, y + h]


def _box(rng: np.random.Generator, size: int) -> np.ndarray:
    wh = rng.uniform(size * 0.08, size * 0.45, 2)
    xy = rng.uniform(0, size - wh)
    return np.round(np.concatenate([xy, wh]) * 8) / 8  # exact in float32 (detectron2's boxes)


def _jittered(box: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    wh = np.clip(box[2:] * np.exp(rng.normal(0, 0.2, 2)), 1.0, size)
    xy = np.clip(box[:2] + rng.normal(0, 0.12, 2) * box[2:], 0, size - wh)
    return np.round(np.concatenate([xy, wh]) * 8) / 8  # exact in float32 (detectron2's boxes)


def make_case(seed: int, images: int, classes: int, size: int) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """Ground truth with crowds, a class without ground truth (the last), a class never detected (the one before),
    images without detections (every fourth) and without objects (every fifth); detections near objects (duplicates
    included) and anywhere, continuous scores."""
    rng = np.random.default_rng(seed)
    gt: Dict[str, Any] = {"images": [], "annotations": [], "categories": []}
    gt["categories"] = [{"id": 10 + c, "name": f"class{c}"} for c in range(classes)]
    detections: List[Tuple[int, int, np.ndarray]] = []
    for image_id in range(1, images + 1):
        gt["images"].append({"id": image_id, "width": size, "height": size, "file_name": f"{image_id}.jpg"})
        for _ in range(0 if image_id % 5 == 0 else int(rng.integers(1, 7))):
            category = 10 + int(rng.integers(0, classes - 1))  # the last class has no ground truth
            box = _box(rng, size)
            crowd = int(rng.random() < 0.12)
            gt["annotations"].append(
                {
                    "id": len(gt["annotations"]) + 1,
                    "image_id": image_id,
                    "category_id": category,
                    "bbox": box.tolist(),
                    "area": float(box[2] * box[3]),
                    "iscrowd": crowd,
                    "segmentation": [_polygon(box, rng)],
                }
            )
            if category != 10 + classes - 2 and image_id % 4:  # one class never detected; images without detections
                detections += [(image_id, category, _jittered(box, rng, size)) for _ in range(int(rng.integers(0, 4)))]
        if image_id % 4:
            detections += [(image_id, 10 + int(rng.integers(0, classes)), _box(rng, size)) for _ in range(3)]
    scores = rng.permutation(len(detections)) / max(len(detections), 1) * 0.98 + 0.01  # distinct
    results = [
        {"image_id": i, "category_id": c, "bbox": b.tolist(), "score": float(s), "polygon": _polygon(b, rng)}
        for (i, c, b), s in zip(detections, scores)
    ]
    return gt, results


def _eighths(values: np.ndarray) -> List[float]:
    return (np.round(values * 8) / 8).ravel().tolist()  # exact in float32 (detectron2's keypoints), after -0.5 too


def _person(rng: np.random.Generator, size: int) -> Tuple[np.ndarray, np.ndarray]:
    """An object's box and where its 17 keypoints lie (inside the box)."""
    box = _box(rng, size)
    return box, box[:2] + rng.uniform(0.05, 0.95, (KEYPOINTS, 2)) * box[2:]


def _keypoint_object(rng: np.random.Generator, size: int, crowd: bool) -> Tuple[Dict[str, Any], np.ndarray]:
    """A COCO keypoint annotation (without ids) and its keypoints' true places: crowds have no labelled keypoint;
    others about a third unlabelled (v = 0, stored as 0, 0, 0), one in six none labelled."""
    box, points = _person(rng, size)
    visibility = np.where(rng.random(KEYPOINTS) < 0.3, 0, rng.integers(1, 3, KEYPOINTS))
    if crowd or rng.random() < 1 / 6:
        visibility[:] = 0
    labelled = np.where(visibility[:, None] > 0, np.round(points * 8) / 8, 0.0)
    record = {
        "bbox": box.tolist(),
        "area": float(np.round(box[2] * box[3] * rng.uniform(0.4, 0.9) * 8) / 8),  # a segment's area, not the box's
        "iscrowd": int(crowd),
        "keypoints": [float(v) for v in np.concatenate([labelled, visibility[:, None]], axis=1).ravel()],
        "num_keypoints": int(np.count_nonzero(visibility)),
    }
    return record, points


def _keypoint_result(image_id: int, category: int, points: np.ndarray, jitter: float, rng: np.random.Generator):
    xy = points + rng.normal(0, jitter, points.shape)
    return {"image_id": image_id, "category_id": category, "keypoints": _eighths(np.c_[xy, np.ones(KEYPOINTS)])}


def make_keypoint_case(seed: int, images: int, classes: int, size: int, tied: bool):
    """Keypoint ground truth with crowds, unlabelled keypoints and objects without any, a class without ground truth
    (the last) and one never detected (the one before), images without detections (every fourth) and without
    objects (every fifth), one image with more than 20 detections of a class (COCOeval keeps 20); detections near
    objects and crowds (duplicates included) and anywhere. Scores distinct, or with ``tied`` among 6 values."""
    rng = np.random.default_rng(seed)
    gt: Dict[str, Any] = {"images": [], "annotations": [], "categories": []}
    gt["categories"] = [
        {"id": 10 + c, "name": f"class{c}", "keypoints": [f"k{k}" for k in range(KEYPOINTS)]} for c in range(classes)
    ]
    results: List[Dict[str, Any]] = []
    for image_id in range(1, images + 1):
        gt["images"].append({"id": image_id, "width": size, "height": size, "file_name": f"{image_id}.jpg"})
        for _ in range(0 if image_id % 5 == 0 else int(rng.integers(1, 6))):
            category = 10 + int(rng.integers(0, classes - 1))
            record, points = _keypoint_object(rng, size, crowd=bool(rng.random() < 0.12))
            record.update(id=len(gt["annotations"]) + 1, image_id=image_id, category_id=category)
            gt["annotations"].append(record)
            if category != 10 + classes - 2 and image_id % 4:
                jitters = rng.uniform(0.001, 0.025, int(rng.integers(0, 4))) * math.sqrt(record["area"])
                results += [_keypoint_result(image_id, category, points, j, rng) for j in jitters]
        extra = np.full(24, 10) if image_id == 1 else 10 + rng.integers(0, classes, 3 * (image_id % 4 != 0))
        for category in extra:
            results.append(_keypoint_result(image_id, int(category), _person(rng, size)[1], 0.0, rng))
    scores = rng.permutation(len(results)) / max(len(results), 1) * 0.98 + 0.01
    for result, score in zip(results, np.round(scores * 6) / 6 * 0.9 + 0.05 if tied else scores):
        result["score"] = float(score)
    return gt, results


def _rle_results(gt: Dict[str, Any], results: List[Dict[str, Any]], mask_utils: Any) -> List[Dict[str, Any]]:
    """Segmentation results: each detection's polygon as a compressed RLE (the format COCO results use)."""
    sizes = {image["id"]: (image["height"], image["width"]) for image in gt["images"]}
    out = []
    for r in results:
        height, width = sizes[r["image_id"]]
        rle = mask_utils.merge(mask_utils.frPyObjects([r["polygon"]], height, width))
        out.append(
            {
                "image_id": r["image_id"],
                "category_id": r["category_id"],
                "score": r["score"],
                "segmentation": {"size": rle["size"], "counts": rle["counts"].decode("ascii")},
            }
        )
    return out


def _nan_to_none(values: np.ndarray) -> List[Any]:
    return [None if math.isnan(v) else float(v) for v in np.asarray(values, dtype=np.float64).tolist()]


def load_official(repo: Path) -> Tuple[Any, Any]:
    """The ``COCO`` and ``COCOeval`` classes of the official fork's ``coco.py`` and ``cocoeval.py`` in ``repo`` (a
    checkout of kemaloksuz/LRP-Error), loaded as submodules of PyPI's ``pycocotools``: their ``from . import mask`` is
    PyPI's compiled COCO mask API, whose ``iou``, ``frPyObjects``, ``merge`` and ``area`` are the fork's C code (its
    ``decode`` adds a bounds check; its ``toBbox``, of segmentation results, which the segm IoU does not use, a fix)."""
    import pycocotools  # noqa: F401  (the parent package: the fork's relative imports resolve in it)

    folder, modules = repo / "pycocotools" / "pycocotools", []
    if not (folder / "cocoeval.py").is_file() or "olrp" not in (folder / "cocoeval.py").read_text():
        sys.exit(f"{folder}/cocoeval.py is not the official LRP-Error COCOeval (a checkout of kemaloksuz/LRP-Error?)")
    for name in ("coco", "cocoeval"):
        spec = importlib.util.spec_from_file_location(f"pycocotools.lrp_error_{name}", folder / f"{name}.py")
        assert spec is not None and spec.loader is not None
        modules.append(importlib.util.module_from_spec(spec))
        sys.modules[spec.name] = modules[-1]
        spec.loader.exec_module(modules[-1])
    return modules[0].COCO, modules[1].COCOeval


def official_results(gt_file: Path, dt_file: Path, iou_type: str, official: Tuple[Any, Any]) -> Dict[str, Any]:
    """The official COCOeval's LRP results (area 'all', its largest maxDets: 100, 20 for keypoints with COCO's person
    sigmas); ``-1`` (no ground truth) as null too."""
    COCO, COCOeval = official
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_file))
        coco_eval = COCOeval(coco_gt, coco_gt.loadRes(str(dt_file)), iou_type)
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    area, max_dets = coco_eval.params.areaRngLbl.index("all"), len(coco_eval.params.maxDets) - 1
    per_class = {
        key: np.where(coco_eval.eval[key][:, area, max_dets] == -1, np.nan, coco_eval.eval[key][:, area, max_dets])
        for key in ("olrp", "olrp_loc", "olrp_fp", "olrp_fn", "lrp_opt_thr")
    }
    stats = coco_eval.stats[SUMMARY_STATS[iou_type] :]
    return {
        "category_ids": [int(c) for c in coco_eval.params.catIds],
        **{key: _nan_to_none(values) for key, values in per_class.items()},
        "summary": {
            "oLRP": float(stats[0]),
            "oLRP_loc": float(stats[1]),
            "oLRP_FP": float(stats[2]),
            "oLRP_FN": float(stats[3]),
        },
    }


def write_case(name: str, output: Path, mask_utils: Any, official: Tuple[Any, Any]) -> None:
    seed, iou_type, images, classes, size = CASES[name]
    if iou_type == "keypoints":
        gt, results = make_keypoint_case(seed, images, classes, size, tied=name.endswith("_tied"))
    else:
        gt, results = make_case(seed, images, classes, size)
    if iou_type == "segm":
        results = _rle_results(gt, results, mask_utils)
    elif iou_type == "bbox":
        results = [{k: v for k, v in r.items() if k != "polygon"} for r in results]
    gt_file, dt_file = output / f"{name}_gt.json", output / f"{name}_dt.json"
    gt_file.write_text(json.dumps(gt))
    dt_file.write_text(json.dumps(results))
    reference = {"iou_type": iou_type, **official_results(gt_file, dt_file, iou_type, official)}
    (output / f"{name}_official.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(
        f"{name}: {len(gt['annotations'])} objects, {len(results)} detections, oLRP {reference['summary']['oLRP']:.6f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-repo", required=True, type=Path, help="a checkout of kemaloksuz/LRP-Error")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args()
    from pycocotools import mask

    official = load_official(args.official_repo)
    args.output.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        write_case(name, args.output, mask, official)


if __name__ == "__main__":
    main()
