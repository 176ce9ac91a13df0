"""Inference keeping only the detections at or above their class's LRP-optimal score threshold
(the thresholds :class:`~alrp_d2.evaluation.COCOLRPEvaluator` saves)."""

from __future__ import annotations

import json
import math
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from detectron2.config import CfgNode
from detectron2.data import MetadataCatalog
from detectron2.structures import Instances
from detectron2.utils.file_io import PathManager

from ..checkpoint import AlrpPredictor


def _parse_threshold(name: str, value: object, path: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{path}: threshold of class {name!r} must be a finite number or null, got {value!r}")
    return float(value)


def load_lrp_thresholds(path: str, class_names: Sequence[str]) -> List[Optional[float]]:
    """Reads ``{class name: threshold or null}`` (as saved by the evaluator) and returns the
    thresholds in the order of ``class_names`` (contiguous class ids). The file must name
    exactly these classes."""
    if not PathManager.isfile(path):
        raise FileNotFoundError(f"LRP threshold file not found: {path} (written by COCOLRPEvaluator to its output_dir)")
    with PathManager.open(path) as f:
        try:
            content = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(content, dict):
        raise ValueError(
            f"{path} must hold a JSON object mapping class names to thresholds, got {type(content).__name__}"
        )
    missing = [name for name in class_names if name not in content]
    unknown = [name for name in content if name not in set(class_names)]
    if missing or unknown:
        raise ValueError(
            f"class names in {path} do not match the dataset's thing_classes: missing {missing}, unknown {unknown}"
        )
    return [_parse_threshold(name, content[name], path) for name in class_names]


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


def _thing_classes(cfg: CfgNode) -> List[str]:
    if not len(cfg.DATASETS.TEST):
        raise ValueError("cfg.DATASETS.TEST is empty: the class names of the thresholds come from its first dataset")
    metadata = MetadataCatalog.get(cfg.DATASETS.TEST[0])
    if not hasattr(metadata, "thing_classes"):
        raise ValueError(f"dataset {cfg.DATASETS.TEST[0]!r} has no thing_classes in its metadata")
    return list(metadata.thing_classes)


class LRPThresholdPredictor(AlrpPredictor):
    """:class:`~alrp_d2.checkpoint.AlrpPredictor` (DefaultPredictor with checked weights)
    returning only the detections at or above their class's LRP-optimal threshold, read from
    ``thresholds_path`` and matched to ``MetadataCatalog.get(cfg.DATASETS.TEST[0]).thing_classes``.
    Classes with a null threshold (no ground truth or no true positive in the evaluation) yield no
    detection."""

    def __init__(self, cfg: CfgNode, thresholds_path: str):
        self.class_thresholds = load_lrp_thresholds(thresholds_path, _thing_classes(cfg))
        super().__init__(cfg)

    def __call__(self, original_image: np.ndarray) -> Dict[str, Instances]:
        predictions = super().__call__(original_image)
        predictions["instances"] = filter_by_class_thresholds(predictions["instances"], self.class_thresholds)
        return predictions
