"""Reference LRP results of the official LRP-Error code (kemaloksuz/LRP-Error, its pycocotools fork) on small COCO
cases, written as fixtures for tests/test_lrp_official.py (set-up and re-run: tests/fixtures/lrp_official/README.md).

Runs in a virtual environment that holds the official fork's pycocotools (``--official-repo``: the fork's
``pycocotools`` folder, its ``_mask`` extension built in place) and numpy; it imports nothing of this project. For
every case it writes ``<case>_gt.json`` and ``<case>_dt.json`` (COCO files, generated here from a seed) and
``<case>_official.json``: the official COCOeval's per-class ``olrp``, ``olrp_loc``, ``olrp_fp``, ``olrp_fn`` and
``lrp_opt_thr`` (area 'all', 100 detections) and the means its ``summarize`` prints (NaN as null).

    VENV/bin/python tools/lrp_reference.py --official-repo LRP-Error/pycocotools --output tests/fixtures/lrp_official
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

#: case name: (seed, IoU type, images, classes, image size). Scores are continuous (no ties: the official code also
#: evaluates LRP between tied scores, where no score threshold can cut).
CASES = {
    "boxes": (0, "bbox", 14, 5, 120),
    "boxes_crowded": (1, "bbox", 30, 3, 60),
    "masks": (2, "segm", 10, 4, 48),
}


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


def official_results(gt_file: Path, dt_file: Path, iou_type: str) -> Dict[str, Any]:
    """The official COCOeval's LRP results (area 'all', 100 detections); ``-1`` (no ground truth) as null too."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_file))
        coco_eval = COCOeval(coco_gt, coco_gt.loadRes(str(dt_file)), iou_type)
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    area, max_dets = coco_eval.params.areaRngLbl.index("all"), coco_eval.params.maxDets.index(100)
    per_class = {
        key: np.where(coco_eval.eval[key][:, area, max_dets] == -1, np.nan, coco_eval.eval[key][:, area, max_dets])
        for key in ("olrp", "olrp_loc", "olrp_fp", "olrp_fn", "lrp_opt_thr")
    }
    stats = coco_eval.stats
    return {
        "category_ids": [int(c) for c in coco_eval.params.catIds],
        **{key: _nan_to_none(values) for key, values in per_class.items()},
        "summary": {
            "oLRP": float(stats[12]),
            "oLRP_loc": float(stats[13]),
            "oLRP_FP": float(stats[14]),
            "oLRP_FN": float(stats[15]),
        },
    }


def write_case(name: str, output: Path, mask_utils: Any) -> None:
    seed, iou_type, images, classes, size = CASES[name]
    gt, results = make_case(seed, images, classes, size)
    if iou_type == "segm":
        results = _rle_results(gt, results, mask_utils)
    else:
        results = [{k: v for k, v in r.items() if k != "polygon"} for r in results]
    gt_file, dt_file = output / f"{name}_gt.json", output / f"{name}_dt.json"
    gt_file.write_text(json.dumps(gt))
    dt_file.write_text(json.dumps(results))
    reference = {"iou_type": iou_type, **official_results(gt_file, dt_file, iou_type)}
    (output / f"{name}_official.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(
        f"{name}: {len(gt['annotations'])} objects, {len(results)} detections, oLRP {reference['summary']['oLRP']:.6f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-repo", required=True, help="the official fork's pycocotools folder (built)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.official_repo).resolve()))
    from pycocotools import cocoeval, mask

    if "olrp" not in Path(cocoeval.__file__).read_text():
        sys.exit(f"{cocoeval.__file__} is not the official LRP-Error COCOeval (no oLRP in it)")
    args.output.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        write_case(name, args.output, mask)


if __name__ == "__main__":
    main()
