"""The official LRP-Error LVIS fixtures (tests/fixtures/lrp_official/lvis_*, tools/lvis_lrp_reference.py): the LVIS
files and the official results in this project's keys and scale (x100 but the thresholds; NaN: undefined, the
official code's NaN or -1)."""

from __future__ import annotations

import json
import math
from typing import Any, Dict

from .lrp_official_cases import FIXTURES, PER_CLASS
from .lrp_official_cases import case_files as lvis_files

__all__ = ["LVIS_CASES", "lvis_files", "official_lvis"]

LVIS_CASES = ("lvis_boxes", "lvis_masks", "lvis_masks_with_boxes")


def official_lvis(case: str) -> Dict[str, Any]:
    """The official results of ``case``: its means and per-category lists in the keys of ``evaluate_lvis``."""
    reference = json.loads((FIXTURES / f"{case}_official.json").read_text())
    results: Dict[str, Any] = {
        key: math.nan if value is None else 100.0 * value for key, value in reference["summary"].items()
    }
    results["iou_type"] = reference["iou_type"]
    results["classes"] = reference["category_ids"]
    for key, ours in PER_CLASS.items():
        scale = 1.0 if key == "lrp_opt_thr" else 100.0
        results[ours] = [math.nan if v is None else scale * v for v in reference[key]]
    return results
