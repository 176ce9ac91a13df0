"""Instance segmentations are checked where datasets enter (--dataset, a registered COCO JSON, other
registered datasets of a mask model), before detectron2 loads them or pycocotools rasterises them;
each error names the file, the image and the annotation (CPU, no model)."""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import uuid

import numpy as np
import pycocotools.mask as mask_util
import pytest
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.structures import BoxMode

from alrp_d2.config import setup_cfg
from alrp_d2.data.coco_json_check import CocoJsonError, check_coco_json
from alrp_d2.data.dataset_segmentations import check_dataset_segmentations
from alrp_d2.data.segmentation_check import compressed_rle_counts

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SQUARE = [[4.0, 4.0, 24.0, 4.0, 24.0, 34.0, 4.0, 34.0]]  # inside the box [4, 4, 20, 30]
MEMORY_CAP = 6 * 2**30  # address space of the train_net process: torch needs ~4 GB of mappings


def coco_with_masks() -> dict:
    """Two 64 x 64 images, three annotations with polygons, one with an RLE."""
    images = [{"id": i, "file_name": f"{i}.png", "width": 64, "height": 64} for i in (1, 2)]
    annotations = [
        {
            "id": 10 + k,
            "image_id": 1 + k % 2,
            "category_id": 1 + k,
            "bbox": [4, 4, 20, 30],
            "area": 600,
            "iscrowd": 0,
            "segmentation": [list(SQUARE[0])],
        }
        for k in range(3)
    ]
    mask = np.zeros((64, 64), dtype=np.uint8, order="F")
    mask[4:34, 4:24] = 1
    rle = mask_util.encode(mask)
    annotations[2]["segmentation"] = {"size": [64, 64], "counts": rle["counts"].decode()}
    categories = [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}, {"id": 3, "name": "cross"}]
    return {"images": images, "annotations": annotations, "categories": categories}


def write(tmp_path, content) -> str:
    path = tmp_path / f"{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(content))
    return str(path)


def with_segmentation(index: int, segmentation) -> dict:
    content = coco_with_masks()
    if segmentation is KeyError:
        del content["annotations"][index]["segmentation"]
    else:
        content["annotations"][index]["segmentation"] = segmentation
    return content


BAD_SEGMENTATIONS = [
    ([[4.0, 4.0, math.nan, 4.0, 24.0, 34.0]], "polygon 0 has a coordinate that is not finite"),
    ([[4.0, 4.0, math.inf, 4.0, 24.0, 34.0]], "polygon 0 has a coordinate that is not finite"),
    (SQUARE[0], r"the segmentation is a flat list of numbers: polygons are lists inside a list"),
    ([[4.0, 4.0, 24.0, 34.0]], "polygon 0 has 4 coordinates: a polygon needs an even number, at least 6"),
    ([[4.0, 4.0, 24.0, 4.0, 24.0]], "polygon 0 has 5 coordinates"),
    ([[4.0, "4", 24.0, 4.0, 24.0, 34.0]], r"polygon 0 must be a list of numbers"),
    ([SQUARE[0], 7], r"polygon 1 must be a list of numbers"),
    ("4 4 24 4 24 34", "segmentation must be a list of polygons .* or an RLE"),
    ([[70.0, 70.0, 90.0, 70.0, 90.0, 90.0]], r"the polygons. extent x 70..90, y 70..90 lies outside its 64 x 64 image"),
    ([[40.0, 40.0, 60.0, 40.0, 60.0, 60.0]], r"the polygons. extent .* does not overlap its bbox \[4, 4, 20, 30\]"),
    ({"size": [32, 64], "counts": [2048]}, r"RLE size \[32, 64\] is not the image's \[height, width\] \[64, 64\]"),
    ({"size": [64, 64], "counts": [10**9]}, r"RLE counts add up to 1000000000 .* 64 x 64 = 4096"),
    ({"size": [64, 64], "counts": [-5, 4101]}, r"RLE counts add up to 4096 \(or are negative\)"),
    ({"size": [64, 64], "counts": "PPPPPPPP"}, r"RLE counts 'PPPPPPPP' are not a compressed RLE of 64 x 64"),
    ({"size": [64, 64], "counts": "\x7f"}, r"RLE counts '.*' are not a compressed RLE"),
    ({"counts": "PP"}, r"an RLE segmentation needs 'size' and 'counts'"),
]


@pytest.mark.parametrize("segmentation, message", BAD_SEGMENTATIONS)
def test_a_bad_segmentation_is_refused_naming_the_file_image_and_annotation(tmp_path, segmentation, message):
    path = write(tmp_path, with_segmentation(1, segmentation))
    for masks in (False, True):  # detectron2's load_coco_json reads segmentations for box models too
        with pytest.raises(CocoJsonError, match=rf"annotation id 11 \(image id 2\): {message}") as error:
            check_coco_json(path, masks=masks)
        assert str(error.value).startswith(f"{path} has 1 problem(s):")


@pytest.mark.parametrize("segmentation", [KeyError, [], {}])
def test_a_mask_model_needs_a_segmentation_for_every_annotation(tmp_path, segmentation):
    path = write(tmp_path, with_segmentation(0, segmentation))
    check_coco_json(path)  # a box model ignores it, as detectron2 does
    with pytest.raises(CocoJsonError, match=r"annotation id 10 \(image id 1\): .*MODEL.MASK_ON.* needs a mask"):
        check_coco_json(path, masks=True)


def test_valid_polygons_and_rles_pass(tmp_path):
    assert len(check_coco_json(write(tmp_path, coco_with_masks()), evaluated=True, masks=True)) == 3


def test_the_compressed_rle_reader_is_pycocotools_one():
    rng = np.random.default_rng(0)
    for _ in range(50):
        height, width = (int(v) for v in rng.integers(1, 40, size=2))
        mask = np.asfortranarray(rng.random((height, width)) < rng.random()).astype(np.uint8)
        compressed = mask_util.encode(np.asfortranarray(mask))["counts"]
        counts = compressed_rle_counts(compressed.decode(), height * width)
        assert counts is not None and sum(counts) == height * width
        assert mask_util.frPyObjects({"size": [height, width], "counts": counts}, height, width)["counts"] == compressed


def mask_cfg(train, test=()):
    cfg = setup_cfg(os.path.join(REPO, "configs/quickstart/rs_mask_rcnn_shapes.yaml"))
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = tuple(train), tuple(test)
    return cfg


def test_registered_coco_json_of_a_mask_model_is_checked(tmp_path):
    """register_coco_instances (not --dataset): checked before detectron2's load_coco_json."""
    name = f"segm_{uuid.uuid4().hex[:8]}"
    path = write(tmp_path, with_segmentation(2, {"size": [64, 65], "counts": [64 * 65]}))
    register_coco_instances(name, {}, path, str(tmp_path))
    cfg = mask_cfg([], [name])
    with pytest.raises(CocoJsonError, match=rf"{path} has 1 problem.*\n  annotation id 12 \(image id 1\): RLE size"):
        check_dataset_segmentations(cfg)
    cfg.MODEL.MASK_ON = False
    check_dataset_segmentations(cfg)


def test_other_registered_datasets_of_a_mask_model_are_checked():
    name = f"segm_{uuid.uuid4().hex[:8]}"
    record = {"file_name": "a.png", "image_id": 7, "height": 64, "width": 64}
    annotation = {"bbox": [4, 4, 24, 34], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}
    record["annotations"] = [dict(annotation, segmentation=SQUARE), annotation]
    DatasetCatalog.register(name, lambda: [record])
    with pytest.raises(CocoJsonError, match=rf"dataset '{name}' .*\n  image 'a.png' \(image id 7\), annotations\[1\]"):
        check_dataset_segmentations(mask_cfg([name]))


def test_a_nan_polygon_stops_mask_training_before_any_rasterisation(tmp_path):
    """pycocotools' polygon rasteriser allocates without bound on a NaN coordinate: train_net
    refuses the file at once, under a memory cap."""
    path = write(tmp_path, with_segmentation(1, [[4.0, 4.0, math.nan, 4.0, 24.0, 34.0]]))
    command = [
        sys.executable,
        "train_net.py",
        "--config-file",
        "configs/quickstart/rs_mask_rcnn_shapes.yaml",
        "--dataset",
        "nan_polygons",
        path,
        str(tmp_path),
        "DATASETS.TRAIN",
        '("nan_polygons",)',
        "DATASETS.TEST",
        "()",
        "MODEL.ROI_HEADS.NUM_CLASSES",
        "3",
        "INPUT.MASK_FORMAT",
        "polygon",
        "OUTPUT_DIR",
        str(tmp_path / "out"),
    ]

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, preexec_fn=cap_memory)
    assert result.returncode != 0
    assert f"{path} has 1 problem(s):" in result.stderr
    assert "annotation id 11 (image id 2): polygon 0 has a coordinate that is not finite" in result.stderr
