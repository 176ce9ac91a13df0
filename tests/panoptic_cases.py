"""The official LRP-Error panoptic fixture (tests/fixtures/panoptic_lrp_official, tools/panoptic_lrp_reference.py): its
files, a writable copy, and the comparison of results in this project's keys (x100) with the official values."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple

import pytest

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "panoptic_lrp_official"
#: The official group names and the project's suffixes.
GROUPS = {"All": "", "Things": "_th", "Stuff": "_st"}
#: The official keys of the means and the project's.
MEANS = {"pq": "PQ", "sq": "SQ", "rq": "RQ", "lrp": "LRP", "lrp_loc": "LRP_loc", "lrp_fp": "LRP_FP", "lrp_fn": "LRP_FN"}
PER_CLASS = {"lrp": "LRP", "lrp_loc": "LRP_loc", "lrp_fp": "LRP_FP", "lrp_fn": "LRP_FN"}


def fixture_paths(root: Path = FIXTURE) -> Tuple[str, str, str, str]:
    """``(gt_json, gt_folder, pred_json, pred_folder)`` of the pair under ``root``."""
    return str(root / "gt.json"), str(root / "gt"), str(root / "pred.json"), str(root / "pred")


def copied_fixture(tmp_path: Path) -> Path:
    """A writable copy of the fixture's pair."""
    root = tmp_path / "pair"
    shutil.copytree(FIXTURE, root)
    return root


def official() -> Dict[str, Any]:
    return json.loads((FIXTURE / "official.json").read_text())


def assert_close(actual: Any, expected: Any, what: str) -> None:
    """``actual`` (x100, NaN or None where undefined) equals the official fraction ``expected`` (None: undefined)."""
    if expected is None:
        assert actual is None or math.isnan(actual), what
    else:
        assert actual == pytest.approx(100.0 * expected, abs=1e-4), what  # 1e-6 of the fractions


def assert_means_equal_official(results: Mapping[str, Any], reference: Mapping[str, Any]) -> None:
    for group, suffix in GROUPS.items():
        for key, metric in MEANS.items():
            assert_close(results[metric + suffix], reference["means"][group][key], metric + suffix)


def assert_equal_to_official(results: Mapping[str, Any]) -> None:
    """The means of the three groups, the classes counted and every class's counts, LRP and components."""
    reference = official()
    assert_means_equal_official(results, reference)
    for group, suffix in GROUPS.items():
        assert results["num_classes" + suffix] == reference["means"][group]["n"], group
    assert [str(c) for c in results["classes"]] == list(reference["per_class"])
    for i, category_id in enumerate(results["classes"]):
        expected = reference["per_class"][str(category_id)]
        counts = [results[f"{key}_per_class"][i] for key in ("TP", "FP", "FN")]
        assert counts == [expected["tp"], expected["fp"], expected["fn"]], category_id
        for key, metric in PER_CLASS.items():
            assert_close(results[f"{metric}_per_class"][i], expected[key], f"{metric} of class {category_id}")
