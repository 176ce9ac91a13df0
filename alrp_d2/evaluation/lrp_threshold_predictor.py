"""Inference keeping only the detections at or above their class's LRP-optimal score threshold
(the thresholds :class:`~alrp_d2.evaluation.COCOLRPEvaluator` saves)."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from detectron2.config import CfgNode
from detectron2.structures import Instances
from detectron2.utils.file_io import PathManager

from ..data.dataset_classes import DatasetClasses, dataset_classes
from .predictor import AlrpPredictor


def _parse_threshold(label: str, value: object, path: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{path}: threshold of class {label} must be a finite number or null, got {value!r}")
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
    if missing or unknown:
        raise ValueError(
            f"category ids in {path} do not match the dataset's (id, name) {list(zip(ids, names))}: "
            f"missing {missing}, unknown {unknown}"
        )
    renamed = [(i, entries[i]["name"], name) for i, name in zip(ids, names) if entries[i]["name"] != name]
    if renamed:
        raise ValueError(
            f"{path} belongs to other classes: "
            + ", ".join(f"id {i} is {a!r} in the file but {b!r} in the dataset" for i, a, b in renamed)
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
    path: str, class_names: Sequence[str], class_ids: Optional[Sequence[int]] = None
) -> List[Optional[float]]:
    """The thresholds of the file the evaluator saves, in the order of ``class_names`` (contiguous
    class ids), whose category ids are ``class_ids`` (default: the contiguous ids). The file is
    ``{category id: {"name": ..., "threshold": number or null}}`` and must name exactly these
    classes, or the name-keyed ``{class name: threshold or null}`` of earlier versions, accepted
    when the class names are unique."""
    if not PathManager.isfile(path):
        raise FileNotFoundError(f"LRP threshold file not found: {path} (written by COCOLRPEvaluator to its output_dir)")
    with PathManager.open(path) as f:
        try:
            content = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(content, dict):
        raise ValueError(
            f"{path} must hold a JSON object mapping category ids to thresholds, got {type(content).__name__}"
        )
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
    detection."""

    def __init__(self, cfg: CfgNode, thresholds_path: str):
        classes = _test_classes(cfg)
        self.class_thresholds = load_lrp_thresholds(thresholds_path, classes.names, classes.category_ids())
        super().__init__(cfg)

    def __call__(self, original_image: np.ndarray) -> Dict[str, Instances]:
        predictions = super().__call__(original_image)
        predictions["instances"] = filter_by_class_thresholds(predictions["instances"], self.class_thresholds)
        return predictions
