"""Weights must belong to the model: another architecture's weights are refused naming the
parameters, backbone (ImageNet) weights initialise training runs only, --eval-only needs weights,
and .pkl weights are read without running code (tiny models, CPU)."""

from __future__ import annotations

import logging
import os
import pickle

import numpy as np
import pytest
import torch
import torchvision
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.engine import default_argument_parser
from detectron2.modeling import build_model
from detectron2.structures import BoxMode

import train_net
from alrp_d2.checkpoint import AlrpCheckpointer, IncompatibleWeightsError, UnreadableCheckpointError
from alrp_d2.checkpoint.safe_pickle import UnsafePickleError
from alrp_d2.engine import AlrpTrainer
from alrp_d2.evaluation import AlrpPredictor

from .tiny_configs import tiny_faster_rcnn_cfg, tiny_retinanet_cfg
from .torchvision_weights import torchvision_to_detectron2

TRAIN = "weights_train"  # training runs below load weights and never read an image


def retinanet_cfg(tmp_path):
    if TRAIN not in DatasetCatalog:
        box = {"bbox": [8, 8, 40, 40], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0, "iscrowd": 0}
        image = {"file_name": "unread.jpg", "height": 64, "width": 64, "image_id": 1, "annotations": [box]}
        DatasetCatalog.register(TRAIN, lambda: [image])
        MetadataCatalog.get(TRAIN).thing_classes = ["a", "b", "c"]
    cfg = tiny_retinanet_cfg()
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (TRAIN,), ()
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.OUTPUT_DIR = str(tmp_path / "output")
    return cfg


@pytest.fixture
def faster_rcnn_weights(tmp_path) -> str:
    path = tmp_path / "faster_rcnn.pth"
    torch.save({"model": build_model(tiny_faster_rcnn_cfg()).state_dict()}, path)
    return str(path)


def eval_only_args(cfg, tmp_path, *options: str):
    config = tmp_path / "config.yaml"
    config.write_text(cfg.dump())
    return default_argument_parser().parse_args(["--config-file", str(config), "--eval-only", *options])


def test_weights_of_another_architecture_are_refused_naming_the_parameters(faster_rcnn_weights, tmp_path):
    """Faster R-CNN weights for the RetinaNet config: --eval-only, the predictor and training stop."""
    cfg = retinanet_cfg(tmp_path)
    with pytest.raises(IncompatibleWeightsError) as error:
        train_net.main(eval_only_args(cfg, tmp_path, "MODEL.WEIGHTS", faster_rcnn_weights))
    message = str(error.value)
    assert faster_rcnn_weights in message
    assert "missing from the weights:" in message and "\n  head.cls_score.weight\n" in message
    assert "the model does not have" in message and "roi_heads.box_predictor" in message
    cfg.MODEL.WEIGHTS = faster_rcnn_weights
    with pytest.raises(IncompatibleWeightsError, match="missing from the weights"):
        AlrpPredictor(cfg)
    with pytest.raises(IncompatibleWeightsError, match="the model does not have"):
        AlrpTrainer(cfg).resume_or_load(resume=False)


def test_batchnorm_counters_may_be_absent_and_empty_weights_warn(tmp_path, caplog):
    cfg = retinanet_cfg(tmp_path)
    state = build_model(cfg).state_dict()
    counters = [key for key in state if key.endswith("num_batches_tracked")]
    assert counters  # the tiny config's BatchNorm
    cfg.MODEL.WEIGHTS = str(tmp_path / "without_counters.pth")
    torch.save({"model": {k: v for k, v in state.items() if k not in counters}}, cfg.MODEL.WEIGHTS)
    AlrpPredictor(cfg)
    cfg.MODEL.WEIGHTS = ""
    with caplog.at_level(logging.WARNING, logger="alrp_d2.evaluation.predictor"):
        logging.getLogger("alrp_d2.evaluation.predictor").addHandler(caplog.handler)
        try:
            AlrpPredictor(cfg)
        finally:
            logging.getLogger("alrp_d2.evaluation.predictor").removeHandler(caplog.handler)
    assert "MODEL.WEIGHTS is empty: the predictor uses a randomly initialised model" in caplog.text


def test_partial_weights_load_with_the_opt_in(faster_rcnn_weights, tmp_path):
    cfg = retinanet_cfg(tmp_path)
    cfg.MODEL.WEIGHTS, cfg.MODEL.ALLOW_PARTIAL_WEIGHTS = faster_rcnn_weights, True
    predictor = AlrpPredictor(cfg)
    saved = torch.load(faster_rcnn_weights)["model"]
    key = "backbone.bottom_up.res2.0.conv1.weight"
    assert torch.equal(predictor.model.state_dict()[key], saved[key])


@pytest.fixture
def imagenet_weights(tmp_path) -> str:
    """A ResNet-18 in the layout of detectron2's ImageNet weights (torchvision/R-50.pkl: the
    converted torchvision state dict, classifier included, read by name-matching heuristics)."""
    torch.manual_seed(0)
    path = tmp_path / "R-18.pkl"
    path.write_bytes(pickle.dumps(torchvision_to_detectron2(torchvision.models.resnet18(weights=None).state_dict())))
    return str(path)


def test_backbone_weights_initialise_training_only(imagenet_weights, tmp_path):
    cfg = retinanet_cfg(tmp_path)
    cfg.MODEL.WEIGHTS = imagenet_weights
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    saved = pickle.loads(open(imagenet_weights, "rb").read())["model"]
    loaded = trainer.model.state_dict()
    assert np.array_equal(loaded["backbone.bottom_up.res3.0.conv1.weight"].numpy(), saved["res3.0.conv1.weight"])

    with pytest.raises(IncompatibleWeightsError, match="missing from the weights:(.|\n)*head.cls_score"):
        train_net.main(eval_only_args(cfg, tmp_path, "MODEL.WEIGHTS", imagenet_weights))
    with pytest.raises(IncompatibleWeightsError, match="Evaluation and predictors need weights for the whole model"):
        AlrpPredictor(cfg)


def test_backbone_weights_must_cover_the_whole_bottom_up_network(imagenet_weights, tmp_path):
    content = pickle.loads(open(imagenet_weights, "rb").read())
    del content["model"]["res4.1.conv2.weight"]
    path = tmp_path / "R-18-incomplete.pkl"
    path.write_bytes(pickle.dumps(content))
    cfg = retinanet_cfg(tmp_path)
    cfg.MODEL.WEIGHTS = str(path)
    with pytest.raises(IncompatibleWeightsError, match="backbone.bottom_up.res4.1.conv2.weight"):
        AlrpTrainer(cfg).resume_or_load(resume=False)


def test_eval_only_needs_weights(tmp_path):
    cfg = retinanet_cfg(tmp_path)
    with pytest.raises(ValueError, match="--eval-only needs trained weights but MODEL.WEIGHTS is empty"):
        train_net.main(eval_only_args(cfg, tmp_path))
    with pytest.raises(ValueError, match="has no last_checkpoint"):
        train_net.main(eval_only_args(cfg, tmp_path, "--resume"))
    # With --resume, the checkpoint of OUTPUT_DIR is the weights.
    AlrpCheckpointer(build_model(cfg), cfg.OUTPUT_DIR).save("model_final")
    train_net.check_eval_only_weights(cfg, eval_only_args(cfg, tmp_path, "--resume"))


# ---- .pkl weights ------------------------------------------------------------------------------


def model_arrays(cfg) -> dict:
    return {key: value.numpy() for key, value in build_model(cfg).state_dict().items()}


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_pkl_weights_in_detectron2s_layouts_load(tmp_path, protocol):
    """detectron2's model-zoo layout ({"model": arrays, "__author__"}) and Caffe2's ("blobs", with
    the optimizer's _momentum arrays), pickled with protocol 2 (Python 2 era files) and the newest."""
    cfg = retinanet_cfg(tmp_path)
    arrays = model_arrays(cfg)
    zoo = tmp_path / "zoo.pkl"
    zoo.write_bytes(pickle.dumps({"model": arrays, "__author__": "Detectron2 Model Zoo"}, protocol=protocol))
    cfg.MODEL.WEIGHTS = str(zoo)
    loaded = AlrpPredictor(cfg).model.state_dict()
    assert all(np.array_equal(loaded[key].numpy(), value) for key, value in arrays.items())

    caffe2 = {"blobs": {"res2_0_branch2a_w": np.ones((64, 64, 1, 1), np.float32), "x_momentum": np.zeros(3)}}
    blobs = tmp_path / "caffe2.pkl"
    blobs.write_bytes(pickle.dumps(caffe2, protocol=protocol))
    checkpoint = AlrpCheckpointer(build_model(cfg))._load_file(str(blobs))
    assert checkpoint["matching_heuristics"] and list(checkpoint["model"]) == ["res2_0_branch2a_w"]


class RunsCode:
    """Unpickling this runs ``os.system`` (what a malicious weights file does)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_pkl_that_would_run_code_is_refused_naming_the_file(tmp_path):
    marker = tmp_path / "code_ran"
    path = tmp_path / "malicious.pkl"
    path.write_bytes(pickle.dumps({"model": {"w": np.zeros(2)}, "__author__": RunsCode(f"touch {marker}")}))
    cfg = retinanet_cfg(tmp_path)
    cfg.MODEL.WEIGHTS = str(path)
    with pytest.raises(UnsafePickleError, match=f"refusing to load {path}: it names (posix|nt).system"):
        AlrpPredictor(cfg)
    # The same object in a .pth file: torch's weights_only loader refuses it.
    cfg.MODEL.WEIGHTS = str(tmp_path / "malicious.pth")
    torch.save({"model": {}, "extra": RunsCode(f"touch {marker}")}, cfg.MODEL.WEIGHTS)
    with pytest.raises(UnreadableCheckpointError, match="malicious.pth .*Weights only load failed"):
        AlrpPredictor(cfg)
    # Resuming from a last_checkpoint that names it: refused, not skipped as unreadable.
    os.makedirs(cfg.OUTPUT_DIR)
    os.replace(path, os.path.join(cfg.OUTPUT_DIR, "model_final.pkl"))
    with open(os.path.join(cfg.OUTPUT_DIR, "last_checkpoint"), "w") as f:
        f.write("model_final.pkl")
    with pytest.raises(UnsafePickleError):
        AlrpTrainer(cfg).resume_or_load(resume=True)
    assert not marker.exists()
