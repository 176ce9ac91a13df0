"""The detectron2 trainer of alrp-d2: SSD augmentation, LRP evaluation and self-balance."""

from __future__ import annotations

import logging
import random
import weakref
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.config import CfgNode
from detectron2.data import build_detection_test_loader, build_detection_train_loader
from detectron2.engine import AMPTrainer, DefaultTrainer, SimpleTrainer, TrainerBase, create_ddp_model, hooks
from detectron2.utils import comm
from detectron2.utils.events import EventWriter

from ..checkpoint import AlrpCheckpointer, weights_fingerprint
from ..data import build_alrp_mapper
from ..data.dataset_classes import DatasetClasses, check_dataset_classes, dataset_classes
from ..data.dataset_segmentations import check_dataset_segmentations
from ..data.image_errors import ImageErrorGuard
from ..data.samplers import ResumableBatchSampler, build_resumable_train_loader, derived_seed
from ..data.training_filter import training_dataset_dicts
from ..data.worker_lifetime import workers_die_with_parent
from ..evaluation import COCOLRPEvaluator
from .buffer_sync import broadcast_buffers_from_main
from .collapse_check import CollapseCheckHook
from .self_balance import SelfBalanceHook, find_ranking_losses, self_balance_period
from .writers import alrp_writers

__all__ = ["AlrpTrainer", "DataPositionHook"]

logger = logging.getLogger(__name__)

STEP_RNG_KEY = 1  # separates the per-step seeds from the per-sample ones of SeededSamples


def training_classes(cfg: CfgNode) -> Optional[DatasetClasses]:
    """The classes the model trains on: those of DATASETS.TRAIN's first dataset (all have the same,
    :func:`check_dataset_classes`), None when it declares none."""
    return dataset_classes(cfg.DATASETS.TRAIN[0]) if len(cfg.DATASETS.TRAIN) else None


def runs_cpu_workers(cfg: CfgNode) -> bool:
    """Whether this process is one of several workers training a CPU model (gloo)."""
    return comm.get_world_size() > 1 and torch.device(cfg.MODEL.DEVICE).type == "cpu"


class DataPositionHook(hooks.HookBase):
    """Makes the data and the random state of iteration k a function of (SEED, k, rank): before
    training it starts the :class:`ResumableBatchSampler` at the first iteration (the one after the
    checkpoint when resumed), and before every step it seeds python's, numpy's and torch's RNGs
    (e.g. the ROI heads' sampling of proposals) from (SEED, k, rank)."""

    def __init__(self, sampler: ResumableBatchSampler):
        self.sampler = sampler

    def before_train(self) -> None:
        self.sampler.start_iteration = self.trainer.iter
        # The loader's iterator draws its workers' base seed from torch's RNG: made here, not in the first step,
        # whose seeded RNG then feeds the model's own draws (RT-DETR's denoising noise) as in any other step.
        loop: Any = getattr(self.trainer, "_trainer", self.trainer)  # DefaultTrainer's SimpleTrainer, or itself
        _ = loop._data_loader_iter

    def state_dict(self) -> Dict[str, int]:
        """The seed of the sample stream (cfg.SEED, or the one drawn for SEED < 0), so that a
        resumed run continues the same stream."""
        return {"seed": self.sampler.seed}

    def load_state_dict(self, state_dict: Dict[str, int]) -> None:
        self.sampler.seed = state_dict["seed"]

    def before_step(self) -> None:
        seed = derived_seed(self.sampler.seed, STEP_RNG_KEY, self.sampler.rank, self.trainer.iter)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)


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
        check_dataset_classes(cfg)
        check_dataset_segmentations(cfg)
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
        """detectron2's batches (TrainingSampler + aspect-ratio grouping) from a loader that resumes
        exactly (:func:`build_resumable_train_loader`) of the images and boxes DATALOADER.TRAIN_FILTER
        keeps; image read errors name the file and are skipped with DATALOADER.SKIP_UNREADABLE_IMAGES.
        Another DATALOADER.SAMPLER_TRAIN uses detectron2's loader, whose stream restarts on resume.
        The loader's workers die with this process (:func:`workers_die_with_parent`)."""
        mapper = ImageErrorGuard(build_alrp_mapper(cfg, is_train=True), skip=cfg.DATALOADER.SKIP_UNREADABLE_IMAGES)
        dataset_dicts = training_dataset_dicts(cfg)
        if cfg.DATALOADER.SAMPLER_TRAIN != "TrainingSampler":
            logger.warning(
                "DATALOADER.SAMPLER_TRAIN=%s: a resumed run restarts its sample stream (exact resume needs "
                "TrainingSampler)",
                cfg.DATALOADER.SAMPLER_TRAIN,
            )
            return workers_die_with_parent(build_detection_train_loader(cfg, mapper=mapper, dataset=dataset_dicts))
        # SEED < 0 (detectron2's default): a random seed shared by the workers, saved in the
        # checkpoints by DataPositionHook, so that runs differ and a resumed run still continues its stream.
        seed = cfg.SEED if cfg.SEED >= 0 else comm.shared_random_seed()
        loader = build_resumable_train_loader(
            dataset_dicts,
            mapper,
            cfg.SOLVER.IMS_PER_BATCH,
            seed,
            cfg.DATALOADER.ASPECT_RATIO_GROUPING,
            cfg.DATALOADER.NUM_WORKERS,
        )
        return workers_die_with_parent(loader)

    @classmethod
    def build_test_loader(cls, cfg: CfgNode, dataset_name: str):
        """detectron2's test loader with the aLRP mapper, whose workers die with this process."""
        mapper = ImageErrorGuard(build_alrp_mapper(cfg, is_train=False), training=False)
        return workers_die_with_parent(build_detection_test_loader(cfg, dataset_name, mapper=mapper))

    @classmethod
    def test(cls, cfg: CfgNode, model, evaluators=None):
        """detectron2's ``DefaultTrainer.test`` after checking the classes of the test datasets
        (:func:`check_dataset_classes`) and, for a mask model, their segmentations; the default
        evaluators record the evaluated model (architecture and :func:`weights_fingerprint`) in
        their threshold files. Every worker first takes the main process's buffers
        (:func:`broadcast_buffers_from_main`): the metrics are those of the model the checkpoint saves."""
        check_dataset_classes(cfg, include_train=False)
        check_dataset_segmentations(cfg)
        broadcast_buffers_from_main(model)
        if evaluators is None:
            model_record = {"architecture": cfg.MODEL.META_ARCHITECTURE, "weights_sha256": weights_fingerprint(model)}
            evaluators = [cls.build_evaluator(cfg, name, model_record=model_record) for name in cfg.DATASETS.TEST]
        return super().test(cfg, model, evaluators)

    @classmethod
    def build_evaluator(
        cls,
        cfg: CfgNode,
        dataset_name: str,
        output_folder: Optional[str] = None,
        model_record: Optional[Dict[str, str]] = None,
    ):
        return COCOLRPEvaluator(
            dataset_name, output_dir=output_folder or f"{cfg.OUTPUT_DIR}/inference", model_record=model_record
        )

    def build_writers(self) -> List[EventWriter]:
        """detectron2's writers, with metrics.json smoothed over SOLVER.LOG_PERIOD iterations."""
        return alrp_writers(self.cfg.OUTPUT_DIR, self.max_iter, self.cfg.SOLVER.LOG_PERIOD)

    def build_hooks(self) -> List[hooks.HookBase]:
        """DefaultTrainer's hooks plus :class:`SelfBalanceHook` when a head has a ranking loss (it
        logs the losses' statistics and self-balances) and :class:`CollapseCheckHook` (a run that stops learning
        is reported), placed before the checkpointer so that checkpoints include the finished step, and first
        :class:`DataPositionHook` with the resumable loader. The writers run every
        SOLVER.LOG_PERIOD iterations. The checkpointer (built before the hooks, which save with it)
        becomes an :class:`AlrpCheckpointer`: weights that do not fit the model are an error unless
        MODEL.ALLOW_PARTIAL_WEIGHTS or they initialise the backbone, checkpoints are written atomically and
        resuming falls back to the newest readable checkpoint; checkpoints record the classes of
        DATASETS.TRAIN."""
        self.checkpointer = AlrpCheckpointer.like(
            self.checkpointer, self.cfg.MODEL.ALLOW_PARTIAL_WEIGHTS, classes=training_classes(self.cfg)
        )
        hook_list = super().build_hooks()
        hook_list = [  # DefaultTrainer's writer hook runs every 20 iterations; ours every LOG_PERIOD
            hooks.PeriodicWriter(self.build_writers(), period=self.cfg.SOLVER.LOG_PERIOD)
            if isinstance(hook, hooks.PeriodicWriter)
            else hook
            for hook in hook_list
        ]
        sampler = getattr(self._trainer.data_loader, "batch_sampler", None)
        if isinstance(sampler, ResumableBatchSampler):
            hook_list.insert(0, DataPositionHook(sampler))
        position = next(
            i for i, h in enumerate(hook_list) if isinstance(h, (hooks.PeriodicCheckpointer, hooks.EvalHook))
        )
        hook_list.insert(position, CollapseCheckHook())
        losses = find_ranking_losses(self.model)
        if losses:
            period = self_balance_period(self.cfg) if any(loss.self_balanced for loss in losses.values()) else None
            hook_list.insert(position, SelfBalanceHook(period))
        return hook_list
