"""SEED < 0 (detectron2's default) gives every run its own sample stream, whose seed the
checkpoints carry (DataPositionHook's state), so that a resumed run continues the same stream."""

from __future__ import annotations

from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances

from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths
from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.trainer import DataPositionHook

from .tiny_configs import tiny_retinanet_cfg

DATASET = "test_run_seed_shapes"


def training_cfg(tmp_path, seed: int):
    if DATASET not in DatasetCatalog:
        root = str(tmp_path / "datasets")
        prepare_shapes_dataset(root, num_images={"train": 12})
        register_coco_instances(DATASET, {}, *shapes_paths(root, "train"))
    cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    cfg.DATASETS.TRAIN = (DATASET,)
    cfg.MODEL.RETINANET.NUM_CLASSES = 5  # the shapes classes
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.SOLVER.IMS_PER_BATCH = 2
    cfg.SEED = seed
    return cfg


def first_batch_files(loader) -> list:
    return [d["file_name"] for d in next(iter(loader))]


def test_fixed_seed_is_the_stream_seed(tmp_path):
    loader = AlrpTrainer.build_train_loader(training_cfg(tmp_path, seed=5))
    assert loader.batch_sampler.seed == 5


def test_negative_seed_draws_a_seed_per_run_that_the_checkpoint_restores(tmp_path):
    cfg = training_cfg(tmp_path, seed=-1)
    first, second = AlrpTrainer.build_train_loader(cfg), AlrpTrainer.build_train_loader(cfg)
    assert first.batch_sampler.seed >= 0 and first.batch_sampler.seed != second.batch_sampler.seed
    DataPositionHook(second.batch_sampler).load_state_dict(DataPositionHook(first.batch_sampler).state_dict())
    assert second.batch_sampler.seed == first.batch_sampler.seed
    assert first_batch_files(second) == first_batch_files(first)
