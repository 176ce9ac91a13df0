"""--resume with another loss or criterion than the checkpoint's is an error naming both (LossRecordHook); the same
config resumes."""

from __future__ import annotations

import pytest

from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.loss_record import LossChangedError, describe_losses

from .small_shapes import register_small_shapes
from .tiny_configs import tiny_retinanet_cfg


def config(output_dir: str, train: str, **alrp):
    cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml", **alrp)
    cfg.MODEL.RETINANET.NUM_CLASSES = 5
    cfg.MODEL.RETINANET.NORM = cfg.MODEL.FPN.NORM = ""
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (train,), ()
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.MAX_ITER, cfg.SOLVER.STEPS, cfg.SOLVER.CHECKPOINT_PERIOD = 2, 1, (), 1
    cfg.SEED, cfg.OUTPUT_DIR = 3, output_dir
    return cfg


def test_resuming_with_another_criterion_is_refused_naming_both(tmp_path):
    train, _ = register_small_shapes(str(tmp_path / "data"), "loss_record", {"train": 2, "val": 1})
    output_dir = str(tmp_path / "run")
    trainer = AlrpTrainer(config(output_dir, train))
    trainer.resume_or_load(resume=False)
    trainer.train()
    assert "AlrpCriterion" in describe_losses(trainer.model)["ranking_loss"]

    AlrpTrainer(config(output_dir, train)).resume_or_load(resume=True)  # the same loss: resumed
    changed = AlrpTrainer(config(output_dir, train, CRITERION="APCriterion"))
    with pytest.raises(
        LossChangedError, match="was trained with .*AlrpCriterion.* config gives .*APCriterion"
    ) as error:
        changed.resume_or_load(resume=True)
    assert "MODEL.WEIGHTS" in str(error.value) and "model_final.pth" in str(error.value)
