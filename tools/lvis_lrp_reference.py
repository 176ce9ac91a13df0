"""Reference LRP results of the official LRP-Error code on LVIS (kemaloksuz/LRP-Error, its lvis-api fork) on small
synthetic LVIS cases, written as fixtures for tests/test_lvis_lrp.py (set-up and re-run:
tests/fixtures/lrp_official/README.md).

Runs in a virtual environment that holds released packages from PyPI only: numpy and pycocotools (its compiled COCO
mask API); nothing is built. The fork's pure-Python ``lvis/lvis.py``, ``lvis/results.py`` and ``lvis/eval.py`` are
loaded from ``--official-repo`` (a checkout of kemaloksuz/LRP-Error, as cloned) as modules of a package ``lvis``
made here (:func:`load_official`: its ``__init__`` also imports the drawing module, which needs OpenCV, and is not
run); ``eval.py`` casts with ``np.float``, which numpy 1.24 removed, so ``np.float`` is set to ``float`` in this
process. It imports nothing of this project. For every case it writes ``<case>_gt.json`` and ``<case>_dt.json``
(LVIS files, generated here from a seed) and ``<case>_official.json``: the official LVISEval's per-class ``olrp``,
``olrp_loc``, ``olrp_fp``, ``olrp_fn`` and ``lrp_opt_thr`` (area 'all'), its per-class ``olrp`` of the areas
'small', 'medium' and 'large', the means its ``summarize`` computes and the means of ``_summarize`` by area (NaN and
-1 as null).

    VENV/bin/python tools/lvis_lrp_reference.py --official-repo LRP-Error --output tests/fixtures/lrp_official
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

#: case name: (seed, IoU type, whether segm results keep their boxes). Scores are continuous (no ties: the official
#: code also evaluates LRP between tied scores, where no score threshold can cut).
CASES = {
    "lvis_boxes": (3, "bbox", True),
    "lvis_masks": (4, "segm", False),
    "lvis_masks_with_boxes": (4, "segm", True),
}
IMAGES, CLASSES, SIZE = 16, 8, 160
#: The categories' frequency groups (rare, common, frequent), by category id 1..CLASSES.
FREQUENCIES = ["r", "c", "f", "f", "c", "r", "f", "c"]
NO_GROUND_TRUTH, NEVER_DETECTED = 8, 7
#: An image with more detections than LVIS's 300 per image.
CROWDED_IMAGE, CROWDED_EXTRA = 3, 300


def _box(rng: np.random.Generator) -> np.ndarray:
    """Small, medium and large boxes (areas on both sides of 32^2 and 96^2)."""
    side = float(np.exp(rng.uniform(np.log(6), np.log(150))))
    wh = np.clip(side * np.exp(rng.normal(0, 0.25, 2)), 4, SIZE - 1)
    xy = rng.uniform(0, SIZE - wh)
    return np.round(np.concatenate([xy, wh]) * 8) / 8


def _jittered(box: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    wh = np.clip(box[2:] * np.exp(rng.normal(0, 0.15, 2)), 1.0, SIZE)
    xy = np.clip(box[:2] + rng.normal(0, 0.1, 2) * box[2:], 0, SIZE - wh)
    return np.round(np.concatenate([xy, wh]) * 8) / 8


def _polygon(box: np.ndarray, rng: np.random.Generator) -> List[float]:
    x, y, w, h = box.tolist()
    cut = float(rng.uniform(0.2, 0.6))
    return [x, y, x + w, y, x + w, y + h * (1 - cut), x + w * (1 - cut), y + h, x, y + h]


def _image_labels(rng: np.random.Generator, image_id: int) -> Tuple[List[int], List[int]]:
    """The image's positive categories (with objects) and negative ones (verified absent); none for every fifth."""
    if image_id % 5 == 0:
        return [], [int(c) for c in rng.choice(np.arange(1, CLASSES + 1), 3, replace=False)]
    pool = [c for c in range(1, CLASSES + 1) if c != NO_GROUND_TRUTH]
    positives = sorted(int(c) for c in rng.choice(pool, int(rng.integers(1, 4)), replace=False))
    others = [c for c in range(1, CLASSES + 1) if c not in positives]
    return positives, sorted(int(c) for c in rng.choice(others, 2, replace=False))


def make_case(seed: int) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """An LVIS ground truth and its detections: positive, negative and not-exhaustive categories per image (one
    category in neither list still detected), images without objects (every fifth) and without detections (every
    sixth), a category without ground truth (detected where it is negative), one never detected, a detected object
    marked ``ignore``, one of area 0, a detection of width 0 and an image with more than 300 detections."""
    rng = np.random.default_rng(seed)
    gt: Dict[str, Any] = {"images": [], "annotations": []}
    gt["categories"] = [
        {"id": c, "name": f"class{c}", "frequency": FREQUENCIES[c - 1], "synset": f"class{c}.n.01"}
        for c in range(1, CLASSES + 1)
    ]
    detections: List[Tuple[int, int, np.ndarray]] = []
    detected: List[Dict[str, Any]] = []  # the objects with detections near them
    for image_id in range(1, IMAGES + 1):
        positives, negatives = _image_labels(rng, image_id)
        not_exhaustive = positives[:1] if image_id % 3 == 0 else []
        gt["images"].append(
            {
                "id": image_id,
                "width": SIZE,
                "height": SIZE,
                "neg_category_ids": negatives,
                "not_exhaustive_category_ids": not_exhaustive,
            }
        )
        for category in positives:
            for _ in range(int(rng.integers(1, 4))):
                box = _box(rng)
                ann = {
                    "id": len(gt["annotations"]) + 1,
                    "image_id": image_id,
                    "category_id": category,
                    "bbox": box.tolist(),
                    "area": float(box[2] * box[3]),
                    "segmentation": [_polygon(box, rng)],
                }
                gt["annotations"].append(ann)
                if category != NEVER_DETECTED and image_id % 6:
                    near = [(image_id, category, _jittered(box, rng)) for _ in range(int(rng.integers(0, 3)))]
                    detected += [ann] if near else []
                    detections += near
        if image_id % 6:
            detections += [(image_id, int(rng.integers(1, CLASSES + 1)), _box(rng)) for _ in range(4)]
    detected[1]["ignore"] = 1
    detected[3]["area"] = 0.0
    detections.append((1, gt["annotations"][0]["category_id"], np.array([10.0, 10.0, 0.0, 20.0])))
    # The crowded image's extra detections score above all others: the cap cuts its detections near objects.
    ranks = np.r_[rng.permutation(len(detections)), len(detections) + rng.permutation(CROWDED_EXTRA)]
    detections += [(CROWDED_IMAGE, int(rng.integers(1, CLASSES + 1)), _box(rng)) for _ in range(CROWDED_EXTRA)]
    scores = ranks / len(detections) * 0.98 + 0.01  # distinct
    results = [
        {"image_id": i, "category_id": c, "bbox": b.tolist(), "score": float(s), "polygon": _polygon(b, rng)}
        for (i, c, b), s in zip(detections, scores)
    ]
    return gt, results


def _segm_results(results: List[Dict[str, Any]], with_boxes: bool, mask_utils: Any) -> List[Dict[str, Any]]:
    """Each detection's polygon as a compressed RLE (LVIS's segmentation results), with or without its box."""
    out = []
    for r in results:
        rle = mask_utils.merge(mask_utils.frPyObjects([r["polygon"]], SIZE, SIZE))
        entry = {"image_id": r["image_id"], "category_id": r["category_id"], "score": r["score"]}
        entry["segmentation"] = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
        if with_boxes:
            entry["bbox"] = r["bbox"]
        out.append(entry)
    return out


def _nulls(values: Any) -> Any:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0:
        value = float(values)
        return None if math.isnan(value) or value == -1 else value
    return [None if math.isnan(v) or v == -1 else float(v) for v in values.tolist()]


def load_official(repo: Path) -> Any:
    """The ``LVISEval`` class of the official fork's ``lvis-api/lvis`` in ``repo``, its modules loaded into a
    package ``lvis`` made here (the fork's ``__init__`` is not run)."""
    folder = repo / "lvis-api" / "lvis"
    if not (folder / "eval.py").is_file() or "olrp" not in (folder / "eval.py").read_text():
        sys.exit(f"{folder}/eval.py is not the official LRP-Error LVISEval (a checkout of kemaloksuz/LRP-Error?)")
    package = types.ModuleType("lvis")
    package.__path__ = [str(folder)]
    sys.modules["lvis"] = package
    modules = {}
    for name in ("lvis", "results", "eval"):
        spec = importlib.util.spec_from_file_location(f"lvis.{name}", folder / f"{name}.py")
        assert spec is not None and spec.loader is not None
        modules[name] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = modules[name]
        spec.loader.exec_module(modules[name])
    np.float = float  # type: ignore[attr-defined]  # eval.py's accumulate casts with np.float
    return modules["eval"].LVISEval


def official_results(gt_file: Path, dt_file: Path, iou_type: str, lvis_eval_class: Any) -> Dict[str, Any]:
    """The official LVISEval's LRP results (LVIS's 300 detections an image)."""
    with contextlib.redirect_stdout(io.StringIO()):
        lvis_eval = lvis_eval_class(str(gt_file), str(dt_file), iou_type)
        lvis_eval.run()
    labels = lvis_eval.params.area_rng_lbl
    per_class = {key: _nulls(lvis_eval.eval[key][:, labels.index("all")]) for key in ("olrp_loc", "olrp_fp")}
    for key in ("olrp", "olrp_fn", "lrp_opt_thr"):
        per_class[key] = _nulls(lvis_eval.eval[key][:, labels.index("all")])
    results = lvis_eval.get_results()
    summary = {
        key: _nulls(results[name])
        for key, name in [
            ("oLRP", "oLRP"),
            ("oLRP_loc", "oLRP LOC"),
            ("oLRP_FP", "oLRP FP"),
            ("oLRP_FN", "oLRP FN"),
            ("oLRP_r", "oLRPr"),
            ("oLRP_c", "oLRPc"),
            ("oLRP_f", "oLRPf"),
        ]
    }
    for area in ("small", "medium", "large"):
        summary[f"oLRP_{area}"] = _nulls(lvis_eval._summarize("oLRP", area_rng=area))
        per_class[f"olrp_{area}"] = _nulls(lvis_eval.eval["olrp"][:, labels.index(area)])
    return {"category_ids": [int(c) for c in lvis_eval.params.cat_ids], **per_class, "summary": summary}


def write_case(name: str, output: Path, mask_utils: Any, lvis_eval_class: Any) -> None:
    seed, iou_type, with_boxes = CASES[name]
    gt, results = make_case(seed)
    if iou_type == "segm":
        results = _segm_results(results, with_boxes, mask_utils)
    else:
        results = [{k: v for k, v in r.items() if k != "polygon"} for r in results]
    gt_file, dt_file = output / f"{name}_gt.json", output / f"{name}_dt.json"
    gt_file.write_text(json.dumps(gt))
    dt_file.write_text(json.dumps(results))
    reference = {"iou_type": iou_type, **official_results(gt_file, dt_file, iou_type, lvis_eval_class)}
    (output / f"{name}_official.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(f"{name}: {len(gt['annotations'])} objects, {len(results)} detections, oLRP {reference['summary']['oLRP']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-repo", required=True, type=Path, help="a checkout of kemaloksuz/LRP-Error")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args()
    from pycocotools import mask

    lvis_eval_class = load_official(args.official_repo)
    args.output.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        write_case(name, args.output, mask, lvis_eval_class)


if __name__ == "__main__":
    main()
