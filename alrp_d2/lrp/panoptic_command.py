"""``python -m alrp_d2.lrp GT.json PRED.json --panoptic GT_FOLDER PRED_FOLDER [--json]``: LRP and PQ of COCO panoptic
predictions (:func:`~alrp_d2.lrp.evaluate_panoptic`), as a table or one JSON object (NaN as null); a file that
cannot be evaluated is refused with one line naming the file, the image and the segment, exit status 2."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List

from .command_output import cell, rows_text, without_nan
from .panoptic import PANOPTIC_METRICS, evaluate_panoptic
from .panoptic_files import PanopticFileError, read_categories, read_json

GROUP_NAMES = {"": "All", "_th": "Things", "_st": "Stuff"}
PER_CLASS_COLUMNS = ("TP", "FP", "FN", "LRP", "LRP_loc", "LRP_FP", "LRP_FN", "PQ")


def panoptic_table(results: Dict[str, Any], names: List[str]) -> str:
    """The means of all classes, things and stuff, then one line per category: its counts, LRP, components, PQ."""
    means = [["", *PANOPTIC_METRICS, "classes"]]
    for suffix, group in GROUP_NAMES.items():
        means.append(
            [group, *(cell(results[m + suffix]) for m in PANOPTIC_METRICS), str(results["num_classes" + suffix])]
        )
    per_class = [["category", "id", "thing", *PER_CLASS_COLUMNS]]
    for i, category_id in enumerate(results["classes"]):
        counts = [str(results[f"{key}_per_class"][i]) for key in ("TP", "FP", "FN")]
        values = [cell(results[f"{key}_per_class"][i]) for key in PER_CLASS_COLUMNS[3:]]
        per_class.append([names[i], str(category_id), "yes" if results["isthing"][i] else "no", *counts, *values])
    return (
        f"Panoptic LRP and PQ (IoU > 0.5; x100; '-' undefined)\n{rows_text(means)}\n\n"
        f"Per category\n{rows_text(per_class)}"
    )


def run_panoptic(gt_json: str, pred_json: str, gt_folder: str, pred_folder: str, as_json: bool) -> int:
    """Prints the results of the pair (exit status 0), or the problem on stderr (exit status 2)."""
    try:
        results = evaluate_panoptic(gt_json, gt_folder, pred_json, pred_folder)
        names = read_categories(read_json(gt_json), gt_json).names
    except PanopticFileError as error:
        print(f"python -m alrp_d2.lrp: {error}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps({key: without_nan(value) for key, value in results.items()}))
    else:
        print(panoptic_table(results, names))
    return 0
