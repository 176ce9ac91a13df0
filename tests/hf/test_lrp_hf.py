"""alrp_d2.lrp.LRP on a tiny random-init RT-DETR's outputs as Hugging Face's ``post_process_object_detection`` returns
them (docs/lrp.md): the same results as evaluate_coco on the same detections as COCO files, and the LRP-optimal
thresholds applied as the page applies them."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
import torch
from pycocotools.coco import COCO
from transformers import RTDetrImageProcessor

from alrp_d2.lrp import LRP, LRP_METRICS, evaluate_coco

from .tiny_detrs import IMAGE_SIZE, tiny_detr

TARGET = [
    {"boxes": torch.tensor([[10.0, 10.0, 30.0, 40.0], [35.0, 30.0, 60.0, 50.0]]), "labels": torch.tensor([0, 2])},
    {"boxes": torch.tensor([[15.0, 5.0, 45.0, 40.0]]), "labels": torch.tensor([1]), "iscrowd": torch.tensor([0])},
]


def post_processed():
    model = tiny_detr("rt_detr").eval()
    with torch.no_grad():
        outputs = model(
            pixel_values=torch.rand(2, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(0))
        )
    sizes = [(IMAGE_SIZE, IMAGE_SIZE)] * 2
    return RTDetrImageProcessor().post_process_object_detection(outputs, threshold=0.0, target_sizes=sizes)


def as_coco(preds, target):
    def xywh(box):
        x1, y1, x2, y2 = box.tolist()
        return [x1, y1, x2 - x1, y2 - y1]

    gt = {
        "images": [{"id": i, "width": IMAGE_SIZE, "height": IMAGE_SIZE} for i in range(len(target))],
        "categories": [{"id": c, "name": str(c)} for c in range(3)],
        "annotations": [
            {"id": len(target) * 100 + i * 10 + j, "image_id": i, "category_id": int(label), "bbox": xywh(box),
             "area": 1.0, "iscrowd": 0}
            for i, image in enumerate(target) for j, (box, label) in enumerate(zip(image["boxes"], image["labels"]))
        ],
    }  # fmt: skip
    detections = [
        {"image_id": i, "category_id": int(label), "bbox": xywh(box), "score": float(score)}
        for i, image in enumerate(preds)
        for box, label, score in zip(image["boxes"].double(), image["labels"], image["scores"].double())
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        return coco_gt, coco_gt.loadRes(detections)


def with_hits(preds):
    """The untrained model's detections and, appended, a shifted copy of each target box (TPs at IoU 0.5-0.9)."""
    out = []
    for image, truth in zip(preds, TARGET):
        shifted = truth["boxes"] + torch.tensor([1.0, 2.0, 1.0, 0.0])
        scores = torch.linspace(0.3, 0.6, len(shifted), dtype=image["scores"].dtype)
        out.append(
            {
                "scores": torch.cat([image["scores"], scores]),
                "labels": torch.cat([image["labels"], truth["labels"]]),
                "boxes": torch.cat([image["boxes"], shifted.to(image["boxes"].dtype)]),
            }
        )
    return out


def test_hf_post_processed_outputs_into_lrp():
    raw = post_processed()
    assert set(raw[0]) == {"scores", "labels", "boxes"}
    metric = LRP()
    metric.update(raw, TARGET)  # as they come
    assert float(metric.compute()["oLRP"]) == pytest.approx(evaluate_coco(*as_coco(raw, TARGET))["oLRP"])
    preds = with_hits(raw)
    metric = LRP()
    metric.update(preds, TARGET)
    results = metric.compute()
    expected = evaluate_coco(*as_coco(preds, TARGET))
    for key in LRP_METRICS:
        assert float(results[key]) == pytest.approx(expected[key], abs=1e-6, nan_ok=True), key
    expected_thresholds = dict(zip(expected["classes"], expected["thresholds"]))
    for label, threshold in zip(results["classes"].tolist(), results["thresholds"].tolist()):
        assert threshold == pytest.approx(expected_thresholds.get(label, math.nan), abs=1e-6, nan_ok=True)

    assert not all(math.isnan(t) for t in results["thresholds"].tolist())

    # docs/lrp.md, "Thresholds at inference"
    by_label = {int(c): float(t) for c, t in zip(results["classes"], results["thresholds"])}
    kept = []
    for image in preds:
        limits = torch.tensor([by_label.get(int(label), math.nan) for label in image["labels"]], dtype=torch.float64)
        keep = image["scores"].double() >= limits
        kept.append({key: value[keep] for key, value in image.items()})
    for image, filtered in zip(preds, kept):
        expected_count = sum(
            1 for s, lab in zip(image["scores"].tolist(), image["labels"].tolist()) if s >= by_label.get(lab, math.inf)
        )
        assert len(filtered["scores"]) == expected_count
