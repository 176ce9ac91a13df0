"""LRP for panoptic segmentation (alrp_d2.lrp.evaluate_panoptic and ``python -m alrp_d2.lrp --panoptic``) equals the
official LRP-Error panopticapi fork on its fixture (crowds, VOID, empty images, tiny segments, classes never
predicted or without ground truth, things and stuff), to 1e-6; bad files are refused naming the file, the image, the
segment and the key."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from alrp_d2.lrp import PanopticFileError, evaluate_panoptic
from alrp_d2.lrp.__main__ import main
from alrp_d2.lrp.panoptic_files import png_bytes, read_ids

from .panoptic_cases import assert_equal_to_official, copied_fixture, fixture_paths, official


def test_evaluate_panoptic_equals_official():
    assert_equal_to_official(evaluate_panoptic(*fixture_paths()))


def test_fixture_holds_the_edge_cases():
    """Classes never predicted and without ground truth (things and stuff), one with neither, crowds, an image all
    VOID in the ground truth and one predicted all VOID."""
    per_class = official()["per_class"]
    assert {c for c, v in per_class.items() if v["tp"] + v["fp"] == 0 and v["fn"]} == {"3", "12"}
    assert {c for c, v in per_class.items() if v["tp"] + v["fn"] == 0 and v["fp"]} == {"4", "13"}
    assert per_class["5"]["lrp"] is None
    gt = json.loads(open(fixture_paths()[0]).read())
    pred = json.loads(open(fixture_paths()[2]).read())
    assert any(s["iscrowd"] for a in gt["annotations"] for s in a["segments_info"])
    assert [] in [a["segments_info"] for a in gt["annotations"]] and [] in [
        a["segments_info"] for a in pred["annotations"]
    ]
    assert min(s["area"] for a in gt["annotations"] for s in a["segments_info"]) == 1


def test_command_json_and_table(capsys):
    gt_json, gt_folder, pred_json, pred_folder = fixture_paths()
    assert main([gt_json, pred_json, "--panoptic", gt_folder, pred_folder, "--json"]) == 0
    assert_equal_to_official(json.loads(capsys.readouterr().out))
    assert main([gt_json, pred_json, "--panoptic", gt_folder, pred_folder]) == 0
    table = capsys.readouterr().out
    assert f"{100 * official()['means']['Stuff']['lrp']:.3f}" in table and "grass" in table


def test_png_round_trip(tmp_path):
    ids = np.array([[0, 1, 255], [256, 65536, 256**3 - 1]], dtype=np.int64)
    (tmp_path / "ids.png").write_bytes(png_bytes(ids))
    np.testing.assert_array_equal(read_ids(str(tmp_path / "ids.png")), ids)


def _edit_json(path, edit):
    content = json.loads(path.read_text())
    edit(content)
    path.write_text(json.dumps(content))


def _recolour(path, old, new):
    ids = read_ids(str(path))
    ids[ids == old] = new
    path.write_bytes(png_bytes(ids))


def _bad_pairs(root):
    """(what is done to the copy, the words its error names)."""
    pred, gt = root / "pred.json", root / "gt.json"
    pred_segment = json.loads(pred.read_text())["annotations"][0]["segments_info"][0]
    gt_segment = json.loads(gt.read_text())["annotations"][0]["segments_info"][0]
    return {
        "unknown category": (
            lambda: _edit_json(pred, lambda c: c["annotations"][0]["segments_info"][0].update(category_id=7)),
            ["pred.json", "annotations[0]", "segments_info[0]", f"id {pred_segment['id']}", "'category_id' 7"],
        ),
        "no iscrowd": (
            lambda: _edit_json(gt, lambda c: c["annotations"][0]["segments_info"][0].pop("iscrowd")),
            ["gt.json", "image_id 100", f"id {gt_segment['id']}", "'iscrowd'"],
        ),
        "PNG id not in JSON": (
            lambda: _recolour(root / "pred" / "000100.png", pred_segment["id"], 4242),
            ["000100.png", "image_id 100", "segment id 4242"],
        ),
        "JSON id not in PNG": (
            lambda: _edit_json(
                pred, lambda c: c["annotations"][0]["segments_info"].append({"id": 77, "category_id": 1})
            ),
            ["000100.png", "image_id 100", "segment id 77", "no pixel"],
        ),
        "no prediction": (
            lambda: _edit_json(pred, lambda c: c["annotations"].pop(2)),
            ["pred.json", "image_id 102"],
        ),
        "area below pixels": (
            lambda: _edit_json(gt, lambda c: c["annotations"][0]["segments_info"][0].update(area=1)),
            ["gt/000100.png", f"segment id {gt_segment['id']}", "'area' 1"],
        ),
        "no isthing": (
            lambda: _edit_json(gt, lambda c: c["categories"][0].pop("isthing")),
            ["gt.json", "categories[0]", "'isthing'"],
        ),
        "missing PNG": ((root / "gt" / "000104.png").unlink, ["000104.png", "cannot be read"]),
        "other size": (
            lambda: Image.new("RGB", (5, 5)).save(root / "pred" / "000103.png"),
            ["pred/000103.png", "image_id 103", "5x5", "56x40"],
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unknown category",
        "no iscrowd",
        "PNG id not in JSON",
        "JSON id not in PNG",
        "no prediction",
        "area below pixels",
        "no isthing",
        "missing PNG",
        "other size",
    ],
)
def test_bad_files_are_named(tmp_path, capsys, case):
    root = copied_fixture(tmp_path)
    spoil, words = _bad_pairs(root)[case]
    spoil()
    with pytest.raises(PanopticFileError) as error:
        evaluate_panoptic(*fixture_paths(root))
    for word in words:
        assert word in str(error.value), (word, str(error.value))
    gt_json, gt_folder, pred_json, pred_folder = fixture_paths(root)
    assert main([gt_json, pred_json, "--panoptic", gt_folder, pred_folder]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_groups_without_classes_are_nan(tmp_path):
    """A dataset without stuff: the stuff means are NaN and count no class (the official code divides by zero)."""
    root = copied_fixture(tmp_path)
    _edit_json(root / "gt.json", lambda c: [category.update(isthing=1) for category in c["categories"]])
    results = evaluate_panoptic(*fixture_paths(root))
    assert results["num_classes_st"] == 0 and np.isnan(results["LRP_st"]) and np.isnan(results["PQ_st"])
    assert results["LRP_th"] == pytest.approx(results["LRP"])


def test_iou_type_is_refused_with_panoptic(capsys):
    gt_json, gt_folder, pred_json, pred_folder = fixture_paths()
    with pytest.raises(SystemExit) as exit_:
        main([gt_json, pred_json, "--panoptic", gt_folder, pred_folder, "--iou-type", "segm"])
    assert exit_.value.code == 2 and "--iou-type does not apply" in capsys.readouterr().err
