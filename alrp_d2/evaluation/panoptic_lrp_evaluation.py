"""detectron2's COCO panoptic evaluation with LRP beside PQ (:func:`alrp_d2.lrp.evaluate_panoptic`, LRP-Error's
panoptic LRP, TPAMI 2021), without panopticapi: the predictions' PNGs are written with Pillow and PQ is computed with
LRP from the same matches."""

from __future__ import annotations

import itertools
import json
import logging
import os
import tempfile
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import detectron2.utils.comm as comm
import numpy as np
from detectron2.data import MetadataCatalog
from detectron2.evaluation import COCOPanopticEvaluator
from detectron2.utils.file_io import PathManager
from tabulate import tabulate

from ..lrp.panoptic import PANOPTIC_METRICS, evaluate_panoptic
from ..lrp.panoptic_files import png_bytes

logger = logging.getLogger(__name__)
GROUPS = {"All": "", "Things": "_th", "Stuff": "_st"}


class COCOPanopticLRPEvaluator(COCOPanopticEvaluator):
    """:class:`~detectron2.evaluation.COCOPanopticEvaluator` reporting ``LRP``, ``LRP_loc``, ``LRP_FP``, ``LRP_FN``
    (x100, lower is better) of all classes, things (``_th``) and stuff (``_st``) beside its PQ, SQ and RQ. It needs
    no panopticapi. Contains a synchronize call and has to be called from all workers, as its parent. It evaluates
    every image of the dataset's ``panoptic_json``: a dataset of its first images (TEST.MAX_IMAGES,
    ``train.eval_max_images``) is refused."""

    def __init__(self, dataset_name: str, output_dir: Optional[str] = None):
        subset_of = MetadataCatalog.get(dataset_name).get("evaluated_subset_of", None)
        if subset_of is not None:
            raise ValueError(
                f"{dataset_name} holds the first images of {subset_of['dataset']}, but panoptic evaluation reads "
                "every image of its panoptic_json: set TEST.MAX_IMAGES / train.eval_max_images to 0 for a panoptic "
                "dataset"
            )
        super().__init__(dataset_name, output_dir)

    def _ids_and_segments(self, panoptic_img: np.ndarray, segments_info: Optional[List[Dict[str, Any]]]):
        """The segment ids (0: VOID) and segments_info of a model's ``panoptic_seg``; without segments_info the image
        holds ``category * label_divisor + instance`` (-1 VOID), whose segments get ids ``label + 1`` (as the
        parent's)."""
        if segments_info is not None:
            return panoptic_img, [dict(segment) for segment in segments_info]
        labels = np.unique(panoptic_img)
        labels = labels[labels != -1]
        classes = labels // self._metadata.label_divisor
        isthing = np.isin(classes, list(self._metadata.thing_dataset_id_to_contiguous_id.values()))
        segments = [
            {"id": int(label) + 1, "category_id": int(c), "isthing": bool(t)}
            for label, c, t in zip(labels, classes, isthing)
        ]
        return panoptic_img + 1, segments

    def process(self, inputs, outputs):
        for input, output in zip(inputs, outputs):
            panoptic_img, segments_info = output["panoptic_seg"]
            ids, segments = self._ids_and_segments(panoptic_img.cpu().numpy(), segments_info)
            self._predictions.append(
                {
                    "image_id": input["image_id"],
                    "file_name": os.path.splitext(os.path.basename(input["file_name"]))[0] + ".png",
                    "png_string": png_bytes(ids.astype(np.int64)),
                    "segments_info": [self._convert_category_id(segment) for segment in segments],
                }
            )

    def _write_predictions(self, predictions: List[Dict[str, Any]], gt_json: str, pred_dir: str) -> str:
        """The PNGs into ``pred_dir`` and the ground-truth JSON with the predictions as its annotations into the
        output folder (or ``pred_dir``), as the parent writes them; returns the JSON's local path."""
        annotations = []
        for prediction in predictions:
            with open(os.path.join(pred_dir, prediction["file_name"]), "wb") as file:
                file.write(prediction["png_string"])
            annotations.append({key: value for key, value in prediction.items() if key != "png_string"})
        with open(gt_json) as file:
            content = json.load(file)
        content["annotations"] = annotations
        predictions_json = os.path.join(self._output_dir or pred_dir, "predictions.json")
        with PathManager.open(predictions_json, "w") as file:
            file.write(json.dumps(content))
        return PathManager.get_local_path(predictions_json)

    def evaluate(self):
        comm.synchronize()
        predictions = list(itertools.chain(*comm.gather(self._predictions)))
        if not comm.is_main_process():
            return None
        gt_json = PathManager.get_local_path(self._metadata.panoptic_json)
        gt_folder = PathManager.get_local_path(self._metadata.panoptic_root)
        with tempfile.TemporaryDirectory(prefix="panoptic_eval") as pred_dir:
            predictions_json = self._write_predictions(predictions, gt_json, pred_dir)
            results = evaluate_panoptic(gt_json, gt_folder, predictions_json, pred_dir)
        logger.info("Panoptic evaluation results (x100; LRP lower is better):\n" + results_table(results))
        return OrderedDict(
            {"panoptic_seg": {m + suffix: results[m + suffix] for suffix in GROUPS.values() for m in PANOPTIC_METRICS}}
        )


def results_table(results: Dict[str, Any]) -> str:
    """All classes, things and stuff: PQ, SQ, RQ, LRP and its components, the classes counted."""
    rows: List[Tuple[Any, ...]] = [
        (group, *(results[m + suffix] for m in PANOPTIC_METRICS), results["num_classes" + suffix])
        for group, suffix in GROUPS.items()
    ]
    headers = ["", *PANOPTIC_METRICS, "#categories"]
    return tabulate(rows, headers=headers, tablefmt="pipe", floatfmt=".3f", stralign="center", numalign="center")
