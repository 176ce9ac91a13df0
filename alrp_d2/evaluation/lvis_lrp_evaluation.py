"""LVIS evaluation with the LRP of the official LRP-Error fork of the LVIS API (:func:`alrp_d2.lrp.evaluate_lvis`:
federated labels, by frequency group) next to LVIS AP."""

from __future__ import annotations

import logging
from importlib.util import find_spec
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from detectron2.data import MetadataCatalog
from detectron2.evaluation import LVISEvaluator
from detectron2.utils.file_io import PathManager
from detectron2.utils.logger import create_small_table

from ..lrp.lvis_evaluation import LVIS_LRP_METRICS, evaluate_lvis
from ..lrp.lvis_files import check_ground_truth, read_source
from ..lrp.lvis_matching import LVIS_MAX_DETECTIONS
from .coco_lrp_evaluation import check_finite_detections, class_labels, per_class_table

#: Whether the ``lvis`` package (not a dependency of alrp-d2) is installed: detectron2's LVIS evaluation imports it.
LVIS_API_INSTALLED = find_spec("lvis") is not None
#: Why detectron2's LVIS AP cannot run here (None: it can): PyPI's lvis (0.5.3, the last release) accumulates with
#: ``np.float``, which numpy 1.24 removed.
LVIS_AP_UNAVAILABLE = (
    "it needs the lvis package (pip install lvis)"
    if not LVIS_API_INSTALLED
    else None
    if hasattr(np, "float")
    else f"PyPI's lvis uses np.float, which numpy {np.__version__} no longer has (numpy < 1.24 has it)"
)


class LVISLRPEvaluator(LVISEvaluator):
    """detectron2's LVISEvaluator whose ``results["bbox"]`` (and ``results["segm"]`` for instance masks, with the
    masks' IoUs and areas) also hold the LVIS LRP means :data:`~alrp_d2.lrp.LVIS_LRP_METRICS` (x100: oLRP, its
    components, oLRP of the rare, common and frequent categories and of the small, medium and large objects) and
    ``oLRP-<category name>`` (``oLRP-<name> (id <id>)`` for a name that several categories share) of every category
    with ground truth, on the same detections as LVIS AP (at most ``max_dets_per_image``, 300 by default, an image).

    LVIS AP needs the ``lvis`` package (detectron2's LVIS evaluation imports it) and, for PyPI's lvis, numpy < 1.24
    (:data:`LVIS_AP_UNAVAILABLE`); without them this evaluator reports LRP only, read from the dataset's
    ``json_file`` with ``json``, and logs why AP is missing.
    Detections with a NaN or infinite box coordinate or score are an error (``NonFiniteDetectionsError``), an
    annotation file that LRP cannot read an ``LVISFileError`` naming the file, the entry and the key."""

    def __init__(
        self,
        dataset_name: str,
        tasks: Optional[Sequence[str]] = None,
        distributed: bool = True,
        output_dir: Optional[str] = None,
        *,
        max_dets_per_image: Optional[int] = None,
    ):
        subset_of = MetadataCatalog.get(dataset_name).get("evaluated_subset_of", None)
        if subset_of is not None:
            raise ValueError(
                f"{dataset_name} holds the first images of {subset_of['dataset']}, but LVIS evaluates every image "
                "of the annotation file: set TEST.MAX_IMAGES / train.eval_max_images to 0 for an LVIS dataset"
            )
        if LVIS_API_INSTALLED:
            super().__init__(dataset_name, tasks, distributed, output_dir, max_dets_per_image=max_dets_per_image)
        else:
            self._init_without_lvis_api(dataset_name, tasks, distributed, output_dir, max_dets_per_image)

    def _init_without_lvis_api(
        self,
        dataset_name: str,
        tasks: Optional[Sequence[str]],
        distributed: bool,
        output_dir: Optional[str],
        max_dets_per_image: Optional[int],
    ) -> None:
        """The state LVISEvaluator's ``process``, ``evaluate`` and this class's evaluation read, set as its
        ``__init__`` sets it; no LVIS API object (box-proposal recall, which needs it, is refused)."""
        self._logger = logging.getLogger(__name__)
        self._tasks, self._distributed, self._output_dir = tasks, distributed, output_dir
        self._max_dets_per_image = max_dets_per_image
        self._cpu_device = torch.device("cpu")
        self._metadata = MetadataCatalog.get(dataset_name)

    def _eval_box_proposals(self, predictions):
        if not LVIS_API_INSTALLED:
            raise ModuleNotFoundError("LVIS box-proposal recall needs the lvis package: pip install lvis")
        return super()._eval_box_proposals(predictions)

    def _eval_predictions(self, predictions):
        """LVIS AP (with the ``lvis`` package) of the gathered ``predictions``, then their LRP per task."""
        check_finite_detections(predictions)
        results = self._lvis_results(predictions)  # before LVISEvaluator renumbers the categories in place
        if LVIS_AP_UNAVAILABLE is None:
            super()._eval_predictions(predictions)
        else:
            self._logger.warning(f"No LVIS AP, LRP only: {LVIS_AP_UNAVAILABLE}.")
        path = PathManager.get_local_path(self._metadata.json_file)
        content, name = read_source(path, path)
        if not content.get("annotations"):
            self._logger.info("Annotations are not available for evaluation: no LRP.")
            return
        for task in sorted(self._tasks or self._tasks_from_predictions(results)):
            lrp = self._lrp_results(check_ground_truth(content, name, task), results, task)
            self._results.setdefault(task, {}).update(lrp)

    def _lvis_results(self, predictions: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The detections as LVIS results (copies): the dataset's category ids, as LVISEvaluator numbers them."""
        mapping = self._metadata.get("thing_dataset_id_to_contiguous_id", None)
        to_dataset_id = {v: k for k, v in mapping.items()} if mapping is not None else None
        return [
            {**r, "category_id": r["category_id"] + 1 if to_dataset_id is None else to_dataset_id[r["category_id"]]}
            for prediction in predictions
            for r in prediction.get("instances", ())
        ]

    def _lrp_results(self, content: Dict[str, Any], results: List[Dict[str, Any]], task: str) -> Dict[str, float]:
        if task == "segm":  # the masks' areas, as LVISEvaluator's AP (it drops the boxes)
            results = [{k: v for k, v in r.items() if k != "bbox"} for r in results]
        cap = LVIS_MAX_DETECTIONS if self._max_dets_per_image is None else self._max_dets_per_image
        lrp = evaluate_lvis(content, results, task, None if cap < 0 else cap)  # LVIS: a negative cap keeps all
        summary = {metric: lrp[metric] for metric in LVIS_LRP_METRICS}
        self._logger.info(f"LVIS LRP evaluation results for {task} (tau = 0.5): \n" + create_small_table(summary))
        names = {category["id"]: category["name"] for category in content["categories"]}
        labels = class_labels(lrp["classes"], [names[i] for i in lrp["classes"]])
        per_class = [
            (label, olrp) for label, olrp, n in zip(labels, lrp["oLRP_per_class"], lrp["num_gt_per_class"]) if n
        ]
        if len(per_class) > 1:
            self._logger.info(f"Per-category {task} oLRP: \n" + per_class_table(per_class))
        return {**summary, **{f"oLRP-{label}": olrp for label, olrp in per_class}}
