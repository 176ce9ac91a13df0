"""COCOPanopticLRPEvaluator reports LRP and PQ equal to the official LRP-Error panopticapi fork (to 1e-6) on its
fixture, registered here as a tiny dataset, from both outputs of detectron2's panoptic models: ids with segments_info
(Panoptic FPN) and ``category * label_divisor + instance`` without (Panoptic-DeepLab). The trainer builds it for COCO
panoptic datasets, with detectron2's semantic and the COCO LRP evaluator where the dataset has their labels."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
import torch
from detectron2.config import LazyCall as L
from detectron2.config import get_cfg
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.evaluation import DatasetEvaluators, SemSegEvaluator
from omegaconf import OmegaConf

from alrp_d2.config import add_alrp_config
from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.lazy_run import build_lazy_evaluator
from alrp_d2.evaluation import COCOLRPEvaluator, COCOPanopticLRPEvaluator
from alrp_d2.lrp.panoptic_files import read_ids

from ..panoptic_cases import FIXTURE, GROUPS, assert_means_equal_official, fixture_paths, official

THINGS, STUFF, LABEL_DIVISOR = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4}, {10: 5, 11: 6, 12: 7, 13: 8}, 1000


@pytest.fixture
def dataset_name():
    name = f"panoptic_lrp_fixture_{uuid.uuid4().hex}"
    gt_json, gt_folder, _, _ = fixture_paths()
    MetadataCatalog.get(name).set(
        panoptic_json=gt_json,
        panoptic_root=gt_folder,
        thing_dataset_id_to_contiguous_id=THINGS,
        stuff_dataset_id_to_contiguous_id=STUFF,
        label_divisor=LABEL_DIVISOR,
    )
    yield name
    MetadataCatalog.remove(name)


def model_outputs(with_segments_info: bool):
    """The fixture's predictions as detectron2 ``panoptic_seg`` outputs (contiguous classes)."""
    inputs, outputs = [], []
    for annotation in json.loads((FIXTURE / "pred.json").read_text())["annotations"]:
        ids = read_ids(str(FIXTURE / "pred" / annotation["file_name"]))
        segments = annotation["segments_info"]
        isthing = [s["category_id"] in THINGS for s in segments]
        classes = [(THINGS if t else STUFF)[s["category_id"]] for s, t in zip(segments, isthing)]
        if with_segments_info:
            image = torch.from_numpy(ids.astype(np.int32))
            info = [{"id": s["id"], "category_id": c, "isthing": t} for s, c, t in zip(segments, classes, isthing)]
        else:
            labels = np.full(ids.shape, -1, dtype=np.int32)
            for instance, (segment, category) in enumerate(zip(segments, classes)):
                labels[ids == segment["id"]] = category * LABEL_DIVISOR + instance
            image, info = torch.from_numpy(labels), None
        inputs.append({"image_id": annotation["image_id"], "file_name": f"/images/{annotation['image_id']:06d}.jpg"})
        outputs.append({"panoptic_seg": (image, info)})
    return inputs, outputs


@pytest.mark.parametrize("with_segments_info", [True, False], ids=["segments_info", "label_divisor"])
def test_evaluator_equals_official(dataset_name, tmp_path, with_segments_info):
    evaluator = COCOPanopticLRPEvaluator(dataset_name, output_dir=str(tmp_path))
    evaluator.reset()
    inputs, outputs = model_outputs(with_segments_info)
    evaluator.process(inputs[:5], outputs[:5])
    evaluator.process(inputs[5:], outputs[5:])
    results = evaluator.evaluate()["panoptic_seg"]
    assert set(results) == {
        m + s for s in GROUPS.values() for m in ("PQ", "SQ", "RQ", "LRP", "LRP_loc", "LRP_FP", "LRP_FN")
    }
    assert_means_equal_official(results, official())
    written = json.loads((tmp_path / "predictions.json").read_text())
    assert len(written["annotations"]) == len(inputs) and written["categories"]
    if with_segments_info:  # the model's outputs are left as they were
        assert all("isthing" in segment for output in outputs for segment in output["panoptic_seg"][1])


def trainer_config(tmp_path, max_images: int = 0):
    cfg = get_cfg()
    add_alrp_config(cfg)
    cfg.OUTPUT_DIR, cfg.TEST.MAX_IMAGES = str(tmp_path), max_images
    return cfg


def test_trainer_evaluates_a_panoptic_dataset_with_lrp(dataset_name, tmp_path):
    """detectron2's standard COCO panoptic registration (no semantic labels, no instances' json_file): the trainer's
    evaluator is COCOPanopticLRPEvaluator, equal to the official code."""
    MetadataCatalog.get(dataset_name).set(evaluator_type="coco_panoptic_seg", json_file=None)
    evaluator = AlrpTrainer.build_evaluator(trainer_config(tmp_path), dataset_name)
    assert type(evaluator) is COCOPanopticLRPEvaluator
    evaluator.reset()
    evaluator.process(*model_outputs(with_segments_info=True))
    assert_means_equal_official(evaluator.evaluate()["panoptic_seg"], official())


def test_trainer_adds_semantic_and_instance_evaluators_to_a_separated_dataset(dataset_name, tmp_path):
    """detectron2's separated registration (``sem_seg_root``, the instances' ``json_file``): SemSegEvaluator,
    COCOLRPEvaluator and COCOPanopticLRPEvaluator, as detectron2's train_net.py builds them; its first images only
    (TEST.MAX_IMAGES) are refused, as panoptic evaluation reads the whole panoptic_json."""
    images = [a["image_id"] for a in json.loads((FIXTURE / "gt.json").read_text())["annotations"]]
    instances = tmp_path / "instances.json"
    categories = [{"id": c, "name": f"thing{c}"} for c in THINGS]
    instances.write_text(
        json.dumps({"images": [{"id": i} for i in images], "annotations": [], "categories": categories})
    )
    records = [{"file_name": f"/images/{i}.jpg", "sem_seg_file_name": f"/sem/{i}.png", "image_id": i} for i in images]
    DatasetCatalog.register(dataset_name, lambda: records)
    MetadataCatalog.get(dataset_name).set(
        evaluator_type="coco_panoptic_seg",
        sem_seg_root="/sem",
        json_file=str(instances),
        stuff_classes=[f"class{c}" for c in range(len(THINGS) + len(STUFF))],
        ignore_label=255,
    )
    try:
        evaluator = AlrpTrainer.build_evaluator(trainer_config(tmp_path), dataset_name)
        assert isinstance(evaluator, DatasetEvaluators)
        kinds = [type(e) for e in evaluator._evaluators]
        assert kinds == [SemSegEvaluator, COCOLRPEvaluator, COCOPanopticLRPEvaluator]
        with pytest.raises(ValueError, match="panoptic evaluation reads every image of its panoptic_json: set TEST"):
            AlrpTrainer.build_evaluator(trainer_config(tmp_path, max_images=2), dataset_name)
    finally:
        DatasetCatalog.remove(dataset_name)


def test_lazy_config_list_of_evaluators(dataset_name, tmp_path):
    """A LazyConfig's ``dataloader.evaluator`` as a list (detectron2's panoptic data configs) with
    COCOPanopticLRPEvaluator in place of COCOPanopticEvaluator: the list in ``DatasetEvaluators``, equal to the
    official code."""
    cfg = OmegaConf.create({"dataloader": {"test": {"dataset": {"names": dataset_name}}}, "train": {}})
    cfg.dataloader.evaluator = [
        L(COCOPanopticLRPEvaluator)(dataset_name="${...test.dataset.names}", output_dir=str(tmp_path))
    ]
    evaluator = build_lazy_evaluator(cfg, torch.nn.Linear(1, 1), {dataset_name: dataset_name})
    assert isinstance(evaluator, DatasetEvaluators)
    assert [type(e) for e in evaluator._evaluators] == [COCOPanopticLRPEvaluator]
    evaluator.reset()
    evaluator.process(*model_outputs(with_segments_info=False))
    assert_means_equal_official(evaluator.evaluate()["panoptic_seg"], official())
