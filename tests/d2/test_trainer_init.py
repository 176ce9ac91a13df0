"""AlrpTrainer, the trainer of YAML configs, builds what detectron2's DefaultTrainer builds from the same config
(model, optimizer, schedule, loop, checkpoint directory, detectron2's hooks in its order) without copying
DefaultTrainer.__init__; only a CPU model trained by several workers gets DDP without device_ids."""

from __future__ import annotations

import torch
from detectron2.engine import DefaultTrainer

from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.trainer import ddp_arguments

from .small_shapes import register_small_shapes
from .tiny_configs import tiny_retinanet_cfg


def test_ddp_without_device_ids_only_for_cpu_models():
    assert ddp_arguments("cpu", {"broadcast_buffers": False}) == {"broadcast_buffers": False, "device_ids": None}
    assert ddp_arguments("cuda", {"broadcast_buffers": False}) == {"broadcast_buffers": False}
    assert ddp_arguments("cuda:1", {}) == {}  # detectron2's create_ddp_model then uses the local rank


def _settings(optimizer: torch.optim.Optimizer):
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def test_alrp_trainer_builds_what_default_trainer_builds(tmp_path):
    train, _ = register_small_shapes(str(tmp_path / "data"), "trainer_init", {"train": 2, "val": 1})
    cfg = tiny_retinanet_cfg()
    cfg.MODEL.RETINANET.NUM_CLASSES = 5
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (train,), ()
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.OUTPUT_DIR = str(tmp_path / "output")
    torch.manual_seed(0)
    expected = DefaultTrainer(cfg)
    torch.manual_seed(0)
    trainer = AlrpTrainer(cfg)

    assert type(trainer._trainer) is type(expected._trainer)
    weights, expected_weights = trainer.model.state_dict(), expected.model.state_dict()
    assert weights.keys() == expected_weights.keys()
    assert all(torch.equal(weights[name], value) for name, value in expected_weights.items())
    assert _settings(trainer.optimizer) == _settings(expected.optimizer)  # with the warm-up's first rate
    assert type(trainer.scheduler) is type(expected.scheduler)
    assert trainer.checkpointer.save_dir == expected.checkpointer.save_dir == cfg.OUTPUT_DIR
    assert (trainer.start_iter, trainer.max_iter) == (expected.start_iter, expected.max_iter)
    detectron2_hooks = [type(hook) for hook in expected._hooks]
    assert [type(hook) for hook in trainer._hooks if type(hook) in detectron2_hooks] == detectron2_hooks
