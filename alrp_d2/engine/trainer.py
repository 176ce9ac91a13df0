"""The one trainer of alrp-d2, for YAML configs and LazyConfigs alike.

A config, of either system, gives a :class:`TrainingRun`: the model, optimizer, training loader and learning-rate
schedule it builds, and its settings. :class:`RunTrainer` trains any run with one loop (detectron2's
``DefaultTrainer`` around ``SimpleTrainer`` / ``AMPTrainer``), one hook set (the per-step seeds of exact resume,
self-balance, the collapse check, checkpoints, evaluation, writers), one checkpointer (:class:`AlrpCheckpointer`)
and one evaluation of trained weights (:func:`evaluate_checkpoint`, ``--eval-only``). :class:`AlrpTrainer` is the
run of a YAML config, with detectron2's ``DefaultTrainer`` API (``AlrpTrainer(cfg)`` and its ``build_*`` class
methods); :func:`~alrp_d2.engine.lazy_run.lazy_training_run` is the run of a LazyConfig.
"""

from __future__ import annotations

import logging
import random
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
from detectron2.config import CfgNode
from detectron2.data import build_detection_test_loader, build_detection_train_loader
from detectron2.engine import AMPTrainer, DefaultTrainer, SimpleTrainer, TrainerBase, create_ddp_model, hooks
from detectron2.utils import comm
from detectron2.utils.events import EventWriter
from detectron2.utils.logger import setup_logger
from fvcore.nn.precise_bn import get_bn_modules
from torch import nn

from ..checkpoint import AlrpCheckpointer, check_weights_classes, weights_fingerprint
from ..data import build_alrp_mapper
from ..data.dataset_classes import DatasetClasses, check_dataset_classes, dataset_classes
from ..data.dataset_segmentations import check_dataset_segmentations
from ..data.evaluated_images import first_images_dataset
from ..data.image_errors import ImageErrorGuard
from ..data.samplers import ResumableBatchSampler, build_resumable_train_loader, derived_seed
from ..data.training_filter import training_dataset_dicts
from ..data.worker_lifetime import workers_die_with_parent
from .buffer_sync import broadcast_buffers_from_main
from .collapse_check import CollapseCheckHook, ObjectCountingLoader
from .dataset_evaluators import lrp_evaluator
from .loss_record import LossRecordHook
from .self_balance import SelfBalanceHook, find_ranking_losses, self_balance_period
from .writers import alrp_writers

__all__ = ["AlrpTrainer", "DataPositionHook", "RunTrainer", "TrainingRun", "ddp_arguments", "evaluate_checkpoint"]

logger = logging.getLogger(__name__)

STEP_RNG_KEY = 1  # separates the per-step seeds from the per-sample ones of SeededSamples


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


@dataclass
class TrainingRun:
    """What a config, YAML or LazyConfig, gives the trainer: the objects it builds and the settings of the run."""

    model: nn.Module  #: on its device, not wrapped
    optimizer: torch.optim.Optimizer
    data_loader: Iterable[Any]
    lr_scheduler: Any  #: a torch LR scheduler or an fvcore ``ParamScheduler`` (detectron2's ``LRScheduler`` hook)
    test: Callable[[nn.Module], Dict[str, Any]]  #: evaluates the trained (possibly DDP-wrapped) model
    output_dir: str
    weights: str  #: the initial weights (MODEL.WEIGHTS, train.init_checkpoint); "" for none
    max_iter: int
    device: str
    checkpoint_period: int
    eval_period: int
    log_period: int
    self_balance_period: Callable[[], int]  #: iterations per self-balance period; asked only when a loss self-balances
    amp: bool = False
    ddp: Dict[str, Any] = field(default_factory=dict)  #: ``create_ddp_model``'s arguments
    max_checkpoints: Optional[int] = None  #: ``PeriodicCheckpointer``'s ``max_to_keep``
    allow_partial_weights: bool = False
    classes: Optional[DatasetClasses] = None  #: the training classes the checkpoints record
    lazy_config: bool = False  #: the run of a LazyConfig (advice names its keys)


def ddp_arguments(device: str, ddp: Dict[str, Any]) -> Dict[str, Any]:
    """``create_ddp_model``'s arguments for a model on ``device``: a CPU model (gloo workers) gets no ``device_ids``,
    which detectron2 would set to the local rank and PyTorch rejects for a CPU module."""
    return {**ddp, "device_ids": None} if torch.device(device).type == "cpu" else dict(ddp)


class RunTrainer(DefaultTrainer):
    """detectron2's ``DefaultTrainer`` (its loop, ``SimpleTrainer`` / ``AMPTrainer``, state and properties) training a
    :class:`TrainingRun`. ``DefaultTrainer.__init__`` reads a yacs config and would give a CPU model ``device_ids``;
    here the run's objects take its place (:func:`ddp_arguments`). The methods of ``DefaultTrainer`` that read the
    yacs config (``resume_or_load``, ``build_hooks``, ``build_writers``, ``train``) read the run instead."""

    def __init__(self, run: TrainingRun):
        TrainerBase.__init__(self)
        self.run = run
        model = create_ddp_model(run.model, **ddp_arguments(run.device, run.ddp))
        loader = ObjectCountingLoader(run.data_loader)  # the collapse check skips batches without objects
        self._trainer = (AMPTrainer if run.amp else SimpleTrainer)(model, loader, run.optimizer)
        self.scheduler = run.lr_scheduler
        self.checkpointer = AlrpCheckpointer(
            model,
            run.output_dir,
            allow_partial=run.allow_partial_weights,
            initialisation=True,
            classes=run.classes,
            trainer=weakref.proxy(self),
        )
        self.start_iter = 0
        self.max_iter = run.max_iter
        self.register_hooks(self.build_hooks())

    def resume_or_load(self, resume: bool = True) -> None:
        """With ``resume`` and a checkpoint in the output directory, continues from it (model, optimizer, scheduler,
        hooks, iteration); otherwise loads the run's initial weights and starts at iteration 0."""
        self.checkpointer.resume_or_load(self.run.weights, resume=resume)
        if resume and self.checkpointer.has_checkpoint():  # the checkpoint holds the iteration that finished
            self.start_iter = self.iter + 1

    def build_hooks(self) -> List[Optional[hooks.HookBase]]:
        """detectron2's hooks (timer, learning-rate schedule, checkpointer on the main process, evaluation, writers
        every log period) with the project's: :class:`DataPositionHook` first with the resumable loader, then
        :class:`SelfBalanceHook` when a head has a ranking loss (it logs the losses' statistics and self-balances) and
        :class:`CollapseCheckHook` (a run that stops learning is reported), before the checkpointer so that
        checkpoints include the finished step."""
        run = self.run
        hook_list: List[Optional[hooks.HookBase]] = [
            hooks.IterationTimer(),
            hooks.LRScheduler(scheduler=run.lr_scheduler),
        ]
        sampler = getattr(run.data_loader, "batch_sampler", None)
        if isinstance(sampler, ResumableBatchSampler):
            hook_list.insert(0, DataPositionHook(sampler))
        losses = find_ranking_losses(self.model)
        if losses:
            self_balanced = any(loss.self_balanced for loss in losses.values())
            hook_list.append(SelfBalanceHook(run.self_balance_period() if self_balanced else None))
        hook_list.append(CollapseCheckHook(lazy=run.lazy_config))
        hook_list.append(LossRecordHook(lazy=run.lazy_config))  # resuming with another loss is refused
        main = comm.is_main_process()
        hook_list += [
            hooks.PeriodicCheckpointer(self.checkpointer, run.checkpoint_period, max_to_keep=run.max_checkpoints)
            if main
            else None,
            hooks.EvalHook(run.eval_period, self.evaluate),
            hooks.PeriodicWriter(self.build_writers(), period=run.log_period) if main else None,
        ]
        return hook_list

    def build_writers(self) -> List[EventWriter]:
        """detectron2's writers, with metrics.json smoothed over the log period (:func:`alrp_writers`)."""
        return alrp_writers(self.run.output_dir, self.max_iter, self.run.log_period)

    def evaluate(self) -> Dict[str, Any]:
        """The run's evaluation of the model being trained (the evaluation hook's function)."""
        self._last_eval_results = self.run.test(self.model)
        return self._last_eval_results

    def train(self) -> Optional[Dict[str, Any]]:
        """Trains from ``start_iter`` to the run's ``max_iter``."""
        TrainerBase.train(self, self.start_iter, self.max_iter)
        return None


def evaluate_checkpoint(
    model: nn.Module,
    output_dir: str,
    weights: str,
    resume: bool,
    test: Callable[[nn.Module], Dict[str, Any]],
    test_classes: Sequence[Optional[DatasetClasses]],
    allow_partial: bool = False,
) -> Dict[str, Any]:
    """``--eval-only``: loads ``weights`` (with ``resume``: the last checkpoint of ``output_dir`` when it has one) into
    ``model``, checks that they were trained on the classes of the test datasets (:func:`check_weights_classes`) and
    returns ``test(model)``."""
    checkpointer = AlrpCheckpointer(model, save_dir=output_dir, allow_partial=allow_partial)
    checkpoint = checkpointer.resume_or_load(weights, resume=resume)
    check_weights_classes(checkpoint, checkpointer.loaded_path, test_classes)
    return test(model)


def training_classes(cfg: CfgNode) -> Optional[DatasetClasses]:
    """The classes the model trains on: those of DATASETS.TRAIN's first dataset (all have the same,
    :func:`check_dataset_classes`), None when it declares none."""
    return dataset_classes(cfg.DATASETS.TRAIN[0]) if len(cfg.DATASETS.TRAIN) else None


class AlrpTrainer(RunTrainer):
    """The :class:`RunTrainer` of a YAML config, with detectron2's ``DefaultTrainer`` API: ``AlrpTrainer(cfg)``, and
    the ``build_*`` class methods (as detectron2's projects do) that build the run's objects: the aLRP data pipeline,
    the resumable loader, the LRP evaluator. ``train`` verifies TEST.EXPECTED_RESULTS as detectron2 does and
    TEST.PRECISE_BN adds detectron2's ``PreciseBN`` hook."""

    def __init__(self, cfg: CfgNode):
        if not logging.getLogger("detectron2").isEnabledFor(logging.INFO):  # as DefaultTrainer: its logs show
            setup_logger()
        check_dataset_classes(cfg)
        check_dataset_segmentations(cfg)
        self.cfg = DefaultTrainer.auto_scale_workers(cfg, comm.get_world_size())
        super().__init__(self.training_run(self.cfg))

    def training_run(self, cfg: CfgNode) -> TrainingRun:
        """The objects and settings of a YAML config, built in detectron2's order (model, optimizer, loader)."""
        model = self.build_model(cfg)
        optimizer = self.build_optimizer(cfg, model)
        data_loader = self.build_train_loader(cfg)
        return TrainingRun(
            model=model,
            optimizer=optimizer,
            data_loader=data_loader,
            lr_scheduler=self.build_lr_scheduler(cfg, optimizer),
            test=lambda trained: self.test(cfg, trained),
            output_dir=cfg.OUTPUT_DIR,
            weights=cfg.MODEL.WEIGHTS,
            max_iter=cfg.SOLVER.MAX_ITER,
            device=cfg.MODEL.DEVICE,
            checkpoint_period=cfg.SOLVER.CHECKPOINT_PERIOD,
            eval_period=cfg.TEST.EVAL_PERIOD,
            log_period=cfg.SOLVER.LOG_PERIOD,
            self_balance_period=lambda: self_balance_period(cfg),
            amp=cfg.SOLVER.AMP.ENABLED,
            ddp={"broadcast_buffers": False},  # as DefaultTrainer
            allow_partial_weights=cfg.MODEL.ALLOW_PARTIAL_WEIGHTS,
            classes=training_classes(cfg),
        )

    def build_hooks(self) -> List[Optional[hooks.HookBase]]:
        """:meth:`RunTrainer.build_hooks`, with detectron2's ``PreciseBN`` after the schedule when
        TEST.PRECISE_BN.ENABLED and the model has BatchNorm layers (its loader without workers, as detectron2's)."""
        hook_list = super().build_hooks()
        if self.cfg.TEST.PRECISE_BN.ENABLED and get_bn_modules(self.model):
            cfg = self.cfg.clone()
            cfg.defrost()
            cfg.DATALOADER.NUM_WORKERS = 0
            loader = self.build_train_loader(cfg)
            precise_bn = hooks.PreciseBN(cfg.TEST.EVAL_PERIOD, self.model, loader, cfg.TEST.PRECISE_BN.NUM_ITER)
            position = next(i for i, hook in enumerate(hook_list) if isinstance(hook, hooks.LRScheduler))
            hook_list.insert(position + 1, precise_bn)
        return hook_list

    def train(self) -> Optional[Dict[str, Any]]:
        """detectron2's ``DefaultTrainer.train``: the results of the last evaluation when TEST.EXPECTED_RESULTS is
        set, after verifying them."""
        return DefaultTrainer.train(self)

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
        """detectron2's test loader with the aLRP mapper, whose workers die with this process, of the first
        TEST.MAX_IMAGES images of the dataset (0: all; :func:`first_images_dataset`)."""
        mapper = ImageErrorGuard(build_alrp_mapper(cfg, is_train=False), training=False)
        evaluated = first_images_dataset(dataset_name, cfg.TEST.MAX_IMAGES, "TEST.MAX_IMAGES")
        return workers_die_with_parent(build_detection_test_loader(cfg, evaluated, mapper=mapper))

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
        """The LRP evaluator of the images the test loader reads, the first TEST.MAX_IMAGES of the dataset, by its
        ``evaluator_type`` (:func:`lrp_evaluator`: LVIS, COCO panoptic, COCO; keypoints' OKS with
        TEST.KEYPOINT_OKS_SIGMAS, COCO's person sigmas when empty). LVIS and panoptic evaluate whole datasets only."""
        output_dir = output_folder or f"{cfg.OUTPUT_DIR}/inference"
        evaluated = first_images_dataset(dataset_name, cfg.TEST.MAX_IMAGES, "TEST.MAX_IMAGES", log=False)
        return lrp_evaluator(evaluated, output_dir, cfg.TEST.KEYPOINT_OKS_SIGMAS, model_record)
