"""Inference keeping only the detections at or above their class's LRP-optimal score threshold
(the thresholds :class:`~alrp_d2.evaluation.COCOLRPEvaluator` saves). A threshold file records the
model (architecture and weights' fingerprint), the task ("bbox" or "segm"), the classes it was
computed for, each of which must be the predictor's, and the images it was computed on: thresholds of a
subset (``TEST.MAX_IMAGES``, ``train.eval_max_images``) are used with a warning. Files of earlier
versions, without the model and the task, are read with one warning."""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from detectron2.config import CfgNode
from detectron2.structures import Instances
from detectron2.utils.file_io import PathManager

from ..checkpoint import weights_fingerprint
from ..data.dataset_classes import ClassesMismatchError, DatasetClasses, dataset_classes
from ..json_file import load_json
from .coco_lrp_evaluation import LRP_THRESHOLD_FILES
from .predictor import AlrpPredictor

logger = logging.getLogger(__name__)

RECORDED_KEYS = {"model", "task", "thresholds"}
#: Recorded since the files say which images they come from.
IMAGES_KEY = "images"


@dataclass(frozen=True)
class LRPThresholdFile:
    """A threshold file: the model and task it records (None: not recorded) and its entries
    ({category id: {"name", "threshold"}}, or the name-keyed {class name: threshold} of the
    earliest version)."""

    path: str
    model: Optional[Mapping[str, Any]]
    task: Optional[str]
    entries: Dict[str, Any]
    images: Optional[Mapping[str, Any]] = None


def read_lrp_threshold_file(path: str) -> LRPThresholdFile:
    """The content of the threshold file ``path``; FileNotFoundError or ValueError naming it."""
    if not PathManager.isfile(path):
        raise FileNotFoundError(f"LRP threshold file not found: {path} (written by COCOLRPEvaluator to its output_dir)")
    with PathManager.open(path, "rb") as f:
        content = load_json(f, path)
    if not isinstance(content, dict):
        raise ValueError(
            f"{path} must hold a JSON object mapping category ids to thresholds, got {type(content).__name__}"
        )
    if set(content) - {IMAGES_KEY} != RECORDED_KEYS:
        logger.warning(f"{path} records neither the model nor the task it was computed for (an earlier version)")
        return LRPThresholdFile(path, None, None, content)
    model, task, entries = content["model"], content["task"], content["thresholds"]
    if (
        task not in LRP_THRESHOLD_FILES
        or not isinstance(entries, dict)
        or not (model is None or isinstance(model, dict))
    ):
        raise ValueError(
            f"{path}: 'task' must be one of {sorted(LRP_THRESHOLD_FILES)}, 'thresholds' an object and 'model' an "
            f"object or null; got task {task!r}, model {model!r}"
        )
    return LRPThresholdFile(path, model, task, entries, _images_record(content.get(IMAGES_KEY), path))


def _images_record(images: Any, path: str) -> Optional[Mapping[str, Any]]:
    """The file's ``images`` ({"dataset", "evaluated", "of"}; None in files that do not record them), checked."""
    if images is None:
        return None
    counts: List[Any] = [images.get(key) for key in ("evaluated", "of")] if isinstance(images, dict) else []
    if not (
        len(counts) == 2
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
        and counts[0] <= counts[1]
    ):
        raise ValueError(
            f"{path}: 'images' must be {{'dataset', 'evaluated', 'of'}} with 0 <= evaluated <= of, got {images!r}"
        )
    return images


def warn_if_subset(thresholds: LRPThresholdFile) -> None:
    """Warns when the thresholds were computed on fewer images than their dataset holds."""
    images = thresholds.images
    if images is not None and images["evaluated"] < images["of"]:
        logger.warning(
            f"{thresholds.path} holds LRP-optimal thresholds computed on {images['evaluated']} of the {images['of']} "
            f"images of {images.get('dataset')!r} (TEST.MAX_IMAGES / train.eval_max_images): evaluate all images "
            "for thresholds of the whole dataset"
        )


def check_threshold_task(thresholds: LRPThresholdFile, task: str) -> None:
    """Raises ValueError when the file holds the thresholds of another task (e.g. the masks' for boxes)."""
    if thresholds.task is not None and thresholds.task != task:
        raise ValueError(
            f"{thresholds.path} holds the LRP-optimal thresholds of the {thresholds.task!r} task, not of {task!r}: "
            f"use the evaluator's {LRP_THRESHOLD_FILES[task]}"
        )


def check_threshold_model(thresholds: LRPThresholdFile, model_record: Mapping[str, Any]) -> None:
    """Raises ValueError naming both when the file was computed for another model than
    ``model_record`` ({"architecture", "weights_sha256"}); warns when the file records no model."""
    if thresholds.model is None:
        logger.warning(f"{thresholds.path} does not record the model it was computed for: not checked")
        return
    if dict(thresholds.model) != dict(model_record):
        raise ValueError(
            f"{thresholds.path} holds the LRP-optimal thresholds of another model:\n  the file's: "
            f"{dict(thresholds.model)}\n  this predictor's: {dict(model_record)}\nEvaluate these weights "
            "(train_net.py --eval-only) to write their thresholds."
        )


def _parse_threshold(label: str, value: object, path: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(
            f"{path}: threshold of class {label} must be a score in [0, 1] (finite) or null, got {value!r}"
        )
    return float(value)


def _by_id(content: Dict[str, Any], path: str, names: Sequence[str], ids: Sequence[int]) -> List[Optional[float]]:
    """The thresholds of an id-keyed file ({category id: {"name", "threshold"}}) in class order;
    each id must be a class of the dataset, with the same name."""
    entries: Dict[int, Dict[str, Any]] = {}
    for key, entry in content.items():
        try:
            entries[int(key)] = entry
        except ValueError:
            raise ValueError(f"{path}: key {key!r} is not a category id") from None
        if set(entry) != {"name", "threshold"}:
            raise ValueError(f"{path}: class id {key} must map to {{'name': ..., 'threshold': ...}}, got {entry!r}")
    missing = [i for i in ids if i not in entries]
    unknown = sorted(set(entries) - set(ids))
    both = f"\n  {path}: {sorted((i, e['name']) for i, e in entries.items())}\n  the dataset: {list(zip(ids, names))}"
    if missing or unknown:
        raise ClassesMismatchError(
            f"category ids in {path} do not match the dataset's: missing {missing}, unknown {unknown}{both}"
        )
    renamed = [(i, entries[i]["name"], name) for i, name in zip(ids, names) if entries[i]["name"] != name]
    if renamed:
        raise ClassesMismatchError(
            f"{path} belongs to other classes: "
            + ", ".join(f"id {i} is {a!r} in the file but {b!r} in the dataset" for i, a, b in renamed)
            + both
        )
    return [_parse_threshold(f"id {i} ({name!r})", entries[i]["threshold"], path) for i, name in zip(ids, names)]


def _by_name(content: Dict[str, Any], path: str, names: Sequence[str]) -> List[Optional[float]]:
    """The thresholds of a name-keyed file ({class name: threshold}, written by earlier versions)
    in class order; refused when two classes of the dataset share a name."""
    shared = sorted(name for name, count in Counter(names).items() if count > 1)
    if shared:
        raise ValueError(
            f"{path} keys its thresholds by class name, but the dataset has several classes named {shared}: "
            "evaluate again to write a file keyed by category id"
        )
    missing = [name for name in names if name not in content]
    unknown = [name for name in content if name not in set(names)]
    if missing or unknown:
        raise ValueError(
            f"class names in {path} do not match the dataset's thing_classes: missing {missing}, unknown {unknown}"
        )
    return [_parse_threshold(repr(name), content[name], path) for name in names]


def load_lrp_thresholds(
    path: str,
    class_names: Sequence[str],
    class_ids: Optional[Sequence[int]] = None,
    task: str = "bbox",
    model_record: Optional[Mapping[str, Any]] = None,
) -> List[Optional[float]]:
    """The thresholds of the file the evaluator saves, in the order of ``class_names`` (contiguous
    class ids), whose category ids are ``class_ids`` (default: the contiguous ids). The file must
    be of ``task`` and, when ``model_record`` is given and the file records its model, of that
    model; its entries ``{category id: {"name": ..., "threshold": number or null}}`` must name
    exactly these classes (the name-keyed ``{class name: threshold or null}`` of the earliest
    version is accepted when the class names are unique). Warns when they come from a subset of the images."""
    thresholds = read_lrp_threshold_file(path)
    check_threshold_task(thresholds, task)
    warn_if_subset(thresholds)
    if model_record is not None:
        check_threshold_model(thresholds, model_record)
    return _class_thresholds(thresholds, class_names, class_ids)


def _class_thresholds(
    thresholds: LRPThresholdFile, class_names: Sequence[str], class_ids: Optional[Sequence[int]]
) -> List[Optional[float]]:
    content, path = thresholds.entries, thresholds.path
    ids = list(range(len(class_names))) if class_ids is None else list(class_ids)
    if content and all(isinstance(value, dict) for value in content.values()):
        return _by_id(content, path, class_names, ids)
    if any(isinstance(value, dict) for value in content.values()):
        raise ValueError(f"{path} mixes id-keyed entries ({{'name', 'threshold'}}) with name-keyed thresholds")
    return _by_name(content, path, class_names)


def filter_by_class_thresholds(instances: Instances, thresholds: Sequence[Optional[float]]) -> Instances:
    """Keeps the detections whose score is at or above the threshold of their predicted class
    (``thresholds[class id]``); a ``None`` threshold (class without an LRP-optimal threshold)
    drops every detection of that class."""
    classes = instances.pred_classes
    if len(classes) and int(classes.max()) >= len(thresholds):
        raise ValueError(f"predicted class {int(classes.max())} has no threshold ({len(thresholds)} classes)")
    table = np.array([math.inf if t is None else t for t in thresholds], dtype=np.float64)
    per_detection = torch.as_tensor(table, device=instances.scores.device)[classes.long()]
    return instances[instances.scores.double() >= per_detection]


def _test_classes(cfg: CfgNode) -> DatasetClasses:
    if not len(cfg.DATASETS.TEST):
        raise ValueError("cfg.DATASETS.TEST is empty: the class names of the thresholds come from its first dataset")
    classes = dataset_classes(cfg.DATASETS.TEST[0])
    if classes is None:
        raise ValueError(f"dataset {cfg.DATASETS.TEST[0]!r} has no thing_classes in its metadata")
    return classes


class LRPThresholdPredictor(AlrpPredictor):
    """:class:`~alrp_d2.evaluation.predictor.AlrpPredictor` (DefaultPredictor with checked weights)
    returning only the detections at or above their class's LRP-optimal threshold, read from
    ``thresholds_path`` and matched to the classes (category ids and names) of ``cfg.DATASETS.TEST[0]``.
    Classes with a null threshold (no ground truth or no true positive in the evaluation) yield no
    detection. The file must hold the thresholds of ``task`` ("bbox", or "segm": the masks', whose
    scores are the boxes' in detectron2's mask heads) and, when it records its model, of the loaded
    weights (:func:`~alrp_d2.checkpoint.weights_fingerprint`); the file and its classes are checked
    before the model is built."""

    def __init__(self, cfg: CfgNode, thresholds_path: str, task: str = "bbox"):
        classes = _test_classes(cfg)
        thresholds = read_lrp_threshold_file(thresholds_path)
        check_threshold_task(thresholds, task)
        warn_if_subset(thresholds)
        self.class_thresholds = _class_thresholds(thresholds, classes.names, classes.category_ids())
        super().__init__(cfg)
        model_record = {"architecture": cfg.MODEL.META_ARCHITECTURE, "weights_sha256": weights_fingerprint(self.model)}
        check_threshold_model(thresholds, model_record)

    def __call__(self, original_image: np.ndarray) -> Dict[str, Instances]:
        predictions = super().__call__(original_image)
        predictions["instances"] = filter_by_class_thresholds(predictions["instances"], self.class_thresholds)
        return predictions
