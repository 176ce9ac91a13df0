"""Quiet logs: train_net.py, demo.py and the tools that import detectron2 print no third-party deprecation warning,
the predictor does not log fvcore's false "No checkpoint found. Initializing model from scratch" before it loads the
real weights, and the shapes dataset says it is being generated."""

from __future__ import annotations

import logging
import subprocess
import sys

from detectron2.engine import DefaultPredictor
from detectron2.modeling import build_model

from alrp_d2.checkpoint import AlrpCheckpointer
from alrp_d2.data.shapes import prepare_shapes_dataset
from alrp_d2.evaluation import AlrpPredictor

from .lazy_runs import REPO_ROOT, environment
from .tiny_configs import tiny_retinanet_cfg

ENTRY_POINTS = ("train_net.py", "demo.py", "tools/convert_official_checkpoint.py", "tools/show_dataset.py")


def test_the_entry_points_print_no_third_party_warning():
    env = {key: value for key, value in environment().items() if key != "PYTHONWARNINGS"}
    runs = {
        script: subprocess.Popen(
            [sys.executable, str(REPO_ROOT / script), "--help"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )
        for script in ENTRY_POINTS
    }  # fmt: skip
    for script, process in runs.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, (script, stderr[-2000:])
        assert "Warning" not in stderr, (script, stderr[-2000:])


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_the_predictor_logs_no_false_from_scratch_line(tmp_path):
    cfg = tiny_retinanet_cfg()
    cfg.DATASETS.TEST = ()
    AlrpCheckpointer(build_model(cfg), save_dir=str(tmp_path)).save("weights")
    cfg.MODEL.WEIGHTS = str(tmp_path / "weights.pth")
    # detectron2's predictor logs the line when MODEL.WEIGHTS is empty, as AlrpPredictor's parent is built
    assert any("No checkpoint found" in m for m in checkpoint_log(lambda: DefaultPredictor(tiny_retinanet_cfg())))
    messages = checkpoint_log(lambda: AlrpPredictor(cfg))
    assert not [m for m in messages if "No checkpoint found" in m], messages
    assert [m for m in messages if "weights.pth" in m], messages  # the real weights are logged


def checkpoint_log(build) -> list:
    """The messages of fvcore's checkpointer logger while ``build()`` runs."""
    records, log = Records(), logging.getLogger("fvcore.common.checkpoint")
    log.addHandler(records)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        build()
    finally:
        log.removeHandler(records)
        log.setLevel(level)
    return records.messages


def test_generating_the_shapes_dataset_is_announced(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="alrp_d2"):
        prepare_shapes_dataset(str(tmp_path), num_images={"train": 1, "val": 1})
    assert any("Generating the synthetic shapes dataset (1 train + 1 val images)" in m for m in caplog.messages)
