"""The detectron2 trainer of alrp-d2: SSD augmentation, LRP evaluation and self-balance."""

from __future__ import annotations

import weakref
from typing import List, Optional

import torch
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.config import CfgNode
from detectron2.data import build_detection_test_loader, build_detection_train_loader
from detectron2.engine import AMPTrainer, DefaultTrainer, SimpleTrainer, TrainerBase, create_ddp_model, hooks
from detectron2.utils import comm

from ..data import build_alrp_mapper
from ..evaluation import COCOLRPEvaluator
from .self_balance import SelfBalanceHook, find_localisation_weights, self_balance_period

__all__ = ["AlrpTrainer"]


def runs_cpu_workers(cfg: CfgNode) -> bool:
    """Whether this process is one of several workers training a CPU model (gloo)."""
    return comm.get_world_size() > 1 and torch.device(cfg.MODEL.DEVICE).type == "cpu"


class AlrpTrainer(DefaultTrainer):
    """detectron2's DefaultTrainer with the aLRP data pipeline, the LRP evaluator and the
    self-balance hook (the ``build_*`` class methods, as detectron2's projects do).

    detectron2's ``DefaultTrainer.__init__`` wraps the model with
    ``create_ddp_model(model, broadcast_buffers=False)``, which always passes
    ``device_ids=[local_rank]``; PyTorch rejects ``device_ids`` for a CPU module. For GPUs and
    single-process runs this class uses ``DefaultTrainer.__init__`` unchanged. Only for several
    CPU workers (``--num-gpus N`` without GPUs, gloo) does it build the trainer itself, with the
    same steps and DDP without ``device_ids``; ``tests/d2/test_trainer_init.py`` pins those steps
    to detectron2's source so that a detectron2 upgrade that changes them fails a test instead of
    diverging silently.
    """

    def __init__(self, cfg: CfgNode):
        if not runs_cpu_workers(cfg):
            super().__init__(cfg)
            return
        TrainerBase.__init__(self)
        cfg = DefaultTrainer.auto_scale_workers(cfg, comm.get_world_size())
        model = self.build_model(cfg)
        optimizer = self.build_optimizer(cfg, model)
        data_loader = self.build_train_loader(cfg)
        model = create_ddp_model(model, broadcast_buffers=False, device_ids=None)
        self._trainer = (AMPTrainer if cfg.SOLVER.AMP.ENABLED else SimpleTrainer)(model, data_loader, optimizer)
        self.scheduler = self.build_lr_scheduler(cfg, optimizer)
        self.checkpointer = DetectionCheckpointer(model, cfg.OUTPUT_DIR, trainer=weakref.proxy(self))
        self.start_iter = 0
        self.max_iter = cfg.SOLVER.MAX_ITER
        self.cfg = cfg
        self.register_hooks(self.build_hooks())

    @classmethod
    def build_train_loader(cls, cfg: CfgNode):
        return build_detection_train_loader(cfg, mapper=build_alrp_mapper(cfg, is_train=True))

    @classmethod
    def build_test_loader(cls, cfg: CfgNode, dataset_name: str):
        return build_detection_test_loader(cfg, dataset_name, mapper=build_alrp_mapper(cfg, is_train=False))

    @classmethod
    def build_evaluator(cls, cfg: CfgNode, dataset_name: str, output_folder: Optional[str] = None):
        return COCOLRPEvaluator(dataset_name, output_dir=output_folder or f"{cfg.OUTPUT_DIR}/inference")

    def build_hooks(self) -> List[hooks.HookBase]:
        """DefaultTrainer's hooks plus :class:`SelfBalanceHook` when a head is self-balanced,
        placed before the checkpointer so that checkpoints include the finished step."""
        hook_list = super().build_hooks()
        if any(weight.self_balanced for weight in find_localisation_weights(self.model).values()):
            position = next(
                i for i, h in enumerate(hook_list) if isinstance(h, (hooks.PeriodicCheckpointer, hooks.EvalHook))
            )
            hook_list.insert(position, SelfBalanceHook(self_balance_period(self.cfg)))
        return hook_list
