#!/usr/bin/env python3
"""Train and evaluate detectors with aLRP Loss (detectron2 project script).

    python train_net.py --config-file configs/alrp_R50_500.yaml --num-gpus 4
    python train_net.py --config-file configs/alrp_R50_500.yaml --eval-only MODEL.WEIGHTS model_final.pth
    python train_net.py --config-file configs/quickstart/alrp_retinanet_shapes.yaml   # CPU, minutes
    python train_net.py --config-file configs/quickstart/alrp_retinanet_shapes.yaml \
        --dataset my_train train.json images/ --dataset my_val val.json images/ \
        DATASETS.TRAIN '("my_train",)' DATASETS.TEST '("my_val",)' MODEL.RETINANET.NUM_CLASSES 3

On a machine without GPUs, ``--num-gpus N`` runs N CPU workers that communicate with gloo.
``--dataset NAME ANNOTATIONS_JSON IMAGE_DIR`` (repeatable) registers a COCO-format dataset; its
number of categories must equal the model's number of classes. ``--resume`` continues the run of
OUTPUT_DIR exactly (README, "Resume").
"""

from __future__ import annotations

import argparse

from detectron2.config import CfgNode
from detectron2.engine import default_argument_parser, default_setup, launch
from detectron2.evaluation import verify_results
from detectron2.utils import comm

from alrp_d2.checkpoint import AlrpCheckpointer
from alrp_d2.config import setup_cfg
from alrp_d2.data import SHAPES_DATASETS, register_shapes_datasets
from alrp_d2.data.user_datasets import add_dataset_argument, check_num_classes, register_user_datasets
from alrp_d2.engine import AlrpTrainer


def prepare_datasets(cfg: CfgNode, args: argparse.Namespace) -> None:
    """Registers the ``--dataset`` datasets (checking their number of classes) and generates the
    synthetic dataset when the config uses it; run before the workers start and in each worker."""
    check_num_classes(cfg, register_user_datasets(getattr(args, "dataset", None) or []))
    if set(cfg.DATASETS.TRAIN + cfg.DATASETS.TEST) & set(SHAPES_DATASETS):
        register_shapes_datasets()


def main(args: argparse.Namespace):
    cfg = setup_cfg(args.config_file, args.opts)
    cfg.freeze()
    default_setup(cfg, args)
    prepare_datasets(cfg, args)

    if args.eval_only:
        model = AlrpTrainer.build_model(cfg)
        AlrpCheckpointer(model, save_dir=cfg.OUTPUT_DIR, allow_partial=cfg.MODEL.ALLOW_PARTIAL_WEIGHTS).resume_or_load(
            cfg.MODEL.WEIGHTS, resume=args.resume
        )
        results = AlrpTrainer.test(cfg, model)
        if comm.is_main_process():
            verify_results(cfg, results)
        return results

    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=args.resume)
    return trainer.train()


def get_parser() -> argparse.ArgumentParser:
    """detectron2's training arguments plus ``--dataset``."""
    parser = default_argument_parser(epilog=__doc__)
    add_dataset_argument(parser)
    return parser


if __name__ == "__main__":
    arguments = get_parser().parse_args()
    print("Command Line Args:", arguments)
    prepare_datasets(setup_cfg(arguments.config_file, arguments.opts), arguments)
    launch(
        main,
        arguments.num_gpus,
        num_machines=arguments.num_machines,
        machine_rank=arguments.machine_rank,
        dist_url=arguments.dist_url,
        args=(arguments,),
    )
