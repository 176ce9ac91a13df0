"""COCOLRPEvaluator, alrp_d2.lrp and the official LRP-Error give the same LRP (to 1e-6) on the official fixtures (boxes,
masks and keypoints, crowds, unlabelled keypoints, a class without ground truth, one never detected, images without
detections): the evaluator's results and thresholds, evaluate_coco on the evaluator's own COCO files and the official
values."""

from __future__ import annotations

import contextlib
import io
import json
import math
import uuid

import numpy as np
import pytest
import torch
from detectron2.config import get_cfg
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.structures import Boxes, BoxMode, Instances
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from alrp_d2.config import add_alrp_config
from alrp_d2.engine import AlrpTrainer
from alrp_d2.evaluation import COCOLRPEvaluator
from alrp_d2.evaluation.coco_lrp_evaluation import LRP_THRESHOLD_FILES
from alrp_d2.lrp import evaluate_coco
from alrp_d2.lrp.keypoint_similarity import COCO_PERSON_SIGMAS

from ..lrp_official_cases import KEYPOINTS, by_class, case_files, coco_pair, official


def model_outputs(case: str, dataset_name: str):
    """The fixture's detections as detectron2 model outputs (contiguous classes, XYXY boxes, masks for segm; for
    keypoints, the keypoints + 0.5, which detectron2 takes off when it writes COCO results, and the box they span)."""
    coco_gt, coco_dt = coco_pair(case)
    contiguous = MetadataCatalog.get(dataset_name).thing_dataset_id_to_contiguous_id
    inputs, outputs = [], []
    for image_id in sorted(coco_gt.getImgIds()):
        anns, image = coco_dt.imgToAnns.get(image_id, []), coco_gt.imgs[image_id]
        instances = Instances((image["height"], image["width"]))
        boxes = torch.tensor(np.asarray([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4))
        if official(case)["iou_type"] == "keypoints":
            keypoints = torch.tensor([a["keypoints"] for a in anns], dtype=torch.float64).reshape(-1, KEYPOINTS, 3)
            instances.pred_keypoints = keypoints + torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
        instances.pred_boxes = Boxes(BoxMode.convert(boxes, BoxMode.XYWH_ABS, BoxMode.XYXY_ABS))
        instances.scores = torch.tensor([a["score"] for a in anns], dtype=torch.float64)
        instances.pred_classes = torch.tensor([contiguous[a["category_id"]] for a in anns], dtype=torch.int64)
        if official(case)["iou_type"] == "segm":
            masks = [mask_utils.decode(coco_dt.annToRLE(a)).astype(bool) for a in anns]
            instances.pred_masks = torch.from_numpy(np.stack(masks)) if masks else torch.zeros(0, *instances.image_size)
        inputs.append({"image_id": image_id})
        outputs.append({"instances": instances})
    return inputs, outputs


@pytest.mark.parametrize("case", ["boxes", "boxes_crowded", "masks", "keypoints"])
@pytest.mark.parametrize("use_fast_impl", [True, False], ids=["COCOeval_opt", "pycocotools"])
def test_evaluator_equals_library_and_official(case, use_fast_impl, tmp_path):
    gt_file, _ = case_files(case)
    name = f"lrp_official_{case}_{uuid.uuid4().hex}"
    register_coco_instances(name, {}, str(gt_file), str(tmp_path))
    DatasetCatalog.get(name)
    evaluator = COCOLRPEvaluator(name, output_dir=str(tmp_path), distributed=False, use_fast_impl=use_fast_impl)
    evaluator.reset()
    evaluator.process(*model_outputs(case, name))
    reference = official(case)
    results = evaluator.evaluate()[reference["iou_type"]]
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_file))
        coco_dt = coco_gt.loadRes(str(tmp_path / "coco_instances_results.json"))
    library = evaluate_coco(coco_gt, coco_dt, reference["iou_type"])
    for key in ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90", "rho"):
        assert results[key] == pytest.approx(library[key], abs=1e-9, nan_ok=True), key
    for key in ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN"):
        assert results[key] == pytest.approx(reference[key], abs=1e-6), key
    names = {c["id"]: c["name"] for c in coco_gt.dataset["categories"]}
    for category_id, olrp in by_class(reference, "oLRP_per_class").items():
        if math.isnan(olrp):
            assert f"oLRP-{names[category_id]}" not in results
        else:
            assert results[f"oLRP-{names[category_id]}"] == pytest.approx(olrp, abs=1e-6)
    saved = json.loads((tmp_path / LRP_THRESHOLD_FILES[reference["iou_type"]]).read_text())["thresholds"]
    for category_id, threshold in by_class(reference, "thresholds").items():
        value = saved[str(category_id)]["threshold"]
        assert (value is None) if math.isnan(threshold) else value == pytest.approx(threshold, abs=1e-9)


def test_trainer_evaluator_takes_the_config_keypoint_sigmas(tmp_path):
    """AlrpTrainer's evaluator computes OKS with TEST.KEYPOINT_OKS_SIGMAS: its keypoint LRP is evaluate_coco's with
    those sigmas."""
    gt_file, _ = case_files("keypoints")
    name = f"lrp_keypoint_sigmas_{uuid.uuid4().hex}"
    register_coco_instances(name, {}, str(gt_file), str(tmp_path))
    DatasetCatalog.get(name)
    cfg = get_cfg()
    add_alrp_config(cfg)
    cfg.TEST.KEYPOINT_OKS_SIGMAS = (COCO_PERSON_SIGMAS * 2).tolist()
    evaluator = AlrpTrainer.build_evaluator(cfg, name, output_folder=str(tmp_path))
    evaluator.reset()
    evaluator.process(*model_outputs("keypoints", name))
    results = evaluator.evaluate()["keypoints"]
    expected = evaluate_coco(*coco_pair("keypoints"), "keypoints", keypoint_sigmas=cfg.TEST.KEYPOINT_OKS_SIGMAS)
    assert expected["oLRP"] != pytest.approx(official("keypoints")["oLRP"], abs=1e-3)
    for key in ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90"):
        assert results[key] == pytest.approx(expected[key], abs=1e-9), key
