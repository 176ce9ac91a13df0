"""A detector that predicts a dataset's ground-truth boxes shifted by a few pixels (AP well above 0 and below 100),
recording the ids of the images it is asked about: evaluation tests that need known, non-trivial metrics."""

from __future__ import annotations

from typing import Any, Dict, List

import torch
from detectron2.data import DatasetCatalog
from detectron2.structures import Boxes, BoxMode, Instances
from torch import nn

SHIFT_PX = 3.0


class ShiftedTruthDetector(nn.Module):
    """Predicts, for each input image (by its ``image_id``), the non-crowd boxes of ``dataset_name`` moved right by
    :data:`SHIFT_PX`, with their classes and decreasing scores; ``seen`` lists the image ids it was given."""

    def __init__(self, dataset_name: str):
        super().__init__()
        self.register_buffer("anchor", torch.zeros(1))  # a state to fingerprint
        self.records = {record["image_id"]: record for record in DatasetCatalog.get(dataset_name)}
        self.seen: List[Any] = []

    def forward(self, batched_inputs: List[Dict[str, Any]]) -> List[Dict[str, Instances]]:
        return [self.predict(inputs["image_id"]) for inputs in batched_inputs]

    def predict(self, image_id: Any) -> Dict[str, Instances]:
        self.seen.append(image_id)
        record = self.records[image_id]
        objects = [a for a in record["annotations"] if not a.get("iscrowd", 0)]
        boxes = torch.tensor(
            [BoxMode.convert(a["bbox"], a["bbox_mode"], BoxMode.XYXY_ABS) for a in objects], dtype=torch.float32
        ).reshape(-1, 4)
        instances = Instances((record["height"], record["width"]))
        instances.pred_boxes = Boxes(boxes + torch.tensor([SHIFT_PX, 0.0, SHIFT_PX, 0.0]))
        instances.scores = torch.linspace(0.9, 0.5, len(objects))
        instances.pred_classes = torch.tensor([a["category_id"] for a in objects], dtype=torch.long)
        return {"instances": instances}
