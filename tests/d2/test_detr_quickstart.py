"""The RT-DETR quickstart (configs/quickstart/rtdetr_shapes.py) through train_net.py at tiny scale: it trains with
Rank & Sort Loss, evaluates with COCO AP and oLRP, a run resumed from a checkpoint ends with the weights of the
uninterrupted run bit for bit (one intra-op thread), --eval-only evaluates the last checkpoint, ``DefaultPredictor``
with the yacs keys of the same model predicts what the LazyConfig's :class:`LazyPredictor` predicts, --eval-only of
the same model as a YAML config evaluates as the LazyConfig run, demo.py draws with the LazyConfig, and --num-gpus 2
trains with one global ranking."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest
import torch
from detectron2.data.detection_utils import read_image
from detectron2.engine import DefaultPredictor

import demo
from alrp_d2.engine.lazy_run import load_lazy_config
from alrp_d2.evaluation.lazy_predictor import LazyPredictor

from .lazy_runs import final_weights, logged, run_train_net, shapes_dataset_arguments, train_then_resume
from .tiny_detr_detectors import QUICKSTART, quickstart_yacs_config

DEFORMABLE_QUICKSTART = QUICKSTART.replace("rtdetr_shapes.py", "deformable_detr_shapes.py")

pytest.importorskip("transformers", reason="HuggingFaceDETR needs transformers: pip install -e '.[detr]'")

MAX_ITER, CHECKPOINT_PERIOD = 4, 2
RANKING_TERMS = {"loss_rank", "loss_bbox", "loss_giou", "loss_rank_dn_0", "loss_rank_enc"}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> List[str]:
    return shapes_dataset_arguments(str(tmp_path_factory.mktemp("datasets")), "detr", num_val=2)


def overrides(output_dir: Path, batch_size: int = 2) -> List[str]:
    return [
        f"train.output_dir={output_dir}",
        f"train.max_iter={MAX_ITER}",
        f"train.checkpointer.period={CHECKPOINT_PERIOD}",
        "train.log_period=1",
        "train.seed=5",
        f"dataloader.train.total_batch_size={batch_size}",
        "dataloader.train.dataset.names=detr_train",
        "dataloader.test.dataset.names=detr_val",
    ]


@pytest.fixture(scope="module")
def trained(datasets, tmp_path_factory) -> Tuple[Path, Path]:
    """The output folders of the quickstart's uninterrupted run and of the run resumed from its first checkpoint."""
    arguments = ["--config-file", QUICKSTART, *datasets]
    return train_then_resume(arguments, overrides, tmp_path_factory.mktemp("runs"), CHECKPOINT_PERIOD)


def test_quickstart_trains_evaluates_and_resumes_exactly(datasets, trained):
    uninterrupted, resumed = trained
    expected, got = logged(uninterrupted), logged(resumed)
    assert sorted(expected) == list(range(MAX_ITER + 1))  # the evaluation is logged as iteration MAX_ITER
    assert RANKING_TERMS <= set(expected[0])
    assert sorted(got) == list(range(CHECKPOINT_PERIOD, MAX_ITER + 1))
    for iteration in got:
        assert got[iteration] == expected[iteration], f"iteration {iteration}"
    assert {"bbox/AP", "bbox/AP75", "bbox/oLRP", "bbox/oLRP_loc", "bbox/oLRP_FP", "bbox/oLRP_FN"} <= set(
        expected[MAX_ITER]
    )
    weights, resumed_weights = final_weights(uninterrupted), final_weights(resumed)
    assert weights.keys() == resumed_weights.keys() and all(key.startswith("detr.") for key in weights)
    for name, value in weights.items():
        assert torch.equal(value, resumed_weights[name]), name

    log = run_train_net(["--config-file", QUICKSTART, *datasets, "--eval-only", "--resume", *overrides(resumed)])
    assert f"{expected[MAX_ITER]['bbox/oLRP']:.4f}" in log  # the uninterrupted run's final evaluation


def test_the_yaml_config_of_the_model_evaluates_and_predicts_as_the_lazyconfig(datasets, trained, tmp_path):
    """``--eval-only`` of the quickstart's model as a YAML config (MODEL.DETR keys; its classes checked against
    MODEL.DETR.NUM_CLASSES) gives the LazyConfig run's metrics; ``DefaultPredictor`` of that config predicts what
    :class:`LazyPredictor` of the LazyConfig predicts."""
    uninterrupted, _ = trained
    weights = str(uninterrupted / "model_final.pth")
    cfg = quickstart_yacs_config(weights)
    yaml_config = tmp_path / "rtdetr_shapes.yaml"
    yaml_config.write_text(cfg.dump())
    log = run_train_net(
        ["--config-file", str(yaml_config), *datasets, "--eval-only", "DATASETS.TEST", '("detr_val",)']
        + ["OUTPUT_DIR", str(tmp_path / "yaml_eval")]
    )
    assert f"{logged(uninterrupted)[MAX_ITER]['bbox/oLRP']:.4f}" in log

    image = read_image(str(sorted(Path(datasets[-1]).glob("*.jpg"))[0]), format="BGR")  # both take BGR
    predicted = DefaultPredictor(cfg)(image)["instances"]
    lazy_cfg = load_lazy_config(
        QUICKSTART, [f"train.init_checkpoint={weights}", "dataloader.test.dataset.names=detr_val"]
    )
    direct = LazyPredictor(lazy_cfg)(image)["instances"]
    assert len(predicted) == len(direct) > 0 and predicted.image_size == direct.image_size == image.shape[:2]
    torch.testing.assert_close(predicted.pred_boxes.tensor, direct.pred_boxes.tensor)
    torch.testing.assert_close(predicted.scores, direct.scores)
    assert torch.equal(predicted.pred_classes, direct.pred_classes)


def test_demo_draws_the_detections_of_the_lazyconfig(datasets, trained, tmp_path):
    uninterrupted, _ = trained
    image = sorted(Path(datasets[-1]).glob("*.jpg"))[0]
    arguments = ["--config-file", QUICKSTART, "--input", str(image), "--output", str(tmp_path), *datasets]
    options = [f"train.init_checkpoint={uninterrupted / 'model_final.pth'}", "dataloader.test.dataset.names=detr_val"]
    assert demo.main([*arguments, "--confidence-threshold", "0.0", "--opts", *options]) == 0
    assert (tmp_path / image.name).is_file()
    assert demo.main([*arguments, "--opts", *options, "model.num_classes=3"]) == 2  # weights of 5 classes


def test_the_deformable_detr_quickstart_trains_every_set_and_evaluates(datasets, tmp_path):
    """The two-stage Deformable-DETR twin of the quickstart: 2 iterations train the ranking loss of the last decoder
    layer, the earlier ones and the encoder's proposals, and the evaluation reports oLRP."""
    arguments = overrides(tmp_path, batch_size=2) + ["train.max_iter=2", "train.checkpointer.period=2"]
    run_train_net(["--config-file", DEFORMABLE_QUICKSTART, *datasets, *arguments])
    records = logged(tmp_path)
    assert {"loss_rank", "loss_rank_aux_0", "loss_rank_enc", "loss_giou_enc"} <= set(records[0])
    assert "bbox/oLRP" in records[2]


def test_two_workers_train_with_one_global_ranking(datasets, tmp_path):
    """--num-gpus 2 (gloo workers) trains the DDP-wrapped model with the ranking loss over both workers' images (its
    exactness against one process: tests/hf/test_hf_global_ranking.py) and logs its terms."""
    output_dir = tmp_path / "two_workers"
    arguments = overrides(output_dir, batch_size=4) + ["train.max_iter=2", "dataloader.evaluator=None"]
    run_train_net(["--config-file", QUICKSTART, "--num-gpus", "2", *datasets, *arguments])
    records = logged(output_dir)
    assert sorted(records) == [0, 1] and RANKING_TERMS <= set(records[1])
