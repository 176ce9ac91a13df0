"""A LazyConfig run (a ``.py`` config through train_net.py): loading with checked ``key=value`` overrides, the
datasets and their class checks, the resumable training loader, evaluation, and the :class:`TrainingRun` it gives
the one trainer of YAML and LazyConfig runs (:class:`RunTrainer`, ``alrp_d2/engine/trainer.py``): per-step seeds
(exact resume), self-balance, the collapse check, atomic checkpoints with fallback and safe loading, AMP and the
writers of :func:`~alrp_d2.engine.writers.alrp_writers`.

The fields are detectron2's (``configs/common/train.py`` and ``tools/lazyconfig_train_net.py``): ``model``,
``dataloader.train`` / ``test`` / ``evaluator``, ``optimizer``, ``lr_multiplier`` and ``train`` (``output_dir``,
``init_checkpoint``, ``max_iter``, ``amp.enabled``, ``ddp``, ``checkpointer``, ``eval_period``, ``log_period``,
``device``, ``seed``). ``train`` may also hold the project's keys (:data:`TRAIN_DEFAULTS`). The ranking of every
head (``ranking="global"``) and its criterion are arguments of the heads' ``HeadRankingLoss``.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from detectron2.config import LazyCall as L
from detectron2.config import LazyConfig, instantiate
from detectron2.data import build_detection_train_loader, get_detection_dataset_dicts
from detectron2.engine import create_ddp_model, default_setup
from detectron2.evaluation import DatasetEvaluators, inference_on_dataset, print_csv_format
from detectron2.utils import comm
from detectron2.utils.registry import locate
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..checkpoint import LAST_CHECKPOINT, weights_fingerprint
from ..checks.errors import ConfigError, one_line, require_integer
from ..config.lazy_fields import TRAIN_DEFAULTS, lazy_calls, lazy_dataset_names, train_option
from ..data import SHAPES_DATASETS, register_shapes_datasets
from ..data.dataset_classes import DatasetClasses, check_classes, dataset_classes
from ..data.evaluated_images import first_images_dataset
from ..data.image_errors import ImageErrorGuard
from ..data.samplers import build_resumable_train_loader
from ..data.training_filter import require_objects
from ..data.user_datasets import register_user_datasets
from ..evaluation import COCOLRPEvaluator
from .buffer_sync import broadcast_buffers_from_main
from .lazy_checks import check_image_formats, check_lazy_machines_agree, check_lazy_segmentations
from .lazy_overrides import apply_checked_overrides
from .trainer import RunTrainer, TrainingRun, ddp_arguments, evaluate_checkpoint

__all__ = [
    "is_lazy_config",
    "check_lazy_launch",
    "follow_the_machine",
    "lazy_main",
    "lazy_num_classes",
    "lazy_test",
    "lazy_training_run",
    "load_lazy_config",
    "run_lazy_config",
    "prepare_lazy_datasets",
]

logger = logging.getLogger(__name__)

EVAL_MAX_IMAGES_KEY = "train.eval_max_images"
#: Where a LazyConfig model keeps its number of classes, in the order they are looked up.
NUM_CLASSES_KEYS = ("model.roi_heads.num_classes", "model.num_classes")


def is_lazy_config(path: str) -> bool:
    """Whether ``path`` is a LazyConfig (a Python file) rather than a YAML config."""
    return path.endswith(".py")


def load_lazy_config(path: str, overrides: Sequence[str] = ()) -> DictConfig:
    """detectron2's ``LazyConfig.load`` and ``apply_overrides`` (``key=value``), checked: each override names a
    known key and keeps its value's kind (:func:`apply_checked_overrides`), the fields the trainer reads exist, the
    periods are positive integers and the model takes its mappers' channel order (:func:`check_image_formats`)."""
    try:
        loaded = LazyConfig.load(path)
    except OSError as error:
        raise ConfigError(f"{path}: {one_line(error)}") from error
    except SyntaxError as error:  # detectron2's, from the file's own
        cause = error.__cause__ if isinstance(error.__cause__, SyntaxError) else error
        raise ConfigError(f"{path}: a syntax error ({cause.msg}, line {cause.lineno})") from cause
    cfg = apply_checked_overrides(loaded, overrides, path, extra_train_keys=TRAIN_DEFAULTS)
    for field in ("model", "train", "dataloader"):
        if field not in cfg:
            raise ConfigError(f"{path}: a LazyConfig for train_net.py needs a top-level {field!r}")
    for key in ("max_iter", "log_period", "checkpointer.period"):
        value = OmegaConf.select(cfg.train, key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ConfigError(f"{path}: train.{key} must be an integer >= 1, got {value!r}")
    period = train_option(cfg, "self_balance_period")
    if not (isinstance(period, int) and period >= 0):
        raise ConfigError(f"{path}: train.self_balance_period must be an integer >= 0 (0: one epoch), got {period!r}")
    eval_max_images(cfg)
    check_image_formats(cfg, path)
    return cfg


def eval_max_images(cfg: DictConfig) -> int:
    """``train.eval_max_images``: an integer >= 0 (0, None or ``null``: every image), else a ValueError naming it."""
    value = train_option(cfg, "eval_max_images")
    value = 0 if value in (None, "None") else value  # detectron2's key=value override keeps "None" a string
    require_integer(EVAL_MAX_IMAGES_KEY, value, 0, " (0 or None: all images)")
    return value


def lazy_num_classes(cfg: DictConfig) -> Tuple[str, int]:
    """The config key of the model's number of classes (:data:`NUM_CLASSES_KEYS`) and its value."""
    for key in NUM_CLASSES_KEYS:
        value = OmegaConf.select(cfg, key)
        if isinstance(value, int):
            return key, value
    raise ValueError(f"the LazyConfig model has no number of classes at any of {NUM_CLASSES_KEYS}")


def prepare_lazy_datasets(cfg: DictConfig, args: argparse.Namespace) -> None:
    """As train_net.py's ``prepare_datasets``: registers the ``--dataset`` datasets and, when the config uses it,
    the synthetic dataset, and checks the classes of the datasets of ``dataloader.train`` (not with ``--eval-only``:
    the weights' classes are those their checkpoint records) and ``dataloader.test`` against the model's and, for a
    mask model, their segmentations; run before the workers start and in each worker."""
    train, test = lazy_dataset_names(cfg, "train"), lazy_dataset_names(cfg, "test")
    register_user_datasets(getattr(args, "dataset", None) or [], evaluated=test)
    if set(train + test) & set(SHAPES_DATASETS):
        register_shapes_datasets()
    key, expected = lazy_num_classes(cfg)
    checked_train = [] if getattr(args, "eval_only", False) else train
    check_classes({"dataloader.train": checked_train, "dataloader.test": test}, key, expected, assign="=")
    check_lazy_segmentations(cfg, train + test)


def follow_the_machine(cfg: DictConfig) -> None:
    """``train.device`` "cuda" (detectron2's ``common/train.py`` default) on a machine without a CUDA device becomes
    "cpu", with a log line: detectron2's recipes run on a CPU as they are."""
    device = cfg.train.get("device", "cuda")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        logger.info("train.device=%r but this machine has no CUDA device: the model runs on the CPU", device)
        cfg.train.device = "cpu"


def check_lazy_eval_only_weights(cfg: DictConfig, args: argparse.Namespace) -> None:
    """``--eval-only`` needs train.init_checkpoint, or ``--resume`` with a checkpoint in train.output_dir."""
    if not args.eval_only or cfg.train.init_checkpoint:
        return
    if args.resume and os.path.isfile(os.path.join(cfg.train.output_dir, LAST_CHECKPOINT)):
        return
    raise ValueError(
        "--eval-only needs trained weights but train.init_checkpoint is empty"
        + ("" if args.resume else " (and --resume is not given)")
        + f" and {cfg.train.output_dir} has no {LAST_CHECKPOINT}: add train.init_checkpoint=path/to/model_final.pth"
    )


def build_lazy_train_loader(cfg: DictConfig) -> Tuple[Any, int]:
    """The training loader and its number of images. detectron2's ``build_detection_train_loader`` without a
    sampler (the loader of its configs) becomes :func:`build_resumable_train_loader` of the same dataset, mapper,
    batch size, grouping and workers, whose stream a resumed run continues; any other loader is built as it is,
    with a warning that a resumed run restarts its stream. The mapper is wrapped by :class:`ImageErrorGuard`."""
    loader = cfg.dataloader.train
    if loader.get("_target_") is not build_detection_train_loader or loader.get("sampler") is not None:
        logger.warning("dataloader.train is not detectron2's build_detection_train_loader without a sampler: a resumed "
                       "run restarts its sample stream (exact resume needs the resumable loader)")  # fmt: skip
        return instantiate(loader), 0
    dataset = instantiate(loader.dataset)
    require_objects(dataset, "dataloader.train", lazy_dataset_names(cfg, "train"))
    mapper = ImageErrorGuard(instantiate(loader.mapper), skip=train_option(cfg, "skip_unreadable_images"))
    seed = train_option(cfg, "seed")
    seed = seed if seed >= 0 else comm.shared_random_seed()
    train_loader = build_resumable_train_loader(
        dataset,
        mapper,
        loader.total_batch_size,
        seed,
        loader.get("aspect_ratio_grouping", True),
        loader.get("num_workers", 0),
    )
    return train_loader, len(dataset)


def build_lazy_evaluator(cfg: DictConfig, model: nn.Module, evaluated: Dict[str, str]) -> Any:
    """``dataloader.evaluator`` of the datasets the test loader reads (``evaluated``: each test dataset's name ->
    the name of the dataset of its evaluated images, :func:`evaluated_datasets`); a list of evaluators (detectron2's
    panoptic LazyConfigs: COCO, semantic and panoptic) is each of them in ``DatasetEvaluators``. A
    :class:`COCOLRPEvaluator` records the evaluated model (its class and :func:`weights_fingerprint`) in its
    threshold files, as the YAML path's."""
    node = cfg.dataloader.evaluator
    if not isinstance(node, ListConfig):
        return _lazy_evaluator(node, model, evaluated, eval_max_images(cfg))
    return DatasetEvaluators([_lazy_evaluator(one, model, evaluated, eval_max_images(cfg)) for one in node])


def _lazy_evaluator(node: DictConfig, model: nn.Module, evaluated: Dict[str, str], max_images: Any) -> Any:
    """One evaluator of ``dataloader.evaluator`` (:func:`build_lazy_evaluator`) on the ``evaluated`` datasets."""
    evaluator = copy.deepcopy(node)
    if any(name != subset for name, subset in evaluated.items()):
        names = evaluator.get("dataset_name")
        if not (isinstance(names, str) and names in evaluated):
            raise ValueError(
                f"{EVAL_MAX_IMAGES_KEY}={max_images} evaluates a subset of dataloader.test's datasets "
                f"{list(evaluated)}, but dataloader.evaluator has no dataset_name among them (got {names!r}): set "
                f'dataloader.evaluator.dataset_name="${{..test.dataset.names}}" or {EVAL_MAX_IMAGES_KEY}=0'
            )
        evaluator.dataset_name = evaluated[names]
    target = evaluator.get("_target_")
    if isinstance(target, str):
        target = locate(target)
    if isinstance(target, type) and issubclass(target, COCOLRPEvaluator):
        module = model.module if isinstance(model, DistributedDataParallel) else model
        evaluator.model_record = {"architecture": type(module).__name__, "weights_sha256": weights_fingerprint(model)}
    return instantiate(evaluator)


def evaluated_datasets(cfg: DictConfig) -> Dict[str, str]:
    """Each dataset of ``dataloader.test`` -> the dataset of the images evaluated: the first
    ``train.eval_max_images`` (:func:`first_images_dataset`; itself when 0, None or the whole dataset)."""
    max_images = eval_max_images(cfg)
    names = lazy_dataset_names(cfg, "test")
    if max_images and not names:
        raise ValueError(
            f"{EVAL_MAX_IMAGES_KEY}={max_images} needs dataloader.test's dataset to be detectron2's "
            "get_detection_dataset_dicts (names=...): this dataloader.test has none"
        )
    return {name: first_images_dataset(name, max_images, EVAL_MAX_IMAGES_KEY) for name in names}


def guarded_test_loader(cfg: DictConfig, evaluated: Dict[str, str]) -> DictConfig:
    """``dataloader.test`` of the ``evaluated`` datasets (:func:`evaluated_datasets`) whose mapper (when it has one)
    is wrapped by :class:`ImageErrorGuard` for evaluation, as the YAML path's: errors name the image (unreadable,
    more than 8 bits, an aspect ratio its resize cannot take)."""
    loader = copy.deepcopy(cfg.dataloader.test)
    for call in lazy_calls(loader, get_detection_dataset_dicts):
        names = call.names
        call.names = evaluated[names] if isinstance(names, str) else [evaluated[name] for name in names]
    if loader.get("mapper") is not None:  # resolved where it is: its interpolations are relative to dataloader.test
        mapper = OmegaConf.to_container(cfg.dataloader.test.mapper, resolve=True)
        loader.mapper = L(ImageErrorGuard)(mapper=mapper, training=False)
    return loader


def lazy_test(cfg: DictConfig, model: nn.Module) -> Dict[str, Any]:
    """``dataloader.evaluator`` on ``dataloader.test`` (nothing without an evaluator, or with
    ``dataloader.evaluator=None`` or ``=null``; the first ``train.eval_max_images`` images of each dataset,
    :func:`evaluated_datasets`), after the class checks, with the main process's buffers in every
    worker (:func:`broadcast_buffers_from_main`: the metrics are those of the saved model)."""
    if cfg.dataloader.get("evaluator") in (None, "None"):  # detectron2's key=value override keeps "None" a string
        return {}
    broadcast_buffers_from_main(model)
    key, expected = lazy_num_classes(cfg)
    check_classes({"dataloader.test": lazy_dataset_names(cfg, "test")}, key, expected, assign="=")
    evaluated = evaluated_datasets(cfg)
    loader = instantiate(guarded_test_loader(cfg, evaluated))
    results = inference_on_dataset(model, loader, build_lazy_evaluator(cfg, model, evaluated))
    if comm.is_main_process():
        print_csv_format(results)
    return results


def _training_classes(cfg: DictConfig) -> Optional[DatasetClasses]:
    """The classes the model trains on, recorded in its checkpoints: those of ``dataloader.train``'s first dataset
    (all have the same, :func:`prepare_lazy_datasets`), None when it declares none or has no name."""
    names = lazy_dataset_names(cfg, "train")
    return dataset_classes(names[0]) if names else None


def _self_balance_period(cfg: DictConfig, num_images: int) -> int:
    period = train_option(cfg, "self_balance_period")
    if period:
        return period
    if not num_images:
        raise ValueError("train.self_balance_period 0 (one epoch) needs the resumable loader: set it in iterations")
    return max(1, math.ceil(num_images / cfg.dataloader.train.total_batch_size))


def lazy_training_run(cfg: DictConfig) -> TrainingRun:
    """The :class:`TrainingRun` of a LazyConfig, built as detectron2's ``lazyconfig_train_net.py`` builds it (model
    on ``train.device``, optimizer, training loader, ``lr_multiplier``) with the project's loader
    (:func:`build_lazy_train_loader`), evaluation (:func:`lazy_test`) and ``train`` keys (:data:`TRAIN_DEFAULTS`)."""
    model = instantiate(cfg.model)
    logger.info("Model:\n%s", model)
    model.to(cfg.train.device)
    cfg.optimizer.params.model = model
    optimizer = instantiate(cfg.optimizer)
    train_loader, num_images = build_lazy_train_loader(cfg)
    return TrainingRun(
        model=model,
        optimizer=optimizer,
        data_loader=train_loader,
        lr_scheduler=instantiate(cfg.lr_multiplier),
        test=lambda trained: lazy_test(cfg, trained),
        output_dir=cfg.train.output_dir,
        weights=cfg.train.init_checkpoint,
        max_iter=cfg.train.max_iter,
        device=cfg.train.device,
        checkpoint_period=cfg.train.checkpointer.period,
        eval_period=cfg.train.eval_period,
        log_period=cfg.train.log_period,
        self_balance_period=lambda: _self_balance_period(cfg, num_images),
        amp=cfg.train.amp.enabled,
        ddp=dict(cfg.train.ddp),
        max_checkpoints=cfg.train.checkpointer.get("max_to_keep"),
        allow_partial_weights=train_option(cfg, "allow_partial_weights"),
        classes=_training_classes(cfg),
        lazy_config=True,
    )


def run_lazy_config(args: argparse.Namespace, cfg: DictConfig) -> Dict[str, Any]:
    """Trains (``--resume``: continues the run of train.output_dir exactly) with the :class:`RunTrainer` of YAML
    runs or, with ``--eval-only``, evaluates the weights of train.init_checkpoint (or with ``--resume`` the last
    checkpoint of train.output_dir) with :func:`evaluate_checkpoint`; on the CPU when train.device is "cuda" and the
    machine has none (:func:`follow_the_machine`)."""
    follow_the_machine(cfg)
    prepare_lazy_datasets(cfg, args)
    check_lazy_eval_only_weights(cfg, args)
    if args.eval_only:
        model = instantiate(cfg.model)
        model.to(cfg.train.device)
        ddp = ddp_arguments(cfg.train.device, dict(cfg.train.ddp))
        return evaluate_checkpoint(
            model,
            cfg.train.output_dir,
            cfg.train.init_checkpoint,
            args.resume,
            lambda loaded: lazy_test(cfg, create_ddp_model(loaded, **ddp)),
            [dataset_classes(name) for name in lazy_dataset_names(cfg, "test")],
            allow_partial=train_option(cfg, "allow_partial_weights"),
        )
    trainer = RunTrainer(lazy_training_run(cfg))
    trainer.resume_or_load(resume=args.resume)
    trainer.train()
    return {}


def lazy_main(args: argparse.Namespace) -> Dict[str, Any]:
    """train_net.py's ``main`` for a LazyConfig, in every worker: the config with the ``key=value`` overrides of
    ``args.opts``, the same config and ``--dataset`` files on every process (:func:`check_lazy_machines_agree`),
    detectron2's ``default_setup`` (logs, config.yaml, seeds) and
    :func:`run_lazy_config`."""
    cfg = load_lazy_config(args.config_file, args.opts)
    check_lazy_machines_agree(cfg, args)
    follow_the_machine(cfg)
    default_setup(cfg, args)
    return run_lazy_config(args, cfg)


def check_lazy_launch(args: argparse.Namespace) -> None:
    """The checks train_net.py runs before it starts the workers: the config loads, its datasets register and
    have the model's classes, and ``--eval-only`` has weights."""
    cfg = load_lazy_config(args.config_file, args.opts)
    prepare_lazy_datasets(cfg, args)
    check_lazy_eval_only_weights(cfg, args)
