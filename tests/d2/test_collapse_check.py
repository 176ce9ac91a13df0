"""A run that stops learning says so (CollapseCheckHook): every loss exactly 0 is an error within two iterations,
a head that ranks no positive or a sample count at 0 a warning and a metric; and the case that showed it, detectron2's
Mask R-CNN switched to Rank & Sort Loss trained from random initialisation, stops instead of reporting zeros."""

from __future__ import annotations

import argparse
import json
import logging
from types import SimpleNamespace
from typing import Dict

import pytest
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.utils.env import seed_all_rng
from detectron2.utils.events import EventStorage

from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths
from alrp_d2.engine import AlrpTrainer, CollapseCheckHook, TrainingCollapsedError
from alrp_d2.engine.collapse_check import OBJECTS_KEY, ObjectCountingLoader, collapse_advice
from alrp_d2.engine.lazy_run import load_lazy_config, run_lazy_config

from .lazy_switches import write_switched_config
from .tiny_configs import instances, tiny_retinanet_cfg


def run_steps(hook: CollapseCheckHook, steps: list) -> EventStorage:
    """Feeds the hook one storage record per step, as the trainer and the heads put them."""
    storage = EventStorage()
    hook.trainer = SimpleNamespace(storage=storage, iter=0)
    with storage:
        for iteration, values in enumerate(steps):
            storage.iter = hook.trainer.iter = iteration
            storage.put_scalars(**values)
            hook.after_step()
    return storage


def learning(**changes: float) -> Dict[str, float]:
    values = {
        "loss_rpn_cls": 0.2,
        "loss_box_cls": 1.0,
        "sb/rpn/cls": 1.0,
        "sb/box/cls": 1.0,
        "rpn/num_pos_anchors": 14.0,
        "roi_head/num_bg_samples": 700.0,
    }
    return {**values, **changes}


def test_every_loss_exactly_zero_for_two_iterations_is_an_error_naming_the_keys():
    zero = learning(loss_rpn_cls=0.0, loss_box_cls=0.0)
    with pytest.raises(TrainingCollapsedError, match="up to iteration 2") as error:
        run_steps(CollapseCheckHook(), [learning(), zero, zero, learning()])
    assert isinstance(error.value, FloatingPointError)
    assert "MODEL.WEIGHTS" in str(error.value) and "SOLVER.WARMUP_ITERS" in str(error.value)
    with pytest.raises(TrainingCollapsedError, match="lr_multiplier.warmup_length"):
        run_steps(CollapseCheckHook(lazy=True), [zero, zero])


def test_a_batch_without_objects_is_no_collapse_and_does_not_break_a_real_one():
    """Zero losses of batches without objects are skipped: two of them in a row are no collapse, and a collapse of
    batches with objects is counted across them (iteration 3 is the second batch with objects at 0)."""
    zero = learning(loss_rpn_cls=0.0, loss_box_cls=0.0, **{"sb/box/cls": 0.0, "rpn/num_pos_anchors": 0.0})
    empty = {**zero, OBJECTS_KEY: 0.0}
    storage = run_steps(CollapseCheckHook(), [empty, empty, empty, learning(**{OBJECTS_KEY: 3.0})])
    assert not [name for name in storage.histories() if name.startswith("collapse/")]
    with pytest.raises(TrainingCollapsedError, match="up to iteration 3"):
        run_steps(CollapseCheckHook(), [learning(), {**zero, OBJECTS_KEY: 2.0}, empty, {**zero, OBJECTS_KEY: 1.0}])


def test_the_loader_logs_the_objects_of_each_batch_it_gives():
    """Each batch logs its objects when the trainer takes it; a loader without ``instances`` logs nothing (its steps
    are all checked); the underlying loader's iterator is made when the trainer asks for one."""
    made = []

    class Loader:
        def __iter__(self):
            made.append(True)
            return iter([[{"instances": instances([[0, 0, 5, 5]], [1])}, {"instances": instances([], [])}], [{}]])

    with EventStorage() as storage:
        batches = iter(ObjectCountingLoader(Loader()))
        assert made == [True]
        next(batches)
        assert storage.latest()[OBJECTS_KEY][0] == 1.0
        storage.iter = 1
        next(batches)
        assert storage.latest()[OBJECTS_KEY][1] == 0  # logged at iteration 0 only


def test_the_advice_names_the_keys_of_the_run_s_config_system_and_model():
    assert "MODEL.DETR.PRETRAINED" in collapse_advice(lazy=False, detr=True)
    lazy_detr = collapse_advice(lazy=True, detr=True)
    assert "model.pretrained" in lazy_detr and "model.backbone.bottom_up" not in lazy_detr
    assert "MODEL.RESNETS.NORM" in collapse_advice(lazy=False) and "optimizer.lr" in collapse_advice(lazy=True)


def sparse_shapes(root, name: str, keep: int) -> str:
    """The 8 training images of a shapes set, registered as ``name`` with the annotations of the first ``keep``
    images only (the others have no object)."""
    prepare_shapes_dataset(str(root), num_images={"train": 8, "val": 1})
    json_file, image_root = shapes_paths(str(root), "train")
    content = json.loads(open(json_file).read())
    kept = {image["id"] for image in content["images"][:keep]}
    content["annotations"] = [a for a in content["annotations"] if a["image_id"] in kept]
    sparse = root / "sparse_train.json"
    sparse.write_text(json.dumps(content))
    if name not in DatasetCatalog:
        register_coco_instances(name, {}, str(sparse), image_root)
    return name


def test_a_run_on_mostly_empty_images_trains_to_the_end(tmp_path):
    """6 of 8 training images without objects kept (DATALOADER.FILTER_EMPTY_ANNOTATIONS False): batches without
    objects in a row (all losses 0) do not stop the run."""
    cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    cfg.MODEL.RETINANET.NUM_CLASSES = 5
    cfg.MODEL.RETINANET.NORM = cfg.MODEL.FPN.NORM = ""
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (sparse_shapes(tmp_path, "sparse_shapes_train", keep=2),), ()
    cfg.DATALOADER.FILTER_EMPTY_ANNOTATIONS = False
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.MAX_ITER, cfg.SOLVER.STEPS = 2, 6, ()
    cfg.SOLVER.CHECKPOINT_PERIOD, cfg.SOLVER.LOG_PERIOD = 6, 1
    cfg.SEED, cfg.OUTPUT_DIR = 1, str(tmp_path / "output")
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "output" / "metrics.json").read_text().splitlines()]
    empty = [r["iteration"] for r in records if r[OBJECTS_KEY] == 0 and r["total_loss"] == 0]
    assert any(b == a + 1 for a, b in zip(empty, empty[1:])), records  # two empty batches in a row were trained
    assert records[-1]["iteration"] == cfg.SOLVER.MAX_ITER - 1


def test_one_zero_iteration_is_not_reported():
    zero = learning(loss_rpn_cls=0.0, loss_box_cls=0.0, **{"sb/box/cls": 0.0})
    storage = run_steps(CollapseCheckHook(), [zero, learning(), zero, learning()])
    assert not [name for name in storage.histories() if name.startswith("collapse/")]


def test_no_positive_ranked_or_no_background_warns_once_and_marks_the_metrics(caplog):
    stalled = learning(**{"sb/rpn/cls": 0.0, "roi_head/num_bg_samples": 0.0})
    with caplog.at_level(logging.WARNING, logger="alrp_d2"):
        storage = run_steps(CollapseCheckHook(), [stalled, stalled, stalled, learning(), learning()])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Iteration 1" in warnings[0] and "head 'rpn'" in warnings[0] and "roi_head/num_bg_samples" in warnings[0]
    for key in ("collapse/sb/rpn/cls", "collapse/roi_head/num_bg_samples"):
        assert [iteration for _, iteration in storage.history(key).values()] == [1, 2]


def test_saturated_logits_of_a_head_warn_and_mark_the_metrics(caplog):
    """Every RPN logit at 96 (every score rounds to 1), every box logit at -40 (no score passes a test threshold);
    a spread of logits up to 30 is not saturated."""
    saturated = learning(**{"sb/rpn/logit_min": 96.0, "sb/rpn/logit_max": 97.0, "sb/box/logit_max": -40.0})
    spread = learning(**{"sb/rpn/logit_min": -12.0, "sb/rpn/logit_max": 30.0, "sb/box/logit_max": 2.0})
    with caplog.at_level(logging.WARNING, logger="alrp_d2"):
        storage = run_steps(CollapseCheckHook(), [spread, spread, saturated, saturated, saturated])
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Iteration 3" in warning and "every logit of head 'rpn' >= 17" in warning
    assert "every logit of head 'box' <= -17" in warning and "MODEL.RESNETS.NORM" in warning
    for key in ("collapse/sb/rpn/logit_min", "collapse/sb/box/logit_max"):
        assert [iteration for _, iteration in storage.history(key).values()] == [3, 4]
    assert "collapse/sb/rpn/logit_max" not in storage.histories()


def test_switched_rs_mask_rcnn_from_random_init_stops_within_two_iterations_of_its_collapse(tmp_path):
    """detectron2's Mask R-CNN recipe (FrozenBN, made for ImageNet weights) switched to RS Loss, random init: its
    predicted boxes have IoU 0, RS Loss ranks no positive and every loss is exactly 0 from iteration 2."""
    prepare_shapes_dataset(str(tmp_path), num_images={"train": 4, "val": 1})
    path = write_switched_config(tmp_path / "rs_mask_rcnn.py", "rs_mask_rcnn", max_iter=5)
    cfg = load_lazy_config(str(path), [f"train.output_dir={tmp_path / 'output'}"])
    args = argparse.Namespace(
        dataset=[["switch_train", *shapes_paths(str(tmp_path), "train")]], eval_only=False, resume=False
    )
    seed_all_rng(3)  # the initialisation of train_net.py's default_setup with train.seed 3
    with pytest.raises(TrainingCollapsedError, match="up to iteration 3") as error:
        run_lazy_config(args, cfg)
    assert "model.backbone.bottom_up.stem.norm" in str(error.value)


def test_the_counts_are_saved_and_restored_for_an_exact_resume():
    stalled = learning(**{"sb/rpn/cls": 0.0})
    first = CollapseCheckHook()
    run_steps(first, [stalled])
    resumed = CollapseCheckHook()
    resumed.load_state_dict(first.state_dict())
    storage = run_steps(resumed, [stalled])
    assert [iteration for _, iteration in storage.history("collapse/sb/rpn/cls").values()] == [0]
