"""LVISLRPEvaluator (detectron2's LVISEvaluator with LVIS LRP) equals alrp_d2.lrp.evaluate_lvis and the official
LRP-Error LVIS fork on its fixtures (tests/fixtures/lrp_official/lvis_*), on a tiny dataset registered in LVIS format
(its metadata: ``json_file``, ``evaluator_type`` "lvis"); where LVIS AP cannot run (no ``lvis`` package, or PyPI's
with numpy >= 1.24) it reports LRP only. The
trainer picks it for LVIS datasets; an LVIS subset of the first images is refused."""

from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pytest
import torch
from detectron2.config import get_cfg
from detectron2.data import MetadataCatalog
from detectron2.structures import Boxes, BoxMode, Instances
from pycocotools import mask as mask_utils

from alrp_d2.config import add_alrp_config
from alrp_d2.engine import AlrpTrainer
from alrp_d2.evaluation import LVISLRPEvaluator
from alrp_d2.evaluation.lvis_lrp_evaluation import LVIS_AP_UNAVAILABLE
from alrp_d2.lrp import LVIS_LRP_METRICS, evaluate_lvis

from ..lvis_official_cases import lvis_files, official_lvis


def register_lvis(case: str) -> str:
    """A dataset name whose metadata points at the case's LVIS annotation file, as detectron2's LVIS datasets."""
    name = f"lvis_lrp_{case}_{uuid.uuid4().hex}"
    MetadataCatalog.get(name).set(json_file=str(lvis_files(case)[0]), evaluator_type="lvis", image_root="")
    return name


def model_outputs(case: str):
    """The case's detections as detectron2 outputs (classes 0-based, XYXY boxes, masks where the results have)."""
    gt_file, dt_file = lvis_files(case)
    images = {image["id"]: image for image in json.loads(gt_file.read_text())["images"]}
    detections = json.loads(dt_file.read_text())
    inputs, outputs = [], []
    for image_id in sorted(images):
        dets = [d for d in detections if d["image_id"] == image_id]
        instances = Instances((images[image_id]["height"], images[image_id]["width"]))
        boxes = torch.tensor(np.asarray([d["bbox"] for d in dets], dtype=np.float64).reshape(-1, 4))
        instances.pred_boxes = Boxes(BoxMode.convert(boxes, BoxMode.XYWH_ABS, BoxMode.XYXY_ABS))
        instances.scores = torch.tensor([d["score"] for d in dets], dtype=torch.float64)
        instances.pred_classes = torch.tensor([d["category_id"] - 1 for d in dets], dtype=torch.int64)
        if dets and "segmentation" in dets[0]:
            masks = [mask_utils.decode(d["segmentation"]).astype(bool) for d in dets]
            instances.pred_masks = torch.from_numpy(np.stack(masks))
        inputs.append({"image_id": image_id})
        outputs.append({"instances": instances})
    return inputs, outputs


def assert_means(results, expected, tolerance):
    for key in LVIS_LRP_METRICS:
        if math.isnan(expected[key]):
            assert math.isnan(results[key]), key
        else:
            assert results[key] == pytest.approx(expected[key], abs=tolerance), key


@pytest.mark.parametrize("case", ["lvis_boxes", "lvis_masks_with_boxes"])
def test_evaluator_equals_library_and_official(case, tmp_path):
    name = register_lvis(case)
    evaluator = LVISLRPEvaluator(name, output_dir=str(tmp_path), distributed=False)
    evaluator.reset()
    evaluator.process(*model_outputs(case))
    results = evaluator.evaluate()
    gt_file, dt_file = lvis_files(case)
    assert_means(results["bbox"], evaluate_lvis(str(gt_file), str(dt_file), "bbox"), 1e-9)
    if case == "lvis_boxes":
        assert_means(results["bbox"], official_lvis(case), 1e-6)
        assert "segm" not in results
    else:  # the masks' areas, as LVISEvaluator's mask AP: the official values of the results without boxes
        assert_means(results["segm"], official_lvis("lvis_masks"), 1e-6)
    reference = official_lvis("lvis_boxes" if case == "lvis_boxes" else "lvis_masks")
    names = {c["id"]: c["name"] for c in json.loads(gt_file.read_text())["categories"]}
    per_class = results["bbox" if case == "lvis_boxes" else "segm"]
    for category_id, olrp in zip(reference["classes"], reference["oLRP_per_class"]):
        if math.isnan(olrp):
            assert f"oLRP-{names[category_id]}" not in per_class
        else:
            assert per_class[f"oLRP-{names[category_id]}"] == pytest.approx(olrp, abs=1e-6)
    assert ("AP" in results["bbox"]) == (LVIS_AP_UNAVAILABLE is None)


def test_negative_cap_keeps_every_detection(tmp_path):
    """detectron2's ``max_dets_per_image`` as LVIS reads it: a negative cap keeps all of an image's detections."""
    name = register_lvis("lvis_boxes")
    evaluator = LVISLRPEvaluator(name, output_dir=str(tmp_path), distributed=False, max_dets_per_image=-1)
    evaluator.reset()
    evaluator.process(*model_outputs("lvis_boxes"))
    expected = evaluate_lvis(*map(str, lvis_files("lvis_boxes")), "bbox", max_detections=None)
    assert_means(evaluator.evaluate()["bbox"], expected, 1e-9)
    assert expected["oLRP"] != pytest.approx(official_lvis("lvis_boxes")["oLRP"], abs=1e-3)


def test_trainer_picks_it_for_lvis_and_refuses_a_subset(tmp_path):
    name = register_lvis("lvis_boxes")
    cfg = get_cfg()
    add_alrp_config(cfg)
    cfg.OUTPUT_DIR = str(tmp_path)
    assert isinstance(AlrpTrainer.build_evaluator(cfg, name), LVISLRPEvaluator)
    subset = f"{name}_first2"
    MetadataCatalog.get(subset).set(evaluator_type="lvis", evaluated_subset_of={"dataset": name, "images": 16})
    with pytest.raises(ValueError, match="LVIS evaluates every image of the annotation file: set TEST.MAX_IMAGES"):
        LVISLRPEvaluator(subset)
