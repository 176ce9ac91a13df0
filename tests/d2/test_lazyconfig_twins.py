"""Every LazyConfig of configs/ with a yacs twin builds the twin's model (the same parameters and buffers; with the
twin's weights and anchors, bit for bit the same losses on the same batch at the same seed and the same detections)
and has its recipe (solver, schedule, augmentation, test size, datasets and their filter, initial weights, periods);
the quickstart and its twin train the same weights through the one trainer of both config systems."""

from __future__ import annotations

import inspect
from typing import Dict, List, Tuple

import detectron2.data.transforms as T
import numpy as np
import pytest
import torch
from detectron2.config import instantiate
from detectron2.data import get_detection_dataset_dicts
from detectron2.modeling import build_model
from detectron2.modeling.anchor_generator import DefaultAnchorGenerator
from detectron2.solver import build_lr_scheduler
from detectron2.utils.events import EventStorage
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import nn

from alrp_d2.config.lazy_fields import lazy_calls, lazy_dataset_names
from alrp_d2.data import build_alrp_mapper
from alrp_d2.data.training_filter import mmdet_training_filter
from alrp_d2.engine import AlrpTrainer, find_ranking_losses
from alrp_d2.engine.lazy_run import lazy_training_run
from alrp_d2.engine.trainer import RunTrainer
from alrp_d2.evaluation import COCOLRPEvaluator

from .lazy_configs import TWINS, load_lazy, tiny_lazy, tiny_yacs
from .small_shapes import register_small_shapes
from .tiny_configs import load_config, tiny_batch, with_masks

PRIMITIVES = (bool, int, float, str, type(None))


def _setting(value):
    """A primitive value, or a sequence of them as a tuple (a config's ListConfig included); None otherwise."""
    if isinstance(value, (ListConfig, DictConfig)):
        value = OmegaConf.to_container(value)
    if isinstance(value, (list, tuple)):
        items = [_setting(v) for v in value]
        return None if any(item is NOT_A_SETTING for item in items) else tuple(items)
    return value if isinstance(value, PRIMITIVES) else NOT_A_SETTING


NOT_A_SETTING = object()


def _settings(obj) -> Dict:
    settings = {k: _setting(v) for k, v in vars(obj).items() if not k.startswith("_")}
    return {k: v for k, v in settings.items() if v is not NOT_A_SETTING and v is not None or vars(obj)[k] is None}


def hyperparameters(model: nn.Module) -> Dict[str, Dict]:
    """The settings every module keeps as attributes (thresholds, top-k, weights, flags), with the types and settings
    of the helper objects they hold (matchers, box codings, criteria)."""
    result = {}
    for name, module in model.named_modules():
        result[name] = _settings(module)
        for key, value in vars(module).items():
            helper = not isinstance(value, (nn.Module, torch.Tensor, ListConfig, DictConfig)) and not callable(value)
            if helper and hasattr(value, "__dict__") and not key.startswith("_"):
                result[f"{name}.{key}"] = {"type": type(value).__name__, **_settings(value)}
    return result


def keep_every_detection(model: nn.Module) -> None:
    """Score threshold 0, so that the randomly initialised models detect something to compare."""
    heads = getattr(model, "roi_heads", None)
    (heads.box_predictor if heads is not None else model).test_score_thresh = 0.0


def cell_anchors(model: nn.Module) -> List[torch.Tensor]:
    """The cell anchors of every anchor generator of ``model`` (buffers outside the state dict)."""
    generators = [module for module in model.modules() if isinstance(module, DefaultAnchorGenerator)]
    return [anchors for generator in generators for anchors in generator.cell_anchors]


def losses_and_detections(model, masks: bool):
    batch = with_masks(tiny_batch()) if masks else tiny_batch()
    model.train()
    torch.manual_seed(1)
    with EventStorage():
        losses = model(batch)
    model.eval()
    keep_every_detection(model)
    with torch.no_grad():
        detections = [output["instances"].get_fields() for output in model(batch)]
    return {name: value.detach() for name, value in losses.items()}, detections


@pytest.mark.parametrize("lazy_name,yacs_name", TWINS)
def test_lazyconfig_builds_the_model_of_its_yaml_twin(lazy_name, yacs_name):
    yacs_cfg = tiny_yacs(yacs_name)
    torch.manual_seed(0)
    expected = build_model(yacs_cfg)
    torch.manual_seed(0)
    model = instantiate(tiny_lazy(load_lazy(lazy_name)).model)
    assert type(model) is type(expected)
    shapes = {name: value.shape for name, value in model.state_dict().items()}
    assert shapes == {name: value.shape for name, value in expected.state_dict().items()}
    model.load_state_dict(expected.state_dict())
    # A YAML lists the octave sizes to 4 decimals (<= 5e-5 px off) where its LazyConfig computes them: the corners
    # agree within that and float32's spacing at 800 px (6e-5 px). With the twin's anchors too, both models run the
    # same kernels in the same order on the same batch: bit for bit.
    for anchors, expected_anchors in zip(cell_anchors(model), cell_anchors(expected), strict=True):
        torch.testing.assert_close(anchors, expected_anchors, rtol=0, atol=1e-4)
        anchors.copy_(expected_anchors)
    assert hyperparameters(model) == hyperparameters(expected)
    masks = yacs_cfg.MODEL.MASK_ON
    (losses, detections), (expected_losses, expected_detections) = (
        losses_and_detections(m, masks) for m in (model, expected)
    )
    assert losses.keys() == expected_losses.keys()
    for name, value in expected_losses.items():
        torch.testing.assert_close(losses[name], value, rtol=0, atol=0, msg=name)
    assert all(len(fields["scores"]) for fields in expected_detections)  # something to compare
    for fields, expected_fields in zip(detections, expected_detections):
        assert fields.keys() == expected_fields.keys()
        for name, value in expected_fields.items():
            value = value.tensor if hasattr(value, "tensor") else value
            got = fields[name].tensor if hasattr(fields[name], "tensor") else fields[name]
            torch.testing.assert_close(got, value, rtol=0, atol=0, msg=name)


def _plain(value):
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(_plain(v) for v in value)
    return value


def augmentations(mapper) -> List[Tuple[str, Dict]]:
    """The augmentations of a mapper with the values of their parameters (sequences as tuples); a ResizeShortestEdge
    to one size is the same resize in detectron2's two sample styles."""
    described = []
    for augmentation in mapper.augmentations.augs:
        parameters = inspect.signature(type(augmentation).__init__).parameters
        values = {name: _plain(getattr(augmentation, name)) for name in parameters if hasattr(augmentation, name)}
        if isinstance(augmentation, T.ResizeShortestEdge) and len(set(augmentation.short_edge_length)) == 1:
            values["sample_style"] = "choice"
        described.append((type(augmentation).__name__, values))
    return described


@pytest.mark.parametrize("lazy_name,yacs_name", TWINS)
def test_lazyconfig_has_the_recipe_of_its_yaml_twin(lazy_name, yacs_name):
    cfg, lazy = load_config(yacs_name), load_lazy(lazy_name)
    solver = cfg.SOLVER
    assert (lazy.optimizer.lr, lazy.optimizer.momentum, lazy.optimizer.weight_decay) == (
        solver.BASE_LR,
        solver.MOMENTUM,
        solver.WEIGHT_DECAY,
    )
    assert lazy.optimizer.params.weight_decay_norm == solver.WEIGHT_DECAY_NORM
    assert lazy.dataloader.train.total_batch_size == solver.IMS_PER_BATCH
    assert lazy.train.max_iter == solver.MAX_ITER
    assert lazy.train.checkpointer.period == solver.CHECKPOINT_PERIOD
    assert lazy.train.init_checkpoint == cfg.MODEL.WEIGHTS
    if cfg.MODEL.ALRP.SB_ENABLED and cfg.MODEL.ALRP.SB_PERIOD:
        assert lazy.train.self_balance_period == cfg.MODEL.ALRP.SB_PERIOD
    schedule = build_lr_scheduler(cfg, torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0))._multiplier
    lazy_schedule = instantiate(lazy.lr_multiplier)
    iterations = sorted({0, 1, solver.WARMUP_ITERS - 1, solver.WARMUP_ITERS, *solver.STEPS, solver.MAX_ITER - 1})
    iterations += [step - 1 for step in solver.STEPS]
    for iteration in iterations:
        assert lazy_schedule(iteration / solver.MAX_ITER) == pytest.approx(schedule(iteration / solver.MAX_ITER))

    train_mapper, test_mapper = (instantiate(lazy.dataloader[split].mapper) for split in ("train", "test"))
    assert augmentations(train_mapper) == augmentations(build_alrp_mapper(cfg, is_train=True))
    assert augmentations(test_mapper) == augmentations(build_alrp_mapper(cfg, is_train=False))
    assert train_mapper.image_format == test_mapper.image_format == cfg.INPUT.FORMAT
    assert train_mapper.use_instance_mask == cfg.MODEL.MASK_ON
    assert getattr(train_mapper, "boxes_to_augmentations", False) == cfg.INPUT.SSD.ENABLED

    assert lazy_dataset_names(lazy, "train") == list(cfg.DATASETS.TRAIN)
    assert lazy_dataset_names(lazy, "test") == list(cfg.DATASETS.TEST)
    mmdet_filtered = list(lazy_calls(lazy.dataloader.train.dataset, mmdet_training_filter))
    assert bool(mmdet_filtered) == (cfg.DATALOADER.TRAIN_FILTER == "mmdet")
    (dataset,) = lazy_calls(lazy.dataloader.train.dataset, get_detection_dataset_dicts)
    assert dataset.get("filter_empty", True) == (cfg.DATALOADER.FILTER_EMPTY_ANNOTATIONS and not mmdet_filtered)
    assert lazy.dataloader.evaluator._target_ is COCOLRPEvaluator


QUICKSTART_TWINS = ("quickstart/alrp_retinanet_shapes.py", "quickstart/alrp_retinanet_shapes.yaml")


def test_the_quickstart_trains_the_same_weights_through_both_config_systems(tmp_path):
    """The YAML quickstart and its LazyConfig twin, from the same initial weights and seed, 2 iterations of 2 images
    self-balanced after each, end with the same weights bit for bit: one trainer serves both."""
    train, _ = register_small_shapes(str(tmp_path / "data"), "twins", {"train": 4, "val": 1})
    yacs_cfg, lazy = load_config(QUICKSTART_TWINS[1]), load_lazy(QUICKSTART_TWINS[0])
    yacs_cfg.MODEL.WEIGHTS = lazy.train.init_checkpoint = str(tmp_path / "initial.pth")
    torch.save({"model": build_model(yacs_cfg).state_dict()}, yacs_cfg.MODEL.WEIGHTS)
    yacs_cfg.DATASETS.TRAIN, yacs_cfg.DATASETS.TEST = (train,), ()
    yacs_cfg.DATALOADER.NUM_WORKERS = 0
    yacs_cfg.SOLVER.IMS_PER_BATCH, yacs_cfg.SOLVER.MAX_ITER, yacs_cfg.MODEL.ALRP.SB_PERIOD = 2, 2, 1
    yacs_cfg.OUTPUT_DIR = str(tmp_path / "yaml")
    lazy.dataloader.train.dataset.names = train
    lazy.dataloader.train.num_workers = 0
    lazy.dataloader.evaluator = None
    lazy.dataloader.train.total_batch_size, lazy.train.max_iter, lazy.train.self_balance_period = 2, 2, 1
    lazy.train.output_dir = str(tmp_path / "lazy")
    assert lazy.train.seed == yacs_cfg.SEED

    trainers = [AlrpTrainer(yacs_cfg), RunTrainer(lazy_training_run(lazy))]
    for trainer in trainers:
        trainer.resume_or_load(resume=False)
        trainer.train()
    weights, lazy_weights = (trainer.model.state_dict() for trainer in trainers)
    assert weights.keys() == lazy_weights.keys()
    initial = torch.load(yacs_cfg.MODEL.WEIGHTS, weights_only=True)["model"]
    assert any(not torch.equal(value, initial[name]) for name, value in weights.items())  # it trained
    for name, value in weights.items():
        assert torch.equal(lazy_weights[name], value), name
    assert find_ranking_losses(trainers[1].model)["retinanet"].loc_weight.item() != 50.0  # self-balanced
