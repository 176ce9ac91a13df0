"""COCO evaluation with optimal LRP, AP at IoU 0.90 and the classification/localisation rank
correlation next to COCO AP (see :mod:`alrp_d2.lrp.lrp_metric` for the definitions)."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import detectron2.utils.comm as comm
import numpy as np
from detectron2.evaluation import COCOEvaluator
from detectron2.utils.file_io import PathManager
from detectron2.utils.logger import create_small_table
from pycocotools.cocoeval import COCOeval
from tabulate import tabulate

from ..lrp.coco_matching import detection_matches
from ..lrp.lrp_metric import LRP_TAU, ClassResult, evaluate_classes, summarise

LRP_THRESHOLDS_FILE = "lrp_optimal_thresholds.json"
#: The tasks that get LRP metrics, and the file of their LRP-optimal thresholds.
LRP_THRESHOLD_FILES = {
    "bbox": LRP_THRESHOLDS_FILE,
    "segm": "lrp_optimal_thresholds_segm.json",
    "keypoints": "lrp_optimal_thresholds_keypoints.json",
}
AP90_IOU = 0.9
LRP_METRICS = ("oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90", "rho")
UNDEFINED_BECAUSE = {
    "oLRP": "no class has ground truth",
    "oLRP_loc": "no class has a true positive",
    "oLRP_FP": "no class has a true positive",
    "oLRP_FN": "no class has ground truth",
    "AP90": "no class has ground truth",
    "rho": "no class has two true positives with distinct scores and distinct IoUs",
}


def ap_at_iou(coco_eval: COCOeval, iou: float) -> float:
    """COCO AP (x100) at one IoU threshold: the mean of the accumulated precision at that
    threshold over recall thresholds and categories, area 'all', ``maxDets[-1]`` (as COCOeval
    summarises AP50 and AP75); NaN when no category has ground truth."""
    params = coco_eval.params
    hits = np.flatnonzero(np.isclose(np.asarray(params.iouThrs, dtype=np.float64), iou))
    if len(hits) == 0:
        raise ValueError(f"COCOeval was not run at IoU {iou}: params.iouThrs = {list(params.iouThrs)}")
    area = params.areaRngLbl.index("all")
    precision = coco_eval.eval["precision"][hits[0], :, :, area, -1]
    valid = precision[precision > -1]
    return float(np.mean(valid) * 100) if valid.size else float("nan")


def lrp_optimal_thresholds(
    class_ids: Sequence[int], class_names: Sequence[str], classes: Sequence[ClassResult]
) -> Dict[int, Dict[str, Any]]:
    """The LRP-threshold file's content: category id -> {"name", "threshold"}, the threshold
    ``None`` for a class without ground truth or without any true positive. Keyed by id, so that
    two classes of the same name cannot collide."""
    return {
        int(class_id): {"name": name, "threshold": result.lrp.threshold if result.lrp is not None else None}
        for class_id, name, result in zip(class_ids, class_names, classes)
    }


def class_labels(class_ids: Sequence[int], class_names: Sequence[str]) -> List[str]:
    """A unique label per class for result keys: its name, or ``<name> (id <id>)`` for a name that
    several classes share."""
    counts = Counter(class_names)
    return [name if counts[name] == 1 else f"{name} (id {i})" for i, name in zip(class_ids, class_names)]


def per_class_olrp(labels: Sequence[str], classes: Sequence[ClassResult]) -> List[Tuple[str, float]]:
    """``(class label, oLRP x100)`` of the classes with ground truth."""
    return [(label, 100.0 * result.lrp.olrp) for label, result in zip(labels, classes) if result.lrp is not None]


def per_class_table(rows: List[Tuple[str, float]]) -> str:
    """Per-category oLRP, one category a line."""
    return tabulate(rows, tablefmt="pipe", floatfmt=".3f", headers=["category", "oLRP"], numalign="left")


class NonFiniteDetectionsError(ValueError):
    """Detections with a NaN or infinite box coordinate or score: COCO evaluation would score them silently."""


def check_finite_detections(predictions: Sequence[Mapping[str, Any]]) -> None:
    """Raises :class:`NonFiniteDetectionsError` counting the detections (COCO json: ``bbox``, ``keypoints``,
    ``score``) of ``predictions`` (detectron2's per-image ``{"image_id", "instances"}``) whose box, keypoints or score
    is not finite, naming the first images: pycocotools would match and score them as if they were boxes."""
    images = []
    count = 0
    for prediction in predictions:
        bad = sum(
            1
            for detection in prediction.get("instances", ())
            if not all(math.isfinite(v) for v in (*detection.get("bbox", ()), *detection.get("keypoints", ())))
            or not math.isfinite(detection["score"])
        )
        if bad:
            images.append(prediction["image_id"])
            count += bad
    if count:
        raise NonFiniteDetectionsError(
            f"{count} detection(s) of {len(images)} image(s) have a NaN or infinite box, keypoint or score (image "
            f"ids {images[:10]}{' ...' if len(images) > 10 else ''}): the model's outputs are broken (weights of a "
            "diverged run, or inputs it cannot take) and cannot be scored"
        )


class COCOLRPEvaluator(COCOEvaluator):
    """detectron2's COCOEvaluator whose ``results["bbox"]`` (and ``results["segm"]`` for instance
    masks, with the masks' IoUs, as the official LRP code evaluates segmentation; ``results["keypoints"]`` for
    keypoints, with OKS and detectron2's ``kpt_oks_sigmas``, at most 20 detections per image) also holds
    ``oLRP``, ``oLRP_loc``, ``oLRP_FP``, ``oLRP_FN`` (x100, means over classes with ground truth; the localisation
    and FP components over classes with a true positive), ``AP90`` (x100), ``rho`` (mean Spearman correlation between
    scores and IoUs of the TPs, in [-1, 1]) and ``oLRP-<class name>`` (``oLRP-<name> (id <id>)`` for a
    name that several classes share). The LRP-optimal score threshold of every class is written to
    ``<output_dir>/lrp_optimal_thresholds.json`` (``..._segm.json`` for masks, ``..._keypoints.json`` for
    keypoints) as ``{"model": model_record, "task": "bbox", "segm" or "keypoints", "images": {"dataset",
    "evaluated", "of"}, "thresholds": {category id: {"name", "threshold"}}}`` (``images``: how many of the
    dataset's images they were computed on); ``model_record`` ({"architecture", "weights_sha256"}, from
    ``AlrpTrainer.test``; None when unknown) lets :class:`~alrp_d2.evaluation.LRPThresholdPredictor` refuse the file
    for another model.

    Detections with a NaN or infinite box coordinate, keypoint or score are an error
    (:class:`NonFiniteDetectionsError`, on the process that evaluates), never scored.
    Empty cases give NaN with a warning naming the reason, never an error: no detection at all,
    no ground truth in the test set (all LRP metrics), a class without ground truth (left out of
    the means, threshold null).

    LRP reuses the COCOeval that computed AP: its matching at IoU 0.5 (area 'all', at most
    ``max_dets_per_image`` detections per image, 100 by default), read from ``evalImgs`` with
    the Python COCOeval and reassigned on COCOeval's IoU matrices with detectron2's
    ``COCOeval_opt``, whose matches are not readable from Python."""

    def __init__(self, dataset_name: str, *args: Any, model_record: Optional[Mapping[str, str]] = None, **kwargs: Any):
        super().__init__(dataset_name, *args, **kwargs)
        # A plain dict also when a LazyConfig passes its node (an omegaconf DictConfig).
        self._model_record = None if model_record is None else {str(k): str(v) for k, v in model_record.items()}

    def _eval_predictions(self, predictions, img_ids=None):
        """detectron2's evaluation of the gathered ``predictions``, after :func:`check_finite_detections`."""
        check_finite_detections(predictions)
        return super()._eval_predictions(predictions, img_ids=img_ids)

    def _derive_coco_results(self, coco_eval, iou_type, class_names=None):
        results = super()._derive_coco_results(coco_eval, iou_type, class_names=class_names)
        if iou_type not in LRP_THRESHOLD_FILES:
            return results
        if coco_eval is None:
            self._logger.warning(
                f"No predictions: {iou_type} LRP metrics are reported as NaN and no thresholds are saved."
            )
            results.update({metric: float("nan") for metric in LRP_METRICS})
            return results
        class_ids = list(coco_eval.params.catIds)
        class_names = self._category_names(coco_eval, class_names)
        results.update(self._lrp_results(coco_eval, iou_type, class_ids, class_names))
        return results

    @staticmethod
    def _category_names(coco_eval: COCOeval, class_names: Optional[List[str]]) -> List[str]:
        cat_ids = coco_eval.params.catIds
        if class_names is None:
            return [coco_eval.cocoGt.cats[cat_id]["name"] for cat_id in cat_ids]
        if len(class_names) != len(cat_ids):
            raise ValueError(f"{len(class_names)} class names for {len(cat_ids)} evaluated COCO categories")
        return list(class_names)

    def _lrp_results(
        self, coco_eval: COCOeval, iou_type: str, class_ids: List[int], class_names: List[str]
    ) -> Dict[str, float]:
        classes = evaluate_classes(detection_matches(coco_eval, LRP_TAU), LRP_TAU)
        summary = summarise(classes)
        summary["AP90"] = ap_at_iou(coco_eval, AP90_IOU)
        summary = {metric: summary[metric] for metric in LRP_METRICS}
        self._logger.info(f"LRP evaluation results for {iou_type} (tau = 0.5): \n" + create_small_table(summary))
        self._log_undefined(summary, classes, class_names)
        per_class = per_class_olrp(class_labels(class_ids, class_names), classes)
        if len(per_class) > 1:
            self._logger.info(f"Per-category {iou_type} oLRP: \n" + per_class_table(per_class))
        thresholds = lrp_optimal_thresholds(class_ids, class_names, classes)
        self._save_thresholds(thresholds, iou_type, self._evaluated_images(coco_eval))
        return {**summary, **{f"oLRP-{name}": olrp for name, olrp in per_class}}

    def _log_undefined(self, summary: Dict[str, float], classes: Sequence[ClassResult], class_names: List[str]) -> None:
        without_gt = [name for name, result in zip(class_names, classes) if result.lrp is None]
        if without_gt:
            self._logger.info(
                f"{len(without_gt)} classes without ground truth are left out of LRP (their detections count "
                f"nowhere, their threshold is null): {without_gt}"
            )
        for metric, value in summary.items():
            if not np.isfinite(value):
                self._logger.warning(f"{metric} is undefined and reported as NaN: {UNDEFINED_BECAUSE[metric]}.")

    def _evaluated_images(self, coco_eval: COCOeval) -> Dict[str, Any]:
        """The images the thresholds come from: ``evaluated`` of the ``of`` images of ``dataset`` (fewer with
        ``TEST.MAX_IMAGES`` / ``train.eval_max_images``, whose dataset records the one it was cut from)."""
        evaluated = len(coco_eval.params.imgIds)
        subset_of = self._metadata.get("evaluated_subset_of", None)
        if subset_of is None:
            return {"dataset": self._metadata.name, "evaluated": evaluated, "of": evaluated}
        return {"dataset": subset_of["dataset"], "evaluated": evaluated, "of": int(subset_of["images"])}

    def _save_thresholds(self, thresholds: Dict[int, Dict[str, Any]], iou_type: str, images: Dict[str, Any]) -> None:
        if not self._output_dir or not comm.is_main_process():
            return
        PathManager.mkdirs(self._output_dir)
        path = os.path.join(self._output_dir, LRP_THRESHOLD_FILES[iou_type])
        content = {"model": self._model_record, "task": iou_type, "images": images, "thresholds": thresholds}
        with PathManager.open(path, "w") as f:
            json.dump(content, f, indent=2)
        self._logger.info(f"Saved LRP-optimal score thresholds to {path}")
