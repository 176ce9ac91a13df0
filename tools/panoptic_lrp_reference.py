"""Reference panoptic LRP results of the official LRP-Error code (kemaloksuz/LRP-Error, its panopticapi fork) on a
small synthetic COCO panoptic pair, written as the fixture of tests/test_panoptic_lrp.py (set-up and re-run:
tests/fixtures/panoptic_lrp_official/README.md).

Runs in a virtual environment that holds numpy and Pillow from PyPI only. The fork's pure-Python
``panopticapi/panopticapi/evaluation.py`` is imported from ``--official-repo`` (a checkout of kemaloksuz/LRP-Error);
its per-image statistics (``pq_lrp_compute_single_core``, on one process) and its averaging (``pq_lrp_average``: all
classes, things, stuff) give the numbers. It imports nothing of this project. Writes ``gt.json`` and ``gt/`` (COCO
panoptic ground truth: segments_info with area, bbox and iscrowd; PNGs of id = R + 256 G + 256^2 B), ``pred.json``
and ``pred/`` (predictions: segments_info with id and category_id) and ``official.json`` (per class: the official
TP, FP, FN counts, IoU sums, LRP and its components; per group: PQ, SQ, RQ, LRP and its components; NaN as null).

    VENV/bin/python tools/panoptic_lrp_reference.py --official-repo LRP --output tests/fixtures/panoptic_lrp_official
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
from PIL import Image

HEIGHT, WIDTH, IMAGES, SEED = 40, 56, 16, 0
#: id: (name, isthing). 3 has ground truth but is never predicted, 4 is predicted but has no ground truth, 5 has
#: neither (left out of the means); 12 is stuff never predicted, 13 stuff without ground truth.
CATEGORIES = {
    1: ("person", 1),
    2: ("car", 1),
    3: ("dog", 1),
    4: ("cat", 1),
    5: ("bird", 1),
    10: ("sky", 0),
    11: ("grass", 0),
    12: ("wall", 0),
    13: ("road", 0),
}
GT_THINGS, GT_STUFF = (1, 2, 3), (10, 11, 12)
PRED_THINGS, PRED_STUFF = (1, 2, 4), (10, 11, 13)


def id_to_rgb(ids: np.ndarray) -> np.ndarray:
    """The COCO panoptic PNG colours of segment ids: id = R + 256 G + 256^2 B."""
    return np.stack([ids % 256, ids // 256 % 256, ids // 65536], axis=-1).astype(np.uint8)


def _rectangle(rng: np.random.Generator, low: int, high: int) -> Tuple[int, int, int, int]:
    h, w = (int(v) for v in rng.integers(low, high, 2))
    y, x = int(rng.integers(0, HEIGHT - h + 1)), int(rng.integers(0, WIDTH - w + 1))
    return y, x, h, w


def _new_id(rng: np.random.Generator, taken: set) -> int:
    while True:
        segment_id = int(rng.integers(1, 256**3))  # all three channels
        if segment_id not in taken:
            taken.add(segment_id)
            return segment_id


def _stuff_bands(categories: List[int], cuts: List[int]) -> List[Tuple[int, slice]]:
    """Three horizontal stuff bands, split at the rows ``cuts``."""
    rows = [slice(0, cuts[0]), slice(cuts[0], cuts[1]), slice(cuts[1], HEIGHT)]
    return list(zip(categories, rows))


def ground_truth_image(rng: np.random.Generator, index: int) -> Tuple[np.ndarray, List[Dict[str, Any]]]:
    """Stuff bands, things on top (crowds among them, two crowds of a class in some images), VOID patches and tiny
    segments; image 3 is all VOID."""
    ids, taken, info = np.zeros((HEIGHT, WIDTH), np.int64), set(), {}
    if index == 3:
        return ids, [], ([], [])
    stuff = [int(c) for c in rng.choice(GT_STUFF, 3)], sorted(int(c) for c in rng.integers(6, HEIGHT - 6, 2))
    for category, rows in _stuff_bands(*stuff):
        ids[rows] = segment_id = _new_id(rng, taken)
        info[segment_id] = (category, 0)
    for k in range(int(rng.integers(1, 6))):
        y, x, h, w = _rectangle(rng, 3, 18)
        crowd = int(rng.random() < 0.2 or (index % 5 == 1 and k < 2))
        category = 1 if index % 5 == 1 and k < 2 else int(rng.choice(GT_THINGS))
        ids[y : y + h, x : x + w] = segment_id = _new_id(rng, taken)
        info[segment_id] = (category, crowd)
    for _ in range(int(rng.integers(0, 3))):
        y, x, h, w = _rectangle(rng, 2, 10)
        ids[y : y + h, x : x + w] = 0
    y, x = int(rng.integers(0, HEIGHT - 1)), int(rng.integers(0, WIDTH - 1))
    ids[y : y + 1, x : x + int(rng.integers(1, 3))] = segment_id = _new_id(rng, taken)  # a segment of 1-2 pixels
    info[segment_id] = (int(rng.choice(GT_THINGS)), 0)
    return ids, _segments(ids, info, ground_truth=True), stuff


def _segments(ids: np.ndarray, info: Dict[int, Tuple[int, int]], ground_truth: bool) -> List[Dict[str, Any]]:
    """segments_info of the ids left in the image (in the order they were drawn), with area, bbox and iscrowd for the
    ground truth."""
    segments = []
    for segment_id, (category, crowd) in info.items():
        ys, xs = np.nonzero(ids == segment_id)
        if len(ys) == 0:
            continue
        segment: Dict[str, Any] = {"id": segment_id, "category_id": category}
        if ground_truth:
            box = [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)]
            segment.update(area=int(len(ys)), bbox=box, iscrowd=crowd)
        segments.append(segment)
    return segments


def prediction_image(rng: np.random.Generator, index: int, gt_segments: List[Dict[str, Any]], stuff: Tuple[Any, Any]):
    """The ground truth's stuff bands shifted (wall predicted as road, some classes swapped), jittered copies of its
    things (some with another class, some left out), false positives, tiny segments, VOID patches; image 7 predicts
    nothing (all VOID)."""
    ids, taken, info = np.zeros((HEIGHT, WIDTH), np.int64), set(), {}
    if index == 7:
        return ids, []
    categories = [13 if c == 12 else c if rng.random() < 0.8 else int(rng.choice(PRED_STUFF)) for c in stuff[0]]
    cuts = [c + int(rng.integers(-3, 4)) for c in stuff[1]] or [12, 26]
    for category, rows in _stuff_bands(categories or [10, 11, 13], cuts):
        ids[rows] = segment_id = _new_id(rng, taken)
        info[segment_id] = (category, 0)
    for segment in gt_segments:
        if segment["category_id"] == 3 or segment["category_id"] >= 10 or rng.random() < 0.2:
            continue
        x, y, w, h = segment["bbox"]
        dy, dx, dh, dw = (int(v) for v in rng.integers(-1, 2, 4))
        y0, x0 = max(0, y + dy), max(0, x + dx)
        category = segment["category_id"] if rng.random() < 0.8 else int(rng.choice(PRED_THINGS))
        ids[y0 : y + dy + h + dh, x0 : x + dx + w + dw] = segment_id = _new_id(rng, taken)
        info[segment_id] = (category, 0)
    for _ in range(int(rng.integers(0, 4))):
        y, x, h, w = _rectangle(rng, 1, 12)
        ids[y : y + h, x : x + w] = segment_id = _new_id(rng, taken)
        info[segment_id] = (int(rng.choice(PRED_THINGS)), 0)
    if rng.random() < 0.5:
        y, x, h, w = _rectangle(rng, 2, 8)
        ids[y : y + h, x : x + w] = 0
    return ids, _segments(ids, info, ground_truth=False)


def make_pair(output: Path) -> None:
    """Writes gt.json, gt/, pred.json and pred/ under ``output``."""
    rng = np.random.default_rng(SEED)
    categories = [{"id": c, "name": name, "isthing": thing} for c, (name, thing) in CATEGORIES.items()]
    gt: Dict[str, Any] = {"images": [], "annotations": [], "categories": categories}
    pred: Dict[str, Any] = {"annotations": []}
    for folder in ("gt", "pred"):
        (output / folder).mkdir(parents=True, exist_ok=True)
    for index in range(IMAGES):
        image_id, file_name = 100 + index, f"{100 + index:06d}.png"
        gt_ids, gt_segments, stuff = ground_truth_image(rng, index)
        pred_ids, pred_segments = prediction_image(rng, index, gt_segments, stuff)
        Image.fromarray(id_to_rgb(gt_ids)).save(output / "gt" / file_name)
        Image.fromarray(id_to_rgb(pred_ids)).save(output / "pred" / file_name)
        gt["images"].append({"id": image_id, "file_name": f"{image_id:06d}.jpg", "height": HEIGHT, "width": WIDTH})
        gt["annotations"].append({"image_id": image_id, "file_name": file_name, "segments_info": gt_segments})
        pred["annotations"].append({"image_id": image_id, "file_name": file_name, "segments_info": pred_segments})
    (output / "gt.json").write_text(json.dumps(gt))
    (output / "pred.json").write_text(json.dumps(pred))


def load_official(repo: Path) -> Any:
    """The fork's ``panopticapi.evaluation`` module from ``repo`` (a checkout of kemaloksuz/LRP-Error)."""
    folder = repo / "panopticapi"
    source = folder / "panopticapi" / "evaluation.py"
    if not source.is_file() or "pq_lrp_average" not in source.read_text():
        sys.exit(f"{source} is not the official LRP-Error panoptic evaluation (a checkout of kemaloksuz/LRP-Error?)")
    sys.path.insert(0, str(folder))
    import panopticapi.evaluation as evaluation

    return evaluation


def _number(value: Any) -> Any:
    value = float(value)
    return None if math.isnan(value) else value


def official_results(output: Path, evaluation: Any) -> Dict[str, Any]:
    """The official statistics and averages of the pair under ``output``."""
    gt = json.loads((output / "gt.json").read_text())
    pred = {a["image_id"]: a for a in json.loads((output / "pred.json").read_text())["annotations"]}
    categories = {c["id"]: c for c in gt["categories"]}
    pairs = [(a, pred[a["image_id"]]) for a in gt["annotations"]]
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stat = evaluation.pq_lrp_compute_single_core(0, pairs, str(output / "gt"), str(output / "pred"), categories)
        groups = {name: stat.pq_lrp_average(categories, isthing=thing) for name, thing in GROUPS.items()}
    per_class = {
        str(c): {
            "tp": stat[c].tp,
            "fp": stat[c].fp,
            "fn": stat[c].fn,
            "iou": float(stat[c].iou),
            **{key: _number(v) for key, v in groups["All"][3][c].items()},
        }
        for c in categories
    }
    means = {
        name: {**{k: _number(v) for k, v in {**pq, **lrp}.items() if k != "n"}, "n": pq["n"]}
        for name, (pq, _, lrp, _) in groups.items()
    }
    return {"per_class": per_class, "means": means}


GROUPS = {"All": None, "Things": True, "Stuff": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-repo", required=True, type=Path, help="a checkout of kemaloksuz/LRP-Error")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args()
    evaluation = load_official(args.official_repo)
    make_pair(args.output)
    reference = official_results(args.output, evaluation)
    (args.output / "official.json").write_text(json.dumps(reference, indent=1) + "\n")
    for name, means in reference["means"].items():
        print(f"{name}: " + ", ".join(f"{key} {value:.6f}" for key, value in means.items()))


if __name__ == "__main__":
    main()
