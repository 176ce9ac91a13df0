"""SSD augmentation (alrp_d2.data.augmentation) and the box-aware dataset mapper."""

import cv2
import numpy as np
import pytest
import torch
from detectron2.data import DatasetMapper
from detectron2.data import transforms as T
from detectron2.structures import BoxMode
from fvcore.transforms.transform import NoOpTransform

from alrp_d2.config import setup_cfg
from alrp_d2.data import AlrpDatasetMapper, build_alrp_mapper, build_ssd_augmentation
from alrp_d2.data.augmentation import (
    CenterFilteredCropTransform,
    PhotometricDistortion,
    PhotometricDistortionParams,
    RandomExpand,
    RandomMinIoUCrop,
    crop_accepted,
)

SIZE = 64
BRIGHT = 80  # the rectangles are >= 111 and the (zero-mean) background / expand fill <= 48 after distortion


def ssd_cfg(pixel_mean=(0.0, 0.0, 0.0)):
    cfg = setup_cfg()
    cfg.INPUT.SSD.ENABLED = True
    cfg.INPUT.SSD.SIZE = SIZE
    cfg.MODEL.PIXEL_MEAN = list(pixel_mean)
    return cfg


def rectangle_image(h=120, w=160, box=(40, 30, 110, 80), level=255):
    image = np.zeros((h, w, 3), np.uint8)
    x0, y0, x1, y1 = box
    image[y0:y1, x0:x1] = level
    return image


def box_pixels(mask, box, margin):
    """Pixels of ``mask`` inside ``box`` grown (margin > 0) or shrunk (margin < 0) by ``margin``."""
    x0, y0, x1, y1 = box
    x0, y0 = int(np.floor(x0 - margin)), int(np.floor(y0 - margin))
    x1, y1 = int(np.ceil(x1 + margin)), int(np.ceil(y1 + margin))
    return mask[max(y0, 0) : max(y1, 0), max(x0, 0) : max(x1, 0)]


def test_full_pipeline_keeps_box_on_its_pixels():
    augs = T.AugmentationList(build_ssd_augmentation(ssd_cfg(), is_train=True))
    box = np.array([[40.0, 30.0, 110.0, 80.0]])
    for seed in range(60):
        np.random.seed(seed)
        aug_input = T.AugInput(rectangle_image(), boxes=box.copy())
        augs(aug_input)
        image, (out_box,) = aug_input.image, aug_input.boxes
        assert image.shape == (SIZE, SIZE, 3) and image.dtype == np.float32
        assert np.all(out_box >= 0) and np.all(out_box <= SIZE), (seed, out_box)
        assert out_box[2] > out_box[0] and out_box[3] > out_box[1], "the only box was cropped away"
        bright = image.max(axis=2) > BRIGHT
        assert bright.sum() == box_pixels(bright, out_box, margin=1).sum(), (
            f"bright pixels outside the box, seed {seed}"
        )
        interior = box_pixels(bright, out_box, margin=-1)
        assert interior.size == 0 or interior.mean() > 0.9, f"box not on the rectangle, seed {seed}"


def test_photometric_distortion_changes_only_pixels():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    boxes = np.array([[1.0, 2.0, 30.0, 20.0]])
    changed = 0
    for seed in range(20):
        np.random.seed(seed)
        aug_input = T.AugInput(image.copy(), boxes=boxes.copy())
        tfm = PhotometricDistortion()(aug_input)
        assert isinstance(tfm, T.ColorTransform)
        assert aug_input.image.dtype == np.float32 and aug_input.image.shape == image.shape
        np.testing.assert_array_equal(aug_input.boxes, boxes)
        changed += int(not np.array_equal(aug_input.image, image))
    assert changed > 10


def test_photometric_distortion_rgb_is_bgr_with_channels_reversed():
    image = np.random.default_rng(1).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    params = dict(brightness_delta=-20.0, contrast=1.3, contrast_first=False, saturation=1.4, hue_delta=12.0)
    bgr = PhotometricDistortionParams(**params, image_format="BGR")(image)
    rgb = PhotometricDistortionParams(**params, image_format="RGB")(image[..., ::-1].copy())
    np.testing.assert_allclose(bgr, rgb[..., ::-1], atol=1e-3)


def test_photometric_identity_when_no_step_is_drawn():
    image = np.random.default_rng(2).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    params = PhotometricDistortionParams(None, None, True, None, None)
    np.testing.assert_allclose(params(image), image, atol=1e-3)


def test_photometric_distortion_keeps_float_unrounded_and_unclipped():
    """mmdet keeps the image float32 until normalisation: no rounding, no clipping to [0, 255]."""
    image = np.array([[[250, 250, 250], [3, 3, 3], [10, 100, 200]]], np.uint8)
    up = PhotometricDistortionParams(40.25, None, True, None, None)(image)
    down = PhotometricDistortionParams(-40.25, None, True, None, None)(image)
    assert up.dtype == np.float32 and down.dtype == np.float32
    np.testing.assert_allclose(up, image + 40.25, atol=1e-3)
    np.testing.assert_allclose(down[0, :2], image[0, :2] - 40.25, atol=1e-3)  # grey: HSV keeps negatives


def test_channel_permutation_is_mmdets_last_step():
    image = np.random.default_rng(3).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    params = PhotometricDistortionParams(None, 1.2, False, None, None, channel_order=(2, 0, 1))
    np.testing.assert_allclose(params(image), image[..., [2, 0, 1]] * 1.2, atol=1e-3)


def test_channels_are_permuted_with_probability_half():
    """A colour whose channel order no other step changes (hue 28 deg +- 18 stays in its sextant):
    the channels end in another order in p(permute) * 5/6 of the draws."""
    image = np.empty((4, 4, 3), np.uint8)
    image[...] = (10, 100, 200)
    draws, permuted, reordered = 1200, 0, 0
    for seed in range(draws):
        np.random.seed(seed)
        tfm = PhotometricDistortion()(T.AugInput(image.copy()))
        permuted += tfm.op.channel_order is not None
        reordered += not np.array_equal(np.argsort(tfm.apply_image(image)[0, 0]), [0, 1, 2])
    assert 0.45 < permuted / draws < 0.55
    assert 0.5 * 5 / 6 - 0.05 < reordered / draws < 0.5 * 5 / 6 + 0.05


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_expand_fills_with_pixel_mean_and_shifts_boxes(dtype):
    mean = (103.53, 116.28, 123.675)
    image = np.full((20, 30, 3), 255, dtype)
    np.random.seed(0)
    aug_input = T.AugInput(image, boxes=np.array([[0.0, 0.0, 30.0, 20.0]]))
    tfm = RandomExpand(mean, ratio_range=(3.0, 3.0), prob=1.0)(aug_input)
    out = aug_input.image
    assert out.shape == (60, 90, 3) and out.dtype == dtype
    x0, y0, x1, y1 = aug_input.boxes[0].astype(int)
    np.testing.assert_array_equal([x0, y0, x1 - x0, y1 - y0], [tfm.x0, tfm.y0, 30, 20])
    assert np.all(out[y0:y1, x0:x1] == 255)
    outside = np.ones(out.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    fill = np.rint(mean) if dtype == np.uint8 else np.asarray(mean)  # a float image keeps the exact mean
    np.testing.assert_array_equal(np.unique(out[outside], axis=0), [fill.astype(dtype)])


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_ssd_resize_is_cv2_inter_linear(dtype):
    """mmdet's Resize (keep_ratio False) is mmcv's cv2 bilinear, without antialiasing."""
    (resize,) = [a for a in build_ssd_augmentation(ssd_cfg(), is_train=True) if isinstance(a, T.Resize)]
    image = np.random.default_rng(4).uniform(0, 255, (150, 100, 3)).astype(dtype)
    out = resize.get_transform(image).apply_image(image)
    np.testing.assert_array_equal(out, cv2.resize(image, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR))


def test_expand_probability_zero_is_noop():
    assert isinstance(RandomExpand((0, 0, 0), prob=0.0).get_transform(np.zeros((4, 4, 3), np.uint8)), NoOpTransform)


def random_boxes(rng, n, w, h):
    xy = rng.uniform(0, [w / 2, h / 2], (n, 2))
    wh = rng.uniform([w / 8, h / 8], [w / 2, h / 2], (n, 2))
    return np.concatenate([xy, xy + wh], axis=1)


def iou(box, patch):
    inter = np.prod(np.clip(np.minimum(box[2:], patch[2:]) - np.maximum(box[:2], patch[:2]), 0, None))
    return inter / (np.prod(box[2:] - box[:2]) + np.prod(patch[2:] - patch[:2]) - inter)


def test_min_iou_crop_respects_min_iou_and_centre_rule():
    rng = np.random.default_rng(0)
    crop = RandomMinIoUCrop(min_ious=(0.1,), min_crop_size=0.3)
    w, h = 200, 150
    image = np.zeros((h, w, 3), np.uint8)
    crops, dropped = 0, 0
    for seed in range(100):
        np.random.seed(seed)
        boxes = random_boxes(rng, int(rng.integers(1, 4)), w, h)
        tfm = crop.get_transform(image, boxes)
        if isinstance(tfm, NoOpTransform):
            continue
        crops += 1
        assert isinstance(tfm, CenterFilteredCropTransform)
        patch = np.array([tfm.x0, tfm.y0, tfm.x0 + tfm.w, tfm.y0 + tfm.h], float)
        assert 0.3 * w - 1 <= tfm.w <= w and 0.3 * h - 1 <= tfm.h <= h
        assert all(iou(b, patch) >= 0.1 for b in boxes)
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        inside = np.all((centres > patch[:2]) & (centres < patch[2:]), axis=1)
        assert inside.any()
        out = tfm.apply_box(boxes)
        np.testing.assert_array_equal(out[~inside], 0)
        dropped += int((~inside).sum())
        kept = out[inside]
        assert np.all(kept >= 0) and np.all(kept[:, 0::2] <= tfm.w) and np.all(kept[:, 1::2] <= tfm.h)
        assert np.all(kept[:, 2:] > kept[:, :2])
    assert crops >= 10 and dropped >= 1


def test_center_filtered_crop_drops_boxes_with_centre_outside_and_clips_the_others():
    tfm = CenterFilteredCropTransform(10, 20, 50, 40, orig_w=100, orig_h=100)
    boxes = np.array([[0.0, 30.0, 30.0, 50.0], [0.0, 0.0, 18.0, 30.0], [50.0, 50.0, 90.0, 70.0]])
    np.testing.assert_allclose(tfm.apply_box(boxes), [[0, 10, 20, 30], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert tfm.apply_image(np.zeros((100, 100, 3), np.uint8)).shape == (40, 50, 3)


def test_min_iou_crop_crops_images_without_boxes_as_mmdet():
    crop = RandomMinIoUCrop(min_ious=(0.5,))
    image = np.zeros((50, 60, 3), np.uint8)
    for seed in range(10):
        np.random.seed(seed)
        assert isinstance(crop.get_transform(image, np.zeros((0, 4))), CenterFilteredCropTransform)
        assert isinstance(crop.get_transform(image, np.array([[5.0, 5.0, 5.0, 9.0]])), CenterFilteredCropTransform)
    with pytest.raises(ValueError, match="needs the ground-truth boxes"):
        crop.get_transform(image, None)


def test_min_iou_one_is_no_crop_and_defaults_are_mmdets_modes():
    crop = RandomMinIoUCrop(min_ious=(1.0,))
    for seed in range(10):
        np.random.seed(seed)
        assert isinstance(crop.get_transform(np.zeros((50, 60, 3)), np.array([[5.0, 5.0, 20.0, 20.0]])), NoOpTransform)
    (built,) = [a for a in build_ssd_augmentation(ssd_cfg(), is_train=True) if isinstance(a, RandomMinIoUCrop)]
    assert built.min_ious == RandomMinIoUCrop().min_ious == (1.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.0)


def test_mode_zero_accepts_a_crop_that_no_positive_iou_mode_accepts():
    boxes = np.array([[10.0, 10.0, 30.0, 30.0], [60.0, 60.0, 90.0, 90.0]])
    patch = np.array([[0, 0, 50, 50]])  # keeps the first box, misses the second (IoU 0)
    assert crop_accepted(patch, boxes, 0.0)[0]
    assert not any(crop_accepted(patch, boxes, min_iou)[0] for min_iou in (0.1, 0.3, 0.5, 0.7, 0.9, 1e-6))
    assert not crop_accepted(np.array([[0, 0, 15, 15]]), boxes, 0.0)[0]  # no centre inside


def test_mode_zero_crops_can_lose_a_box_and_positive_modes_cannot():
    image = np.zeros((100, 100, 3), np.uint8)
    boxes = np.array([[2.0, 2.0, 22.0, 22.0], [78.0, 78.0, 98.0, 98.0]])
    lost = {}
    for min_iou in (0.0, 0.1):
        crop, lost[min_iou] = RandomMinIoUCrop(min_ious=(min_iou,)), 0
        for seed in range(100):
            np.random.seed(seed)
            tfm = crop.get_transform(image, boxes)
            lost[min_iou] += int((tfm.apply_box(boxes)[:, 2:] <= 0).any())
    assert lost[0.0] > 0 and lost[0.1] == 0


def test_crowd_box_changes_the_crop_decision():
    """Crowd boxes take part in the IoU and centre tests (mmdet's gt_bboxes_ignore)."""
    box, crowd = np.array([[10.0, 10.0, 40.0, 40.0]]), np.array([[60.0, 60.0, 95.0, 95.0]])
    patch = np.array([[0, 0, 50, 50]])
    assert crop_accepted(patch, box, 0.3)[0] and not crop_accepted(patch, np.concatenate([box, crowd]), 0.3)[0]
    crowd_only_patch = np.array([[55, 55, 100, 100]])  # holds only the crowd box's centre
    assert not crop_accepted(crowd_only_patch, box, 0.0)[0]
    assert crop_accepted(crowd_only_patch, np.concatenate([box, crowd]), 0.0)[0]


def test_min_iou_crop_impossible_constraint_terminates_uncropped():
    crop = RandomMinIoUCrop(min_ious=(0.99,), min_crop_size=0.9, max_mode_trials=5)
    np.random.seed(0)
    for _ in range(20):
        assert isinstance(
            crop.get_transform(np.zeros((50, 60, 3), np.uint8), np.array([[1.0, 1.0, 4.0, 4.0]])), NoOpTransform
        )


@pytest.mark.parametrize(
    "key, value",
    [
        ("SIZE", 0),
        ("BRIGHTNESS_DELTA", -1),
        ("CONTRAST_RANGE", (1.5, 0.5)),
        ("SATURATION_RANGE", (-0.5, 1.5)),
        ("HUE_DELTA", 200),
        ("EXPAND_PROB", 1.5),
        ("EXPAND_RATIO_RANGE", (0.5, 4.0)),
        ("MIN_IOUS", ()),
        ("MIN_IOUS", (0.1, 1.5)),
        ("MIN_IOUS", (-0.1,)),
        ("MIN_CROP_SIZE", 1.5),
        ("MIN_CROP_SIZE", 0.0),
    ],
)
def test_invalid_ssd_config_values_name_the_key(key, value):
    cfg = ssd_cfg()
    cfg.INPUT.SSD[key] = value
    with pytest.raises(ValueError, match=f"Invalid config value INPUT.SSD.{key}="):
        build_ssd_augmentation(cfg, is_train=True)


def test_ssd_rejects_unsupported_image_format():
    cfg = ssd_cfg()
    cfg.INPUT.FORMAT = "L"
    with pytest.raises(ValueError, match="INPUT.FORMAT"):
        build_ssd_augmentation(cfg, is_train=True)


def test_ssd_test_time_augmentation_is_resize_shortest_edge():
    (aug,) = build_ssd_augmentation(ssd_cfg(), is_train=False)
    assert isinstance(aug, T.ResizeShortestEdge)


# ---- mapper --------------------------------------------------------------------------------------

DIM, BRIGHTER = 100, 230  # grey levels of class 0 and class 1; the ordering survives the distortion


@pytest.fixture(scope="module")
def two_box_dict(tmp_path_factory):
    image = np.zeros((120, 160, 3), np.uint8)
    image[10:50, 10:60] = DIM
    image[50:110, 90:150] = BRIGHTER
    path = str(tmp_path_factory.mktemp("mapper") / "two_boxes.png")
    cv2.imwrite(path, image)
    annotations = [
        {"bbox": [10, 10, 50, 40], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0, "iscrowd": 0},
        {"bbox": [90, 50, 60, 60], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 1, "iscrowd": 0},
        {"bbox": [60, 0, 30, 20], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 2, "iscrowd": 1},
    ]
    return {"file_name": path, "height": 120, "width": 160, "image_id": 1, "annotations": annotations}


def instance_level(image, box):
    interior = box_pixels(image, box, margin=-1)
    return interior.mean() if interior.size else None


def test_ssd_mapper_instances_are_inside_and_keep_their_classes(two_box_dict):
    mapper = build_alrp_mapper(ssd_cfg(), is_train=True)
    assert isinstance(mapper, AlrpDatasetMapper) and mapper.boxes_to_augmentations
    for seed in range(30):
        np.random.seed(seed)
        out = mapper(two_box_dict)
        assert "annotations" not in out
        assert tuple(out["image"].shape) == (3, SIZE, SIZE) and out["image"].dtype == torch.float32
        instances = out["instances"]
        boxes, classes = instances.gt_boxes.tensor.numpy(), instances.gt_classes.tolist()
        assert 1 <= len(instances) <= 2 and set(classes) <= {0, 1} and len(set(classes)) == len(classes)
        assert np.all(boxes >= 0) and np.all(boxes <= SIZE)
        image = out["image"].numpy().max(axis=0)
        levels = dict(zip(classes, (instance_level(image, b) for b in boxes)))
        if levels.get(0) is not None and levels.get(1) is not None:
            assert levels[1] > levels[0], f"classes swapped, seed {seed}"


def test_ssd_mapper_image_with_only_crowd_has_zero_instances(two_box_dict):
    crowd_only = dict(two_box_dict, annotations=[two_box_dict["annotations"][2]])
    np.random.seed(0)
    out = build_alrp_mapper(ssd_cfg(), is_train=True)(crowd_only)
    assert len(out["instances"]) == 0 and tuple(out["image"].shape) == (3, SIZE, SIZE)


class RecordBoxes(T.Augmentation):
    """Records the boxes the augmentations are given."""

    def get_transform(self, image, boxes):
        self.boxes = boxes.copy()
        return NoOpTransform()


def test_ssd_mapper_gives_crowd_boxes_to_the_augmentations_and_drops_them_after(two_box_dict):
    recorder = RecordBoxes()
    mapper = AlrpDatasetMapper(True, augmentations=[recorder], image_format="BGR", boxes_to_augmentations=True)
    out = mapper(two_box_dict)
    np.testing.assert_array_equal(recorder.boxes, [[10, 10, 60, 50], [90, 50, 150, 110], [60, 0, 90, 20]])
    assert out["instances"].gt_classes.tolist() == [0, 1]
    assert "image" in out and "annotations" not in out and "annotations" in two_box_dict


def test_ssd_mapper_rejects_detectron2_crop():
    cfg = ssd_cfg()
    cfg.INPUT.CROP.ENABLED = True
    with pytest.raises(ValueError, match="INPUT.CROP.ENABLED"):
        build_alrp_mapper(cfg, is_train=True)


@pytest.mark.parametrize("is_train", [True, False])
def test_mapper_without_ssd_matches_detectron2(two_box_dict, is_train):
    cfg = ssd_cfg()
    cfg.INPUT.SSD.ENABLED = False
    cfg.INPUT.MIN_SIZE_TRAIN = (64,)
    cfg.INPUT.MIN_SIZE_TEST = 64
    ours, reference = build_alrp_mapper(cfg, is_train), DatasetMapper(cfg, is_train)
    assert not ours.boxes_to_augmentations
    for seed in range(3):
        np.random.seed(seed)
        got = ours(two_box_dict)
        np.random.seed(seed)
        expected = reference(two_box_dict)
        assert got.keys() == expected.keys()
        assert torch.equal(got["image"], expected["image"])
        if is_train:
            assert torch.equal(got["instances"].gt_boxes.tensor, expected["instances"].gt_boxes.tensor)
            assert torch.equal(got["instances"].gt_classes, expected["instances"].gt_classes)
