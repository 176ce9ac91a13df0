"""The detectron2 trainer of alrp-d2: SSD augmentation, LRP evaluation and self-balance."""
from __future__ import annotations

import logging
import math
import weakref
from typing import List, Optional

from detectron2.checkpoint import DetectionCheckpointer
from detectron2.config import CfgNode
from detectron2.data import build_detection_test_loader, build_detection_train_loader, get_detection_dataset_dicts
from detectron2.engine import AMPTrainer, DefaultTrainer, SimpleTrainer, TrainerBase, create_ddp_model, hooks
from detectron2.utils import comm
from detectron2.utils.logger import setup_logger

from ..data import build_alrp_mapper
from ..evaluation import COCOLRPEvaluator
from ..modeling import find_localisation_weights
from .self_balance import SelfBalanceHook

__all__ = ["AlrpTrainer", "iterations_per_epoch", "self_balance_period"]


def iterations_per_epoch(cfg: CfgNode) -> int:
    """ceil(training images / SOLVER.IMS_PER_BATCH), counting the images the loader keeps."""
    dataset = get_detection_dataset_dicts(
        cfg.DATASETS.TRAIN, filter_empty=cfg.DATALOADER.FILTER_EMPTY_ANNOTATIONS
    )
    return max(1, math.ceil(len(dataset) / cfg.SOLVER.IMS_PER_BATCH))


def self_balance_period(cfg: CfgNode) -> int:
    """MODEL.ALRP.SB_PERIOD, or one epoch when it is 0."""
    return cfg.MODEL.ALRP.SB_PERIOD or iterations_per_epoch(cfg)


class AlrpTrainer(DefaultTrainer):
    """detectron2's DefaultTrainer with the aLRP data pipeline, the LRP evaluator and the
    self-balance hook.

    It also builds DistributedDataParallel without ``device_ids`` for CPU models, which
    PyTorch requires, so ``--num-gpus N`` on a CPU-only machine runs N gloo workers
    (DefaultTrainer always passes ``device_ids=[local_rank]``).
    """

    def __init__(self, cfg: CfgNode):
        TrainerBase.__init__(self)
        if not logging.getLogger("detectron2").isEnabledFor(logging.INFO):
            setup_logger()
        cfg = DefaultTrainer.auto_scale_workers(cfg, comm.get_world_size())

        model = self.build_model(cfg)
        optimizer = self.build_optimizer(cfg, model)
        data_loader = self.build_train_loader(cfg)

        ddp_kwargs = {"device_ids": None} if model.device.type == "cpu" else {}
        model = create_ddp_model(model, broadcast_buffers=False, **ddp_kwargs)
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
