"""``--num-gpus 2``: the evaluation at the end of training is the saved model's. Each gloo worker keeps its own
BatchNorm statistics while it trains (DDP without buffer broadcast); before evaluating, every worker takes the main
process's, so each validation image's detections equal those of ``--eval-only`` on model_final.pth."""

from __future__ import annotations

from pathlib import Path

import torch

from .lazy_runs import REPO_ROOT, run_train_net, shapes_dataset_arguments

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.yaml")
TINY = [
    *("DATASETS.TRAIN", '("bn_train",)', "DATASETS.TEST", '("bn_val",)', "MODEL.RESNETS.DEPTH", "18"),
    *("SOLVER.IMS_PER_BATCH", "4", "SOLVER.MAX_ITER", "3", "SOLVER.STEPS", "()"),
    *("SOLVER.WARMUP_ITERS", "0", "MODEL.RETINANET.SCORE_THRESH_TEST", "0.0"),
]


def predictions(output_dir: Path) -> dict:
    saved = torch.load(output_dir / "inference" / "instances_predictions.pth", weights_only=False)
    return {entry["image_id"]: entry["instances"] for entry in saved}


def test_end_of_training_metrics_of_two_workers_are_those_of_the_saved_checkpoint(tmp_path):
    datasets = shapes_dataset_arguments(str(tmp_path / "datasets"), "bn", num_val=2)
    trained, evaluated = tmp_path / "trained", tmp_path / "evaluated"
    run_train_net(
        [
            "--config-file",
            QUICKSTART,
            "--num-gpus",
            "2",
            "--dist-url",
            "auto",
            *datasets,
            *TINY,
            "OUTPUT_DIR",
            str(trained),
        ]
    )
    weights = str(trained / "model_final.pth")
    run_train_net(["--config-file", QUICKSTART, "--eval-only", *datasets, *TINY, "OUTPUT_DIR", str(evaluated),
                   "MODEL.WEIGHTS", weights])  # fmt: skip
    at_training_end, of_checkpoint = predictions(trained), predictions(evaluated)
    assert sorted(at_training_end) == sorted(of_checkpoint) and len(of_checkpoint) == 2
    for image_id, detections in of_checkpoint.items():
        assert detections, image_id
        assert [d["score"] for d in at_training_end[image_id]] == [d["score"] for d in detections], image_id
        assert [d["bbox"] for d in at_training_end[image_id]] == [d["bbox"] for d in detections], image_id
