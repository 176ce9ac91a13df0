"""Quiet logs: train_net.py and demo.py print no third-party deprecation warning, the predictor does not log
fvcore's false "No checkpoint found. Initializing model from scratch" before it loads the real weights, and the
shapes dataset says it is being generated."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from detectron2.modeling import build_model

from alrp_d2.checkpoint import AlrpCheckpointer
from alrp_d2.data.shapes import prepare_shapes_dataset
from alrp_d2.evaluation import AlrpPredictor

from .lazy_runs import REPO_ROOT, environment
from .tiny_configs import tiny_retinanet_cfg


@pytest.mark.parametrize("script", ["train_net.py", "demo.py"])
def test_the_entry_points_print_no_third_party_warning(script):
    env = {key: value for key, value in environment().items() if key != "PYTHONWARNINGS"}
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / script), "--help"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Warning" not in result.stderr, result.stderr[-2000:]


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
    records, log = Records(), logging.getLogger("fvcore.common.checkpoint")
    log.addHandler(records)
    level, log.level = log.level, logging.INFO
    try:
        AlrpPredictor(cfg)
    finally:
        log.removeHandler(records)
        log.setLevel(level)
    assert not [m for m in records.messages if "No checkpoint found" in m], records.messages
    assert [m for m in records.messages if "weights.pth" in m], records.messages  # the real weights are logged


def test_generating_the_shapes_dataset_is_announced(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="alrp_d2"):
        prepare_shapes_dataset(str(tmp_path), num_images={"train": 1, "val": 1})
    assert any("Generating the synthetic shapes dataset (1 train + 1 val images)" in m for m in caplog.messages)
