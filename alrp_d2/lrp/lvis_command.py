"""``python -m alrp_d2.lrp GT.json DETECTIONS.json --lvis [--iou-type bbox|segm] [--json]``: LRP of LVIS results on
an LVIS ground truth (:func:`~.lvis_evaluation.evaluate_lvis`), as a table or one JSON object (its keys, NaN as
null); a file that cannot be evaluated is refused with one line naming the file, the entry and the key, exit
status 2."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

from .command_output import cell, rows_text, without_nan
from .lvis_evaluation import LVIS_LRP_METRICS, evaluate_lvis
from .lvis_files import IOU_TYPES, LVISFileError
from .results import PER_CLASS_KEYS


def lvis_table(results: Dict[str, Any], iou_type: str) -> str:
    """The means, then one line per category with ground truth: its frequency group, ground truths, oLRP, its
    components and the LRP-optimal threshold."""
    summary = [list(LVIS_LRP_METRICS), [cell(results[m]) for m in LVIS_LRP_METRICS]]
    per_class = [["id", "group", "GTs", "oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "threshold"]]
    for i, category_id in enumerate(results["classes"]):
        if results["num_gt_per_class"][i]:
            values = [cell(results[key][i], 4 if key == "thresholds" else 3) for key in PER_CLASS_KEYS]
            group, num_gt = results["frequencies"][i], str(results["num_gt_per_class"][i])
            per_class.append([str(category_id), group, num_gt, *values])
    return (
        f"LVIS LRP ({iou_type}, IoU 0.5; x100; r/c/f: rare, common, frequent; '-' undefined)\n{rows_text(summary)}"
        f"\n\nPer category with ground truth (threshold: the LRP-optimal score threshold)\n{rows_text(per_class)}"
    )


def run_lvis(ground_truth: str, detections: str, iou_type: str, as_json: bool) -> int:
    """Prints the LVIS LRP of the two files; the exit status (2: a file that cannot be evaluated)."""
    if iou_type not in IOU_TYPES:
        choices = " or ".join(IOU_TYPES)
        print(f"python -m alrp_d2.lrp: --lvis takes --iou-type {choices}, not {iou_type}", file=sys.stderr)
        return 2
    try:
        results = evaluate_lvis(ground_truth, detections, iou_type)
    except LVISFileError as error:
        print(f"python -m alrp_d2.lrp: {error}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps({key: without_nan(value) for key, value in results.items()}))
    else:
        print(lvis_table(results, iou_type))
    return 0
