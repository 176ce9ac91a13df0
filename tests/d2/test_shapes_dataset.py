"""The embedded synthetic "shapes" dataset (alrp_d2.data.shapes)."""

import json
import os

import numpy as np
import pytest
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets import load_coco_json
from detectron2.evaluation import COCOEvaluator
from pycocotools.coco import COCO

from alrp_d2.data import shapes
from alrp_d2.data.shapes import (
    SHAPES_CLASSES,
    SHAPES_DATASETS,
    prepare_shapes_dataset,
    register_shapes_datasets,
    shapes_paths,
)

SMALL = {"train": 50, "val": 8}


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("datasets"))
    prepare_shapes_dataset(root, num_images=SMALL)
    return root


@pytest.fixture
def restore_default_registration():
    yield
    register_shapes_datasets(eager=False)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def dataset_files(root):
    base = os.path.join(root, "shapes")
    return sorted(os.path.relpath(os.path.join(d, f), base) for d, _, files in os.walk(base) for f in files)


def test_importing_registers_both_names_lazily():
    for name in SHAPES_DATASETS:
        assert name in DatasetCatalog
        assert MetadataCatalog.get(name).thing_classes == list(SHAPES_CLASSES)


def test_generation_is_deterministic(small_root, tmp_path):
    other = str(tmp_path)
    prepare_shapes_dataset(other, num_images=SMALL)
    assert dataset_files(other) == dataset_files(small_root)
    for relative in dataset_files(other):
        assert read_bytes(os.path.join(other, "shapes", relative)) == read_bytes(
            os.path.join(small_root, "shapes", relative)
        ), relative


def test_annotations_are_valid_coco(small_root):
    for split, count in SMALL.items():
        json_file, image_root = shapes_paths(small_root, split)
        coco = COCO(json_file)
        assert len(coco.getImgIds()) == count
        assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == list(SHAPES_CLASSES)
        for ann in coco.loadAnns(coco.getAnnIds()):
            x, y, w, h = ann["bbox"]
            image = coco.imgs[ann["image_id"]]
            assert w > 0 and h > 0 and x >= 0 and y >= 0
            assert x + w <= image["width"] and y + h <= image["height"] and ann["area"] <= w * h
        dicts = load_coco_json(json_file, image_root, f"shapes_test_{split}")
        assert len(dicts) == count and all(os.path.isfile(d["file_name"]) for d in dicts)
        assert {a["category_id"] for d in dicts for a in d["annotations"]} <= set(range(len(SHAPES_CLASSES)))


def test_train_split_has_empty_images_crowd_regions_and_all_classes(small_root):
    coco = COCO(shapes_paths(small_root, "train")[0])
    empty = [i for i in coco.getImgIds() if not coco.getAnnIds(imgIds=[i])]
    anns = coco.loadAnns(coco.getAnnIds())
    assert 1 <= len(empty) <= 3
    assert any(a["iscrowd"] for a in anns)
    assert {a["category_id"] for a in anns if not a["iscrowd"]} == set(range(1, len(SHAPES_CLASSES) + 1))
    per_image = [len(coco.getAnnIds(imgIds=[i], iscrowd=False)) for i in coco.getImgIds()]
    assert max(per_image) <= 6


def test_registration_is_idempotent_and_supports_the_coco_evaluator(small_root, tmp_path, restore_default_registration):
    register_shapes_datasets(small_root)
    register_shapes_datasets(small_root)
    dicts = DatasetCatalog.get("shapes_train")
    assert len(dicts) == SMALL["train"]
    metadata = MetadataCatalog.get("shapes_val")
    assert metadata.json_file == shapes_paths(small_root, "val")[0]
    assert metadata.evaluator_type == "coco"
    assert metadata.thing_dataset_id_to_contiguous_id == {i + 1: i for i in range(len(SHAPES_CLASSES))}
    COCOEvaluator("shapes_val", output_dir=str(tmp_path))


def test_lazy_registration_generates_on_first_get(tmp_path, monkeypatch, restore_default_registration):
    monkeypatch.setattr(shapes, "SHAPES_SPLIT_SIZES", {"train": 3, "val": 2})
    root = str(tmp_path / "lazy")
    register_shapes_datasets(root, eager=False)
    assert not os.path.exists(root)
    assert len(DatasetCatalog.get("shapes_val")) == 2
    assert os.path.isfile(shapes_paths(root, "train")[0])


def test_default_root_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(shapes.DATASETS_ROOT_ENV, str(tmp_path))
    assert shapes.default_datasets_root() == str(tmp_path)
    monkeypatch.delenv(shapes.DATASETS_ROOT_ENV)
    assert shapes.default_datasets_root().endswith(os.path.join(".cache", "alrp_d2", "datasets"))


def test_existing_dataset_is_reused(small_root):
    json_file = shapes_paths(small_root, "train")[0]
    before = os.stat(json_file).st_mtime_ns
    assert prepare_shapes_dataset(small_root, num_images=SMALL) == os.path.join(small_root, "shapes")
    assert os.stat(json_file).st_mtime_ns == before
    assert [d for d in os.listdir(small_root) if d != "shapes"] == []


def test_concurrent_generation_keeps_the_first_published_copy(small_root, tmp_path, monkeypatch):
    """Another process publishes while this one is generating: ours is discarded, theirs kept intact."""
    root = str(tmp_path)
    write_split = shapes._write_split
    competitor_done = []

    def write_split_while_competitor_publishes(*args):
        write_split(*args)
        if not competitor_done:
            competitor_done.append(True)
            prepare_shapes_dataset(root, num_images=SMALL)

    monkeypatch.setattr(shapes, "_write_split", write_split_while_competitor_publishes)
    prepare_shapes_dataset(root, num_images=SMALL)
    assert competitor_done and os.listdir(root) == ["shapes"]
    assert dataset_files(root) == dataset_files(small_root)


def test_incomplete_dataset_and_bad_arguments_raise(tmp_path):
    os.makedirs(tmp_path / "shapes" / "train")
    with pytest.raises(RuntimeError, match="Incomplete shapes dataset"):
        prepare_shapes_dataset(str(tmp_path), num_images=SMALL)
    with pytest.raises(ValueError, match="Unknown shapes splits"):
        prepare_shapes_dataset(str(tmp_path / "other"), num_images={"test": 3})
    with pytest.raises(ValueError, match="image_size=64"):
        prepare_shapes_dataset(str(tmp_path / "other"), num_images=SMALL, image_size=64)


def test_instance_masks_are_the_visible_pixels(small_root):
    """Every annotation's mask has the annotation's area and tight box; the masks of one image do not
    overlap (an occluded object keeps only its visible pixels); rings have a hole in their middle."""
    coco = COCO(shapes_paths(small_root, "train")[0])
    holes = 0
    for image_id in coco.getImgIds():
        masks = []
        for ann in coco.loadAnns(coco.getAnnIds(imgIds=[image_id])):
            mask = coco.annToMask(ann).astype(bool)
            rows, cols = np.nonzero(mask)
            assert mask.sum() == ann["area"]
            assert [cols.min(), rows.min(), cols.max() - cols.min() + 1, rows.max() - rows.min() + 1] == ann["bbox"]
            masks.append(mask)
            if ann["category_id"] == SHAPES_CLASSES.index("ring") + 1 and not ann["iscrowd"]:
                x, y, w, h = ann["bbox"]
                holes += not mask[y + h // 2, x + w // 2]
        if masks:
            assert np.stack(masks).sum(axis=0).max() <= 1
    assert holes > 0


def test_a_dataset_without_masks_is_regenerated_with_the_same_images(small_root, tmp_path):
    other = str(tmp_path)
    prepare_shapes_dataset(other, num_images=SMALL)
    json_file = shapes_paths(other, "val")[0]
    with open(json_file) as f:
        content = json.load(f)
    del content["info"]["version"]
    for ann in content["annotations"]:
        del ann["segmentation"]
    with open(json_file, "w") as f:
        json.dump(content, f)
    prepare_shapes_dataset(other, num_images=SMALL)
    assert read_bytes(json_file) == read_bytes(shapes_paths(small_root, "val")[0])
    for relative in dataset_files(other):
        assert read_bytes(os.path.join(other, "shapes", relative)) == read_bytes(
            os.path.join(small_root, "shapes", relative)
        ), relative
