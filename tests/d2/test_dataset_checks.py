"""Datasets are checked before training or evaluation: their classes against the model and each other
(permuted category ids, duplicates, built-in datasets), every entry of a --dataset COCO JSON, 16-bit
images, and the hint of an unreadable evaluation image (CPU, no model)."""

from __future__ import annotations

import copy
import json
import logging
import math
import uuid

import numpy as np
import pytest
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets import register_coco_instances
from PIL import Image

import demo as demo_module
import train_net
from alrp_d2.config import setup_cfg
from alrp_d2.data import build_alrp_mapper
from alrp_d2.data.coco_json_check import CocoJsonError, check_coco_json
from alrp_d2.data.dataset_classes import check_dataset_classes
from alrp_d2.data.image_errors import ImageErrorGuard, UnreadableImageError
from alrp_d2.data.training_filter import training_dataset_dicts
from alrp_d2.data.user_datasets import register_user_datasets
from alrp_d2.engine import AlrpTrainer

from .tiny_configs import tiny_retinanet_cfg

CATEGORIES = [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}, {"id": 3, "name": "cross"}]


def coco(categories=CATEGORIES) -> dict:
    """Two 64 x 64 images, three annotations."""
    images = [{"id": i, "file_name": f"{i}.png", "width": 64, "height": 64} for i in (1, 2)]
    annotations = [
        {"id": 10 + k, "image_id": 1 + k % 2, "category_id": 1 + k, "bbox": [4, 4, 20, 30], "area": 600, "iscrowd": 0}
        for k in range(3)
    ]
    return {"images": images, "annotations": annotations, "categories": copy.deepcopy(categories)}


def write_json(tmp_path, content, name: str = "") -> str:
    path = tmp_path / f"{name or uuid.uuid4().hex}.json"
    path.write_text(json.dumps(content))
    return str(path)


def fresh_name() -> str:
    return f"check_{uuid.uuid4().hex[:8]}"


def config(train, test, num_classes: int = 3):
    cfg = setup_cfg(None, ["MODEL.RETINANET.NUM_CLASSES", str(num_classes)])
    cfg.MODEL.META_ARCHITECTURE = "AlrpRetinaNet"
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = tuple(train), tuple(test)
    return cfg


# ---- classes -----------------------------------------------------------------------------------


def test_a_test_set_with_permuted_category_ids_is_refused_with_both_lists(tmp_path):
    """Same names, other ids: evaluating would swap the classes."""
    permuted = [{"id": 1, "name": "square"}, {"id": 2, "name": "circle"}, {"id": 3, "name": "cross"}]
    train, test = fresh_name(), fresh_name()
    register_user_datasets([(train, write_json(tmp_path, coco()), str(tmp_path))])
    register_user_datasets([(test, write_json(tmp_path, coco(permuted)), str(tmp_path))], evaluated=[test])
    with pytest.raises(ValueError, match="have different classes") as error:
        check_dataset_classes(config([train], [test]))
    message = str(error.value)
    assert f"{train}: [(1, 'circle'), (2, 'square'), (3, 'cross')]" in message
    assert f"{test}: [(1, 'square'), (2, 'circle'), (3, 'cross')]" in message


def test_the_same_categories_listed_in_another_order_are_the_same_classes(tmp_path):
    train, test = fresh_name(), fresh_name()
    register_user_datasets([(train, write_json(tmp_path, coco()), str(tmp_path))])
    register_user_datasets([(test, write_json(tmp_path, coco(CATEGORIES[::-1])), str(tmp_path))])
    check_dataset_classes(config([train], [test]))


def test_other_ids_for_the_same_names_are_refused(tmp_path):
    other_ids = [{"id": 2 * c["id"], "name": c["name"]} for c in CATEGORIES]
    train, test = fresh_name(), fresh_name()
    register_user_datasets([(train, write_json(tmp_path, coco()), str(tmp_path))])
    content = coco(other_ids)
    for annotation in content["annotations"]:
        annotation["category_id"] *= 2
    register_user_datasets([(test, write_json(tmp_path, content), str(tmp_path))])
    with pytest.raises(ValueError, match=r"\(2, 'circle'\), \(4, 'square'\)"):
        check_dataset_classes(config([train], [test]))


@pytest.mark.parametrize(
    "categories, message",
    [
        (
            [{"id": 1, "name": "circle"}, {"id": 1, "name": "square"}, {"id": 3, "name": "cross"}],
            r"category id 1 appears 2 times: \[\{'id': 1, 'name': 'circle'\}, \{'id': 1, 'name': 'square'\}\]",
        ),
        (
            [{"id": 1, "name": "circle"}, {"id": 2, "name": "circle"}, {"id": 3, "name": "cross"}],
            r"category name 'circle' appears 2 times: \[\{'id': 1, 'name': 'circle'\}, \{'id': 2, 'name': 'circle'\}\]",
        ),
    ],
    ids=["ids", "names"],
)
def test_duplicate_categories_are_refused_naming_the_entries(tmp_path, categories, message):
    with pytest.raises(CocoJsonError, match=message):
        register_user_datasets([(fresh_name(), write_json(tmp_path, coco(categories)), str(tmp_path))])
    # A dataset registered by other means (load_coco_json would name them in the metadata).
    name = fresh_name()
    register_coco_instances(name, {}, write_json(tmp_path, coco(categories)), str(tmp_path))
    with pytest.raises(ValueError, match=message):
        check_dataset_classes(config([name], []))


def test_built_in_datasets_are_checked():
    with pytest.raises(ValueError, match=r"'shapes_train' \(DATASETS.TRAIN\) has 5 categories but MODEL.RETINANET"):
        check_dataset_classes(config(["shapes_train"], ["shapes_val"], num_classes=3))
    with pytest.raises(ValueError, match=r"'coco_2017_val' \(DATASETS.TEST\) has 80 categories"):
        check_dataset_classes(config([], ["coco_2017_val"], num_classes=5))
    check_dataset_classes(config(["shapes_train"], ["shapes_val"], num_classes=5))


@pytest.mark.parametrize("architecture", ["GeneralizedRCNN", "AlrpGeneralizedRCNN"])
def test_r_cnn_subclasses_are_checked_against_the_roi_heads_classes(architecture):
    cfg = setup_cfg(None, ["MODEL.META_ARCHITECTURE", architecture, "MODEL.ROI_HEADS.NUM_CLASSES", "5"])
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = ("shapes_train",), ("shapes_val",)
    check_dataset_classes(cfg)
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = 3
    with pytest.raises(ValueError, match="has 5 categories but MODEL.ROI_HEADS.NUM_CLASSES is 3"):
        check_dataset_classes(cfg)


@pytest.mark.parametrize(
    "architecture, key",
    [
        ("HuggingFaceDETR", "MODEL.DETR.NUM_CLASSES"),
        ("AlrpFoveaBox", "MODEL.FOVEABOX.NUM_CLASSES"),
        ("AlrpFCOS", "MODEL.FCOS.NUM_CLASSES"),
        ("RankSortATSS", "MODEL.RETINANET.NUM_CLASSES"),
    ],
)
def test_every_architecture_is_checked_against_its_own_number_of_classes(architecture, key):
    cfg = setup_cfg(None, ["MODEL.META_ARCHITECTURE", architecture, key, "3"])
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = ("shapes_train",), ("shapes_val",)
    with pytest.raises(ValueError, match=f"has 5 categories but {key} is 3"):
        check_dataset_classes(cfg)
    cfg.merge_from_list([key, 5])
    check_dataset_classes(cfg)


def test_an_architecture_that_does_not_say_where_its_classes_live_is_named():
    cfg = setup_cfg(None, ["MODEL.META_ARCHITECTURE", "NoSuchDetector"])
    with pytest.raises(ValueError, match="'NoSuchDetector' is not registered"):
        check_dataset_classes(cfg)


def test_train_net_and_the_trainer_check_the_classes(tmp_path):
    cfg = tiny_retinanet_cfg()
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = ("shapes_train",), ()
    with pytest.raises(ValueError, match="has 5 categories but MODEL.RETINANET.NUM_CLASSES is 3"):
        AlrpTrainer(cfg)
    args = train_net.get_parser().parse_args(["DATASETS.TRAIN", '("shapes_train",)'])
    with pytest.raises(ValueError, match="has 5 categories"):
        train_net.prepare_datasets(cfg, args)


# ---- COCO JSON of --dataset --------------------------------------------------------------------


def broken(change) -> dict:
    content = coco()
    change(content)
    return content


def set_key(section: str, index: int, key: str, value):
    def change(content):
        content[section][index][key] = value

    return change


def both(first, second):
    def change(content):
        first(content)
        second(content)

    return change


def delete_key(section: str, index: int, key: str):
    def change(content):
        del content[section][index][key]

    return change


@pytest.mark.parametrize(
    "change, message",
    [
        (delete_key("images", 1, "file_name"), r"image id 2: missing \['file_name'\]"),
        (delete_key("annotations", 0, "bbox"), r"annotation id 10: missing \['bbox'\]"),
        (set_key("annotations", 1, "bbox", [4, "4", 20, 30]), r"annotation id 11 \(image id 2\): bbox must be 4"),
        (set_key("annotations", 1, "bbox", [4, 4, 20]), r"annotation id 11 \(image id 2\): bbox must be 4 numbers"),
        (set_key("annotations", 2, "bbox", [4, 4, math.nan, 30]), r"annotation id 12 \(image id 1\): .* not finite"),
        (set_key("annotations", 2, "bbox", [4, 4, math.inf, 30]), r"annotation id 12 \(image id 1\): .* not finite"),
        (set_key("annotations", 0, "bbox", [40, 4, -20, 30]), r"annotation id 10 .*: .* negative width or height"),
        (both(set_key("images", 1, "id", 1), set_key("annotations", 1, "image_id", 1)), r"image id 1 appears 2 times"),
        (set_key("annotations", 1, "id", 10), r"annotation id 10 appears 2 times"),
        (set_key("annotations", 0, "image_id", 9), r"annotation id 10 \(image id 9\): no image with this id"),
        (set_key("annotations", 0, "category_id", 5), r"annotation id 10 .*: category_id 5 is not in 'categories'"),
        (set_key("images", 0, "width", 0), r"image id 1: width and height must be integers > 0"),
        (set_key("annotations", 0, "iscrowd", 2), r"annotation id 10 .*: iscrowd must be 0 or 1"),
        (set_key("annotations", 0, "ignore", 1), r"annotation id 10 .*: 'ignore' is not supported"),
    ],
)
def test_every_problem_names_the_file_and_the_entry(tmp_path, change, message):
    path = write_json(tmp_path, broken(change))
    with pytest.raises(CocoJsonError, match=message) as error:
        check_coco_json(path)
    assert str(error.value).startswith(f"{path} has 1 problem(s):")


def test_all_problems_are_listed_at_once(tmp_path):
    def change(content):
        del content["images"][0]["height"]
        content["annotations"][1]["bbox"] = [1, 1, -1, 5]
        content["categories"].append({"id": 3, "name": "ring"})

    with pytest.raises(CocoJsonError, match="3 problem") as error:  # each once
        check_coco_json(write_json(tmp_path, broken(change)))
    assert "image id 1: missing ['height']" in str(error.value) and "annotation id 11" in str(error.value)


def test_zero_size_boxes_warn_for_training_and_fail_evaluation(tmp_path):
    def change(content):
        content["annotations"][0]["bbox"] = [4, 4, 0, 30]
        content["annotations"][2]["bbox"] = [4, 4, 10, 0]

    path = write_json(tmp_path, broken(change))
    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("alrp_d2.data.coco_json_check").addHandler(handler)
    try:
        assert len(check_coco_json(path)) == 3
    finally:
        logging.getLogger("alrp_d2.data.coco_json_check").removeHandler(handler)
    (message,) = messages
    assert "2 annotation(s) with a zero width or height" in message and "annotation id 10" in message
    with pytest.raises(CocoJsonError, match=r"2 problem(.|\n)*annotation id 10 .*zero width or height"):
        check_coco_json(path, evaluated=True)


def test_evaluated_datasets_need_area_and_iscrowd(tmp_path):
    path = write_json(tmp_path, broken(delete_key("annotations", 2, "area")))
    check_coco_json(path)
    with pytest.raises(CocoJsonError, match=r"annotation id 12: missing \['area'\] \(COCO evaluation needs"):
        check_coco_json(path, evaluated=True)
    dataset = fresh_name()
    with pytest.raises(CocoJsonError, match="annotation id 12"):
        register_user_datasets([(dataset, path, str(tmp_path))], evaluated=[dataset])


# ---- images ------------------------------------------------------------------------------------


def dataset_dict(file_name: str) -> dict:
    return {"file_name": file_name, "height": 64, "width": 64, "image_id": 1, "annotations": []}


@pytest.fixture
def sixteen_bit_png(tmp_path) -> str:
    path = str(tmp_path / "depth.png")
    Image.fromarray(np.arange(64 * 64, dtype=np.uint16).reshape(64, 64) * 16).save(path)
    assert Image.open(path).mode == "I;16"
    return path


def test_sixteen_bit_images_are_refused_naming_the_file(sixteen_bit_png, tmp_path):
    cfg = tiny_retinanet_cfg()
    guard = ImageErrorGuard(build_alrp_mapper(cfg, is_train=True))
    with pytest.raises(UnreadableImageError, match=f"{sixteen_bit_png} .*PIL mode I;16: more than 8 bits"):
        guard(dataset_dict(sixteen_bit_png))
    assert ImageErrorGuard(build_alrp_mapper(cfg, is_train=True), skip=True)(dataset_dict(sixteen_bit_png)) is None
    with pytest.raises(demo_module._InputError, match="I;16"):
        demo_module._draw_one(sixteen_bit_png, str(tmp_path / "out.png"), None, None, 1.0)


def test_an_unreadable_evaluation_image_does_not_advise_skipping(tmp_path):
    name = fresh_name()
    missing = str(tmp_path / "missing.png")
    DatasetCatalog.register(name, lambda: [dataset_dict(missing)])
    MetadataCatalog.get(name).thing_classes = ["a", "b", "c"]
    cfg = tiny_retinanet_cfg()
    cfg.DATALOADER.SKIP_UNREADABLE_IMAGES = True
    cfg.DATALOADER.NUM_WORKERS = 1  # the error crosses a loader worker, within the 2 cores a test may use
    with pytest.raises(UnreadableImageError) as error:
        next(iter(AlrpTrainer.build_test_loader(cfg, name)))
    message = str(error.value)
    assert missing in message and "evaluation reads every image" in message
    assert "set DATALOADER.SKIP_UNREADABLE_IMAGES True" not in message


def test_the_mmdet_filter_says_why_it_keeps_no_image(tmp_path):
    """Images without annotations: not "the training dataset is empty" but what the filter dropped."""
    content = coco()
    content["annotations"] = []
    name = fresh_name()
    register_user_datasets([(name, write_json(tmp_path, content), str(tmp_path))])
    cfg = config([name], [])
    cfg.DATALOADER.TRAIN_FILTER = "mmdet"
    with pytest.raises(ValueError, match=r"'mmdet' keeps none of the 2 images .*: 2 have no annotation"):
        training_dataset_dicts(cfg)
