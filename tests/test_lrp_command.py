"""``python -m alrp_d2.lrp``: the table and the JSON object (the keys of evaluate_coco, equal to the official LRP-Error
on its fixtures), and bad files refused with one line naming the file and the entry, exit status 2."""

from __future__ import annotations

import gc
import json
import math
import re

import pytest

from alrp_d2.lrp import LRP_METRICS, PER_CLASS_KEYS
from alrp_d2.lrp.__main__ import main

from .lrp_official_cases import case_files, official


@pytest.mark.parametrize("case", ["boxes", "masks", "keypoints"])
def test_json_equals_official(case, capsys):
    gt_file, dt_file = case_files(case)
    reference = official(case)
    assert main([str(gt_file), str(dt_file), "--iou-type", reference["iou_type"], "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {*LRP_METRICS, *PER_CLASS_KEYS, "classes", "num_gt_per_class"}
    for key in ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN"):
        assert printed[key] == pytest.approx(reference[key], abs=1e-6), key
    expected = [None if math.isnan(v) else v for v in reference["thresholds"]]
    assert printed["thresholds"] == pytest.approx(expected)


def test_table(capsys):
    assert main([str(path) for path in case_files("boxes")]) == 0
    out = capsys.readouterr().out
    assert "oLRP_FN" in out and "class0" in out and "threshold" in out
    assert f"{official('boxes')['oLRP']:.3f}" in out


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


GT = {
    "images": [{"id": 1, "width": 20, "height": 20}],
    "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5], "area": 25, "iscrowd": 0}],
    "categories": [{"id": 1, "name": "a"}],
}
DET = {"image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 4], "score": 0.5}
#: Two keypoints (--keypoint-sigmas 0.5,0.5): one labelled, one not.
KEYPOINT_GT = {**GT, "annotations": [{**GT["annotations"][0], "keypoints": [1, 2, 2, 0, 0, 0], "num_keypoints": 1}]}
KEYPOINT_DET = {"image_id": 1, "category_id": 1, "keypoints": [1, 2, 1, 3, 3, 1], "score": 0.5}


@pytest.mark.parametrize(
    "gt, detections, iou_type, message",
    [
        ("{", [DET], "bbox", "gt.json is not valid JSON"),
        ([], [DET], "bbox", "gt.json: a COCO ground-truth file is an object"),
        (
            {**GT, "annotations": [{**GT["annotations"][0], "category_id": 7}]},
            [DET],
            "bbox",
            r"gt.json: annotations\[0\] \(id 5\): category_id 7 is not a category",
        ),
        ({**GT, "annotations": [{**GT["annotations"][0], "iscrowd": None}]}, [DET], "bbox", "'iscrowd' must be 0 or 1"),
        ({**GT, "images": [{"id": 1}, {"id": 1}]}, [DET], "bbox", r"gt.json: images\[1\] repeats the id 1"),
        (GT, {"not": "a list"}, "bbox", "dt.json: a COCO results file is a list"),
        (GT, [DET, {**DET, "image_id": 3}], "bbox", r"dt.json: entry 1: image_id 3 is not an image"),
        (GT, [{**DET, "score": float("nan")}], "bbox", r"dt.json: entry 0: 'score' must be a finite number"),
        (GT, [{**DET, "bbox": [0, 0, -1, 2]}], "bbox", "negative width"),
        (GT, [DET], "segm", "has no 'segmentation'"),
        (GT, [KEYPOINT_DET], "keypoints", r"gt.json: annotations\[0\] \(id 5\): 'keypoints' must be a list of 6"),
        (
            {**KEYPOINT_GT, "annotations": [{**KEYPOINT_GT["annotations"][0], "keypoints": [1, 2, 3, 0, 0, 0]}]},
            [KEYPOINT_DET],
            "keypoints",
            "visibilities .* must be 0, 1 or 2",
        ),
        (
            {**KEYPOINT_GT, "annotations": [{**KEYPOINT_GT["annotations"][0], "num_keypoints": 2}]},
            [KEYPOINT_DET],
            "keypoints",
            r"'num_keypoints' must be the number of labelled keypoints \(v > 0\), 1, got 2",
        ),
        (
            KEYPOINT_GT,
            [KEYPOINT_DET, {**KEYPOINT_DET, "keypoints": [1, 2, 1]}],
            "keypoints",
            r"dt.json: entry 1: 'keyp",
        ),
        (KEYPOINT_GT, [{**KEYPOINT_DET, "keypoints": [1, 2, 1, float("inf"), 3, 1]}], "keypoints", "finite numbers"),
        (KEYPOINT_GT, [{**KEYPOINT_DET, "bbox": [0, 0, 2, 2]}, KEYPOINT_DET], "keypoints", "entry 1: 'bbox' must be"),
        (
            {**GT, "annotations": [{**GT["annotations"][0], "bbox": [0, 0, 5]}]},
            [DET],
            "bbox",
            r"gt.json: annotations\[0\] \(id 5\): 'bbox' must be 4 finite numbers",
        ),
        (
            {**GT, "annotations": [GT["annotations"][0], {**GT["annotations"][0], "bbox": [1, 1, 2, 2]}]},
            [DET],
            "bbox",
            r"gt.json: annotations\[1\] repeats the id 5",
        ),
        (
            {**GT, "annotations": [{**GT["annotations"][0], "segmentation": [[0, 0, 5]]}]},
            [DET],
            "segm",
            r"annotations\[0\] \(id 5\): 'segmentation' polygons must be lists of x, y pairs",
        ),
        (GT, [DET, {**DET, "score": "0.5"}], "bbox", r"dt.json: entry 1: 'score' must be a finite number, got '0.5'"),
        (GT, [{**DET, "bbox": [0, "0", 5, 4]}], "bbox", r"dt.json: entry 0: 'bbox' must be 4 finite numbers"),
        (GT, [{**DET, "category_id": 2}], "bbox", r"dt.json: entry 0: category_id 2 is not a category"),
        (
            {**GT, "annotations": [{**GT["annotations"][0], "segmentation": [[0, 0, 5, 0, 5, 5]]}]},
            [{**DET, "segmentation": {"size": [10, 20], "counts": "abc"}}],
            "segm",
            r"dt.json: entry 0: the RLE's size \[10, 20\] is not its image's \[height, width\] \[20, 20\]",
        ),
    ],
)
def test_bad_files_are_refused_naming_file_and_entry(tmp_path, capsys, gt, detections, iou_type, message):
    gt_file, dt_file = write(tmp_path, "gt.json", gt), write(tmp_path, "dt.json", detections)
    sigmas = ["--keypoint-sigmas", "0.5,0.5"] if iou_type == "keypoints" else []
    assert main([gt_file, dt_file, "--iou-type", iou_type, *sigmas]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("python -m alrp_d2.lrp: ") and re.search(message, err), err


def test_missing_file_and_no_detection(tmp_path, capsys):
    gt_file = write(tmp_path, "gt.json", GT)
    assert main([gt_file, str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot be read" in capsys.readouterr().err
    assert main([gt_file, write(tmp_path, "dt.json", []), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["oLRP"] == 100.0 and printed["oLRP_FN"] == 100.0 and printed["oLRP_loc"] is None


def test_keypoint_sigmas_option(tmp_path, capsys):
    """--keypoint-sigmas sets the OKS falloff: the detection's unlabelled second keypoint counts nowhere, its first
    hits the labelled one (OKS 1); a malformed list is a usage error."""
    gt_file, dt_file = write(tmp_path, "gt.json", KEYPOINT_GT), write(tmp_path, "dt.json", [KEYPOINT_DET])
    assert main([gt_file, dt_file, "--iou-type", "keypoints", "--keypoint-sigmas", "0.5,0.5", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["oLRP"] == 0.0 and printed["thresholds"] == [0.5]
    with pytest.raises(SystemExit):
        main([gt_file, dt_file, "--iou-type", "keypoints", "--keypoint-sigmas", "0.5,-1"])
    assert "positive finite sigmas expected" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([gt_file, dt_file, "--keypoint-sigmas", "0.5,0.5"])
    assert "--keypoint-sigmas is for --iou-type keypoints, not bbox" in capsys.readouterr().err


def test_a_bad_entry_far_down_a_large_file_is_named(tmp_path, capsys):
    """The checks go through every entry (the image sizes and the category set built once for all of them)."""
    images = [{"id": i, "width": 20, "height": 20} for i in range(1, 2001)]
    detections = [{**DET, "image_id": 1 + i % 2000} for i in range(20000)]
    detections[19999] = {**DET, "image_id": 2001}
    gt_file = write(tmp_path, "gt.json", {**GT, "images": images})
    assert main([gt_file, write(tmp_path, "dt.json", detections)]) == 2
    assert "dt.json: entry 19999: image_id 2001 is not an image of the ground truth" in capsys.readouterr().err
    assert main([gt_file, write(tmp_path, "dt.json", detections[:-1]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_gt_per_class"] == [1]


def test_the_garbage_collector_runs_again_after_the_files_are_read(tmp_path, capsys):
    """The JSON is parsed with the collector paused (docs/performance.md), then it runs again, also after an error."""
    assert gc.isenabled()
    gt_file = write(tmp_path, "gt.json", GT)
    assert main([gt_file, write(tmp_path, "dt.json", "[{")]) == 2
    assert gc.isenabled()
    assert main([gt_file, write(tmp_path, "dt.json", [DET])]) == 0
    assert gc.isenabled()
