#!/usr/bin/env python3
# ruff: noqa: E402  (the warning filters below come before detectron2 is imported)
"""Train and evaluate detectors with aLRP Loss (detectron2 project script).

    python train_net.py --config-file configs/alrp_R50_500.yaml --num-gpus 4
    python train_net.py --config-file configs/alrp_R50_500.yaml --eval-only MODEL.WEIGHTS model_final.pth
    python train_net.py --config-file configs/quickstart/alrp_retinanet_shapes.yaml   # CPU, minutes
    python train_net.py --config-file configs/quickstart/alrp_retinanet_shapes.yaml \
        --dataset my_train train.json images/ --dataset my_val val.json images/ \
        DATASETS.TRAIN '("my_train",)' DATASETS.TEST '("my_val",)' MODEL.RETINANET.NUM_CLASSES 3

On a machine without GPUs, ``--num-gpus N`` runs N CPU workers that communicate with gloo.
``--import MODULE`` (repeatable: a module name or a .py file) imports a module of yours, e.g. one that registers a
ranking criterion, in this process and in every worker.
``--dataset NAME ANNOTATIONS_JSON IMAGE_DIR`` (repeatable) registers a COCO-format dataset after
validating its JSON; the classes of every dataset of DATASETS.TRAIN / TEST must be the model's and
the same for all. ``--resume`` continues the run of OUTPUT_DIR exactly (docs/getting_started.md, "Resume").
``--eval-only`` needs weights (MODEL.WEIGHTS, or --resume with a checkpoint in OUTPUT_DIR).
``--allow-unsafe-config`` loads a config whose YAML tags construct Python objects (trusted files only).
In a distributed run every process compares its config and ``--dataset`` files with the others' at
start-up (they stop naming the keys that differ), and a machine that never starts or a rank that
dies or stops ends the run after ``--dist-timeout`` seconds (default 600); loader workers die with
their rank.
A ``.py`` config is a detectron2 LazyConfig, with ``key=value`` overrides (docs/lazyconfig.md):

    python train_net.py --config-file configs/quickstart/alrp_retinanet_shapes.py train.max_iter=100
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

from alrp_d2.known_warnings import ignore_third_party_deprecations

ignore_third_party_deprecations()  # before detectron2 is imported

from detectron2.config import CfgNode
from detectron2.engine import default_argument_parser, default_setup, launch
from detectron2.evaluation import verify_results
from detectron2.utils import comm
from detectron2.utils.logger import setup_logger

from alrp_d2.checkpoint import LAST_CHECKPOINT
from alrp_d2.checks.argument_types import dist_timeout_seconds
from alrp_d2.checks.errors import ArgumentError, ConfigError, one_line
from alrp_d2.config import setup_cfg
from alrp_d2.data import SHAPES_DATASETS, register_shapes_datasets
from alrp_d2.data.dataset_classes import check_dataset_classes, dataset_classes
from alrp_d2.data.dataset_segmentations import check_dataset_segmentations
from alrp_d2.data.user_datasets import add_dataset_argument, register_user_datasets
from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.lazy_run import check_lazy_launch, is_lazy_config, lazy_main
from alrp_d2.engine.machine_agreement import check_machines_agree, run_description
from alrp_d2.engine.trainer import evaluate_checkpoint
from alrp_d2.user_modules import add_import_argument, import_user_modules

#: --dist-timeout's default: a distributed run whose machine never starts, or whose rank dies or stops, ends after
#: this many seconds instead of detectron2's 30 minutes. Longer than any work of one rank while the others wait
#: (rank 0's COCO evaluation of the test set).
DEFAULT_DIST_TIMEOUT_S = 600
#: The refusals of a config that the command reports in one line with exit status 2.
REFUSED_CONFIG = (ConfigError, ArgumentError)


def prepare_datasets(cfg: CfgNode, args: argparse.Namespace) -> None:
    """Validates and registers the ``--dataset`` datasets, generates the synthetic dataset when the
    config uses it and checks the classes of every dataset of the config (with ``--eval-only``, of
    DATASETS.TEST alone: the weights' classes are those their checkpoint records) and, for a mask
    model, their segmentations; run before the workers start and in each worker."""
    register_user_datasets(getattr(args, "dataset", None) or [], evaluated=cfg.DATASETS.TEST)
    if set(cfg.DATASETS.TRAIN + cfg.DATASETS.TEST) & set(SHAPES_DATASETS):
        register_shapes_datasets()
    check_dataset_classes(cfg, include_train=not getattr(args, "eval_only", False))
    check_dataset_segmentations(cfg)


def check_eval_only_weights(cfg: CfgNode, args: argparse.Namespace) -> None:
    """``--eval-only`` evaluates trained weights: MODEL.WEIGHTS, or the checkpoint of OUTPUT_DIR with
    ``--resume``; without either it would evaluate a randomly initialised model."""
    if not args.eval_only or cfg.MODEL.WEIGHTS:
        return
    if args.resume and os.path.isfile(os.path.join(cfg.OUTPUT_DIR, LAST_CHECKPOINT)):
        return
    raise ValueError(
        "--eval-only needs trained weights but MODEL.WEIGHTS is empty"
        + ("" if args.resume else " (and --resume is not given)")
        + f" and {cfg.OUTPUT_DIR} has no {LAST_CHECKPOINT}: add MODEL.WEIGHTS path/to/model_final.pth"
    )


def main(args: argparse.Namespace):
    if comm.get_world_size() > 1:  # a spawned worker: alrp_d2's log records on rank 0's stdout, as the launcher's
        setup_logger(distributed_rank=comm.get_rank(), name="alrp_d2")
    import_user_modules(getattr(args, "imports", None) or [])
    if is_lazy_config(args.config_file):
        return lazy_main(args)
    cfg = setup_cfg(args.config_file, args.opts, allow_unsafe=getattr(args, "allow_unsafe_config", False))
    timeout = timedelta(seconds=getattr(args, "dist_timeout", DEFAULT_DIST_TIMEOUT_S))
    check_machines_agree(run_description(cfg, getattr(args, "dataset", None) or []), timeout)
    cfg.freeze()
    default_setup(cfg, args)
    prepare_datasets(cfg, args)
    check_eval_only_weights(cfg, args)

    if args.eval_only:
        results = evaluate_checkpoint(
            AlrpTrainer.build_model(cfg),
            cfg.OUTPUT_DIR,
            cfg.MODEL.WEIGHTS,
            args.resume,
            lambda model: AlrpTrainer.test(cfg, model),
            [dataset_classes(name) for name in cfg.DATASETS.TEST],
            allow_partial=cfg.MODEL.ALLOW_PARTIAL_WEIGHTS,
        )
        if comm.is_main_process():
            verify_results(cfg, results)
        return results

    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=args.resume)
    return trainer.train()


def get_parser() -> argparse.ArgumentParser:
    """detectron2's training arguments plus ``--dataset``, ``--import``, ``--allow-unsafe-config`` and
    ``--dist-timeout``."""
    parser = default_argument_parser(epilog=__doc__)
    add_dataset_argument(parser)
    add_import_argument(parser)
    parser.add_argument(
        "--allow-unsafe-config",
        action="store_true",
        help="load a config whose YAML tags construct Python objects (runs code from the file: trusted files only)",
    )
    parser.add_argument(
        "--dist-timeout",
        type=dist_timeout_seconds,
        default=DEFAULT_DIST_TIMEOUT_S,
        metavar="SECONDS",
        help="a distributed run ends with an error when a machine has not started or a rank has not answered for "
        f"this long (default {DEFAULT_DIST_TIMEOUT_S}: 10 minutes; raise it when rank 0's evaluation takes longer; "
        "at most a week)",
    )
    return parser


def run(arguments: argparse.Namespace) -> int:
    """The command: the config checked before the workers start, then :func:`main` in each worker. A refused config
    (a key, a file, an override, a constructor's argument: :data:`REFUSED_CONFIG`) ends it with one line on stderr
    and exit status 2, as ``python -m alrp_d2.lrp`` refuses its files; in a one-process run, also when the model or
    the training set is refused while the run is built."""
    setup_logger(name="alrp_d2")  # e.g. while the shapes dataset is generated, before the workers start
    try:
        import_user_modules(arguments.imports)
        if is_lazy_config(arguments.config_file):
            check_lazy_launch(arguments)
        else:
            cfg = setup_cfg(arguments.config_file, arguments.opts, allow_unsafe=arguments.allow_unsafe_config)
            prepare_datasets(cfg, arguments)
            check_eval_only_weights(cfg, arguments)
        launch(
            main,
            arguments.num_gpus,
            num_machines=arguments.num_machines,
            machine_rank=arguments.machine_rank,
            dist_url=arguments.dist_url,
            args=(arguments,),
            timeout=timedelta(seconds=arguments.dist_timeout),
        )
    except REFUSED_CONFIG as error:
        print(f"train_net.py: {one_line(error)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    arguments = get_parser().parse_args()
    print("Command Line Args:", arguments)
    sys.exit(run(arguments))
