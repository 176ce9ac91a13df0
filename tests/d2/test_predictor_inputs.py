"""The predictor takes a non-empty uint8 H x W x 3 array in the configured format and says what it
got otherwise; weights with NaN or infinite values are refused when they are loaded (tiny model, CPU)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from detectron2.modeling import build_model

from alrp_d2.checkpoint import AlrpCheckpointer, NonFiniteWeightsError
from alrp_d2.engine import AlrpTrainer
from alrp_d2.evaluation import AlrpPredictor
from alrp_d2.evaluation.predictor import ImageInputError, check_image

from .tiny_configs import tiny_retinanet_cfg

IMAGE = np.full((48, 64, 3), 128, dtype=np.uint8)


@pytest.fixture(scope="module")
def predictor() -> AlrpPredictor:
    cfg = tiny_retinanet_cfg()
    cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = 64, 96
    return AlrpPredictor(cfg)


@pytest.mark.parametrize(
    "image, message",
    [
        (None, r"got None"),
        (
            "images/a.jpg",
            r"got the path 'images/a.jpg': read it first, e.g. detectron2.*read_image\(path, format='BGR'\)",
        ),
        (torch.zeros(48, 64, 3, dtype=torch.uint8), r"got a torch.Tensor"),
        (IMAGE / 255.0, r"got float64 pixels \(floats in \[0, 1\]: \(image \* 255\).round\(\).astype\(np.uint8\)\)"),
        (IMAGE.astype(np.int64), r"got int64 pixels"),
        (IMAGE[:, :, 0], r"got shape \(48, 64\) \(a grayscale image: stack it into 3 channels"),
        (np.zeros((48, 64, 4), np.uint8), r"got shape \(48, 64, 4\) \(4 channels, e.g. RGBA: drop the alpha channel"),
        (np.ascontiguousarray(IMAGE.transpose(2, 0, 1)), r"got shape \(3, 48, 64\) \(channels first: transpose it"),
        (np.zeros((0, 64, 3), np.uint8), r"got an empty image of shape \(0, 64, 3\)"),
        (np.zeros((48, 0, 3), np.uint8), r"got an empty image of shape \(48, 0, 3\)"),
    ],
)
def test_anything_but_an_image_is_refused_saying_what_it_is(predictor, image, message):
    with pytest.raises(
        ImageInputError,
        match=r"the predictor takes a non-empty uint8 numpy array of shape \(H, W, 3\) "
        r"in BGR order \(INPUT.FORMAT\), " + message,
    ):
        predictor(image)


def test_an_image_of_the_configured_format_is_predicted(predictor):
    assert len(predictor(IMAGE)["instances"]) >= 0
    check_image(IMAGE[:, :, :1], "L")
    with pytest.raises(ImageInputError, match=r"shape \(H, W, 1\) in L order"):
        check_image(IMAGE, "L")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("suffix", [".pth", ".pkl"])
def test_weights_with_non_finite_values_are_refused_naming_them(tmp_path, value, suffix):
    cfg = tiny_retinanet_cfg()
    state = build_model(cfg).state_dict()
    state["head.cls_score.bias"][1] = value
    path = tmp_path / f"diverged{suffix}"
    if suffix == ".pth":
        torch.save({"model": state}, path)
    else:
        arrays = {key: tensor.numpy() for key, tensor in state.items()}
        path.write_bytes(pickle.dumps({"model": arrays, "__author__": "test"}))
    cfg.MODEL.WEIGHTS = str(path)
    message = rf"{path} has 1 parameter\(s\) with NaN or infinite values .*\n  head.cls_score.bias\n"
    with pytest.raises(NonFiniteWeightsError, match=message):
        AlrpPredictor(cfg)
    with pytest.raises(NonFiniteWeightsError, match=message):
        AlrpCheckpointer(build_model(cfg)).load(str(path))


def test_a_training_run_does_not_start_from_non_finite_weights(tmp_path):
    cfg = tiny_retinanet_cfg()
    state = build_model(cfg).state_dict()
    state["backbone.bottom_up.stem.conv1.weight"][0, 0, 0, 0] = float("nan")
    cfg.MODEL.WEIGHTS = str(tmp_path / "nan.pth")
    torch.save({"model": state}, cfg.MODEL.WEIGHTS)
    model = AlrpTrainer.build_model(cfg)
    with pytest.raises(NonFiniteWeightsError, match="backbone.bottom_up.stem.conv1.weight"):
        AlrpCheckpointer(model, initialisation=True).resume_or_load(cfg.MODEL.WEIGHTS, resume=False)
