"""The evaluators of a YAML run's test dataset, chosen by its ``evaluator_type`` as detectron2's ``tools/train_net.py``
chooses them, with LRP beside AP and PQ."""

from __future__ import annotations

from functools import partial
from typing import Any, Dict, List, Optional, Sequence

from detectron2.data import MetadataCatalog
from detectron2.evaluation import DatasetEvaluator, DatasetEvaluators, SemSegEvaluator

from ..evaluation import COCOLRPEvaluator, COCOPanopticLRPEvaluator, LVISLRPEvaluator


def lrp_evaluator(
    dataset_name: str,
    output_dir: str,
    kpt_oks_sigmas: Sequence[float] = (),
    model_record: Optional[Dict[str, str]] = None,
) -> Any:
    """The evaluator of ``dataset_name``: :class:`LVISLRPEvaluator` for ``evaluator_type`` "lvis"; for
    "coco_panoptic_seg" (detectron2's COCO panoptic registrations) :class:`COCOPanopticLRPEvaluator` (PQ and LRP),
    with detectron2's ``SemSegEvaluator`` where the dataset has semantic labels (``sem_seg_root``: the "separated"
    registration) and :class:`COCOLRPEvaluator` where it has instances (``json_file``), in ``DatasetEvaluators``;
    otherwise :class:`COCOLRPEvaluator` (keypoints' OKS with ``kpt_oks_sigmas``, COCO's person sigmas when empty)."""
    metadata = MetadataCatalog.get(dataset_name)
    evaluator_type = metadata.get("evaluator_type", None)
    if evaluator_type == "lvis":
        return LVISLRPEvaluator(dataset_name, output_dir=output_dir)
    coco = partial(COCOLRPEvaluator, dataset_name, output_dir=output_dir, kpt_oks_sigmas=tuple(kpt_oks_sigmas))
    if evaluator_type != "coco_panoptic_seg":
        return coco(model_record=model_record)
    panoptic = COCOPanopticLRPEvaluator(dataset_name, output_dir=output_dir)  # first: it refuses a dataset's subset
    evaluators: List[DatasetEvaluator] = []
    if metadata.get("sem_seg_root", None):
        evaluators.append(SemSegEvaluator(dataset_name, distributed=True, output_dir=output_dir))
    if metadata.get("json_file", None):
        evaluators.append(coco(model_record=model_record))
    return panoptic if not evaluators else DatasetEvaluators([*evaluators, panoptic])
