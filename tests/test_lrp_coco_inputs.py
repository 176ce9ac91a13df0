"""``evaluate_coco`` on malformed pycocotools ``COCO`` objects: a ValueError naming the annotation (its id), the key and
what is wrong, never a numpy error; two ground truths with one id refused (COCOeval looks them up by id: it would
evaluate one twice); the command's route (a list of results, no ``loadRes``) equal to ``evaluate_coco``."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from alrp_d2.lrp import evaluate_coco
from alrp_d2.lrp.coco_api import evaluate_detections, result_detections
from alrp_d2.lrp.coco_entries import EntryError

from .lrp_official_cases import CASES, case_files, coco_pair, official

GT = {
    "images": [{"id": 1, "width": 20, "height": 20}, {"id": 2, "width": 20, "height": 20}],
    "annotations": [
        {"id": 5, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5], "area": 25, "iscrowd": 0},
        {"id": 6, "image_id": 2, "category_id": 1, "bbox": [2, 2, 8, 8], "area": 64, "iscrowd": 0},
    ],
    "categories": [{"id": 1, "name": "a"}],
}
DETECTIONS = [
    {"image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 4], "score": 0.5},
    {"image_id": 2, "category_id": 1, "bbox": [2, 2, 8, 7], "score": 0.7},
]


def coco_objects(gt, detections):
    """``COCO`` objects of the dicts as a user builds them (no check on the way: ``createIndex``, ``loadRes``)."""
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = copy.deepcopy(gt)
        coco_gt.createIndex()
        return coco_gt, coco_gt.loadRes(copy.deepcopy(detections))


def with_annotation(**changes):
    return {**GT, "annotations": [{**GT["annotations"][0], **changes}, GT["annotations"][1]]}


@pytest.mark.parametrize(
    "gt, message",
    [
        (with_annotation(bbox=[0, 0, 5]), r"ground-truth annotation 5: 'bbox' must be 4 finite numbers"),
        (with_annotation(bbox=["0", 0, 5, 5]), r"ground-truth annotation 5: 'bbox' must be 4 finite numbers"),
        (with_annotation(area="25"), r"ground-truth annotation 5: 'area' must be a finite number >= 0, got '25'"),
        (with_annotation(iscrowd="0"), r"ground-truth annotation 5: 'iscrowd' must be 0 or 1, got '0'"),
        (with_annotation(category_id=3), r"ground-truth annotation 5: category_id 3 is not a category"),
        (with_annotation(id=6), r"two ground-truth annotations have the id 6: COCOeval looks ground truths up by id"),
    ],
)
def test_a_malformed_ground_truth_is_named(gt, message):
    with pytest.raises(ValueError, match=message):
        evaluate_coco(*coco_objects(gt, DETECTIONS))


def test_a_ground_truth_without_id_is_named_by_position():
    coco_gt, coco_dt = coco_objects(GT, DETECTIONS)
    del coco_gt.imgToAnns[2][0]["id"]  # createIndex needs the ids; a COCO object changed afterwards has none
    with pytest.raises(ValueError, match=r"ground-truth annotation #1 \(it has no 'id'\): 'id' must be an integer"):
        evaluate_coco(coco_gt, coco_dt)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("score", "0.7", r"detection 2: 'score' must be a finite number, got '0.7'"),
        ("score", float("nan"), r"detection 2: 'score' must be a finite number, got nan"),
        ("bbox", [2, 2, 8], r"detection 2: 'bbox' must be 4 finite numbers"),
        ("bbox", [2, "2", 8, 7], r"detection 2: 'bbox' must be 4 finite numbers"),
        ("area", "56", r"detection 2: 'area' must be a finite number >= 0, got '56'"),
        ("image_id", 9, r"detection 2: image_id 9 is not an image of the ground truth"),
    ],
)
def test_a_malformed_detection_is_named(key, value, message):
    coco_gt, coco_dt = coco_objects(GT, DETECTIONS)
    coco_dt.anns[2][key] = value  # after loadRes, which reads bbox and score as given
    if key == "image_id":
        coco_dt.imgToAnns[9] = [coco_dt.imgToAnns[2].pop()]
    with pytest.raises(ValueError, match=message):
        evaluate_coco(coco_gt, coco_dt)


def test_a_well_formed_pair_evaluates():
    results = evaluate_coco(*coco_objects(GT, DETECTIONS))
    assert results["num_gt_per_class"] == [2] and results["oLRP"] < 100


@pytest.mark.parametrize("case", CASES)
def test_the_commands_route_equals_evaluate_coco(case):
    coco_gt, coco_dt = coco_pair(case)
    iou_type = official(case)["iou_type"]
    results = json.loads(case_files(case)[1].read_text())
    assert json.dumps(
        evaluate_detections(coco_gt, result_detections(coco_gt, results, iou_type), iou_type)
    ) == json.dumps(evaluate_coco(coco_gt, coco_dt, iou_type))


def test_the_command_imports_no_torch():
    """The command reads, checks and evaluates with numpy and pycocotools: torch's import alone would take more
    time and memory than the evaluation of a COCO-sized pair (docs/performance.md)."""
    code = "import sys; import alrp_d2.lrp.__main__; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_cocoeval_evaluates_one_of_two_ground_truths_with_one_id_twice():
    """Why repeated ids are refused (docs/lrp.md): two boxes, each detected exactly, give COCOeval's AP 25.2."""
    gt = {**GT, "annotations": [GT["annotations"][0], {**GT["annotations"][1], "id": 5, "image_id": 1}]}
    detections = [{**det, "image_id": 1, "bbox": ann["bbox"]} for det, ann in zip(DETECTIONS, gt["annotations"])]
    detections[0]["score"], detections[1]["score"] = 0.9, 0.8  # the box COCOeval loses scored first: an FP
    coco_gt, coco_dt = coco_objects(gt, detections)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_eval = COCOeval(coco_gt, coco_dt, "bbox")
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    assert [ann["bbox"] for ann in coco_eval._gts[1, 1]] == [[2, 2, 8, 8]] * 2
    assert coco_eval.stats[0] == pytest.approx(0.2525, abs=1e-4)
    with pytest.raises(ValueError, match="have the id 5"):
        evaluate_coco(coco_gt, coco_dt)


def test_box_detections_read_a_column_at_a_time_equal_those_read_one_by_one():
    """A numpy score sends the results through the per-entry checks and reads: the same arrays."""
    coco_gt, _ = coco_objects(GT, DETECTIONS)
    by_column = result_detections(coco_gt, copy.deepcopy(DETECTIONS), "bbox")
    mixed = [DETECTIONS[0], {**DETECTIONS[1], "score": np.float32(0.7)}]
    by_entry = result_detections(coco_gt, mixed, "bbox")
    for key in ("image", "label", "box", "area"):
        np.testing.assert_array_equal(getattr(by_column, key), getattr(by_entry, key))
    np.testing.assert_allclose(by_column.score, by_entry.score, rtol=1e-7)
    with pytest.raises(EntryError, match=r"entry 1: 'score' must be a finite number, got True"):
        result_detections(coco_gt, [DETECTIONS[0], {**DETECTIONS[1], "score": True}], "bbox")


def test_keypoint_results_with_boxes_take_their_areas_from_them():
    """As ``loadRes``: the first keypoint result has a box, so every result's area is its box's (here over the area
    range 'all': an unmatched one is ignored, no FP), not that of its keypoints' extent."""
    coco_gt, _ = coco_pair("keypoints")
    results = json.loads(case_files("keypoints")[1].read_text())
    boxed = [{**result, "bbox": [0, 0, 2e5, 2e5]} for result in results]
    _, coco_dt = coco_objects(coco_gt.dataset, boxed)
    ours = evaluate_detections(coco_gt, result_detections(coco_gt, boxed, "keypoints"), "keypoints")
    assert json.dumps(ours) == json.dumps(evaluate_coco(coco_gt, coco_dt, "keypoints"))
    unboxed = evaluate_detections(coco_gt, result_detections(coco_gt, results, "keypoints"), "keypoints")
    assert ours["oLRP_FP"] < unboxed["oLRP_FP"]


def test_a_malformed_keypoint_annotation_and_mismatched_keypoints_are_named():
    coco_gt, coco_dt = coco_pair("keypoints")
    ann = next(ann for ann in coco_gt.anns.values() if ann["num_keypoints"] > 0)
    ann["num_keypoints"] += 1
    with pytest.raises(ValueError, match=rf"ground-truth annotation {ann['id']}: 'num_keypoints' must be the number"):
        evaluate_coco(coco_gt, coco_dt, "keypoints")
    ann["num_keypoints"] -= 1
    with pytest.raises(ValueError, match=r"detection 1: 'keypoints' must be a list of 6 numbers"):
        evaluate_coco(coco_gt, coco_dt, "keypoints", keypoint_sigmas=[0.1, 0.1])
    dets = result_detections(coco_gt, json.loads(case_files("keypoints")[1].read_text()), "keypoints")
    with pytest.raises(ValueError, match=r"the detections' keypoints must be 2 x 3 each, as many as the sigmas"):
        evaluate_detections(coco_gt, dets, "keypoints", keypoint_sigmas=[0.1, 0.1])
