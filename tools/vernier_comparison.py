"""``alrp_d2.lrp`` beside vernier's ``optimal_lrp`` (PyPI ``vernier``, not a dependency of this project) on the small
COCO pairs of tests/fixtures/lrp_official, class by class: oLRP, its components and the threshold of each, as each
reports them (docs/lrp.md, "alrp_d2.lrp and vernier").

Runs in the project's environment; vernier runs in ``--vernier-python``, an interpreter whose environment holds
``vernier`` (e.g. ``uv venv /tmp/vernier && uv pip install --python /tmp/vernier/bin/python vernier==0.5.4``), on the
same files, in a process of its own.

    python tools/vernier_comparison.py --vernier-python /tmp/vernier/bin/python
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

from pycocotools import mask as mask_utils

from alrp_d2.lrp.coco_api import evaluate_detections
from alrp_d2.lrp.coco_files import load_coco_pair

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "lrp_official"
CASES = {"boxes": "bbox", "boxes_crowded": "bbox", "masks": "segm"}
#: vernier's report of one pair, as JSON (its per-class rows: category_id, olrp, olrp_loc, olrp_fp, olrp_fn, tau).
VERNIER = """
import json, sys
from vernier.instance import Bbox, Segm, optimal_lrp
gt, dt, iou = sys.argv[1:]
with open(gt, "rb") as g, open(dt, "rb") as d:
    report = optimal_lrp(g.read(), d.read(), iou=Bbox() if iou == "bbox" else Segm())
rows = [[p.category_id, p.olrp, p.olrp_loc, p.olrp_fp, p.olrp_fn, p.tau] for p in report.per_class]
print(json.dumps({"means": [report.olrp, report.loc, report.fp, report.fn], "per_class": rows,
                  "grid": report.config.tau_grid_len}))
"""


def _vernier(python: str, gt: Path, dt: Path, iou_type: str) -> Dict[str, Any]:
    result = subprocess.run([python, "-c", VERNIER, str(gt), str(dt), iou_type], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"vernier_comparison: vernier failed on {dt}:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout)


def _with_boxes(dt: Path, folder: Path) -> Path:
    """The mask detections of ``dt`` with their masks' boxes, which vernier reads (``loadRes`` adds them)."""
    detections = json.loads(dt.read_text())
    for det in detections:
        det["bbox"] = mask_utils.toBbox(det["segmentation"]).tolist()
    (folder / dt.name).write_text(json.dumps(detections))
    return folder / dt.name


def _cell(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.4f}"


def between_grid_points(folder: Path) -> Tuple[Path, Path]:
    """A pair whose optimal cut lies between two of vernier's grid points: a true positive scored 0.505 (IoU 0.8) and
    a false positive scored 0.502; no point of 0.00, 0.01, ..., 1.00 keeps the one without the other."""
    ground_truth = {
        "images": [{"id": 1, "width": 100, "height": 100}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 50, 50], "area": 2500, "iscrowd": 0}
        ],
        "categories": [{"id": 1, "name": "a"}],
    }
    detections = [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 50, 40], "score": 0.505},
        {"image_id": 1, "category_id": 1, "bbox": [70, 70, 20, 20], "score": 0.502},
    ]
    (folder / "grid_gt.json").write_text(json.dumps(ground_truth))
    (folder / "grid_dt.json").write_text(json.dumps(detections))
    return folder / "grid_gt.json", folder / "grid_dt.json"


def compare(case: str, gt: Path, dt: Path, iou_type: str, python: str) -> List[str]:
    """The lines of one case: per class, ours (fractions, as vernier's) and vernier's, and the loc ratio."""
    ours = evaluate_detections(*load_coco_pair(str(gt), str(dt), iou_type), iou_type)
    with tempfile.TemporaryDirectory() as folder:
        theirs = _vernier(python, gt, _with_boxes(dt, Path(folder)) if iou_type == "segm" else dt, iou_type)
    lines = [
        f"{case} ({iou_type}); vernier's threshold grid: {theirs['grid']} points; each cell: ours/vernier",
        "class  oLRP  loc (vernier's / ours)  FP  FN  threshold/tau",
    ]
    rows = {row[0]: row[1:] for row in theirs["per_class"]}
    for k, category in enumerate(ours["classes"]):
        mine = [ours[key][k] / 100 for key in ("oLRP_per_class", "oLRP_loc_per_class", "oLRP_FP_per_class")]
        mine += [ours["oLRP_FN_per_class"][k] / 100, ours["thresholds"][k]]
        olrp, loc, fp, fn, tau = rows[category]
        ratio = loc / mine[1] if loc is not None and not math.isnan(mine[1]) and mine[1] > 0 else math.nan
        cells = [f"{_cell(a)}/{_cell(b)}" for a, b in zip(mine, (olrp, loc, fp, fn, tau))]
        cells[1] += f" ({_cell(ratio)})"
        lines.append(f"{category:>5}  " + "  ".join(cells))
    means = [ours[key] / 100 for key in ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN")]
    lines.append("means  " + "  ".join(f"{_cell(a)}/{_cell(b)}" for a, b in zip(means, theirs["means"])))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vernier-python", required=True, help="an interpreter whose environment holds vernier")
    args = parser.parse_args()
    for case, iou_type in CASES.items():
        gt, dt = FIXTURES / f"{case}_gt.json", FIXTURES / f"{case}_dt.json"
        print("\n".join(compare(case, gt, dt, iou_type, args.vernier_python)) + "\n")
    with tempfile.TemporaryDirectory() as folder:
        print(
            "\n".join(compare("between grid points", *between_grid_points(Path(folder)), "bbox", args.vernier_python))
        )


if __name__ == "__main__":
    main()
