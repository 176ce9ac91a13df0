"""Evaluation skipped: ``dataloader.evaluator=None`` or ``=null`` in a LazyConfig (detectron2's override keeps
``None`` a string) and ``DATASETS.TEST "()"`` in a YAML config evaluate nothing."""

from __future__ import annotations

import pytest
from detectron2.modeling import build_model

from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.lazy_run import lazy_test, load_lazy_config

from .lazy_runs import REPO_ROOT
from .tiny_configs import tiny_retinanet_cfg

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.py")


@pytest.mark.parametrize("value", ["None", "null"])
def test_a_lazy_evaluator_of_none_or_null_evaluates_nothing(value):
    cfg = load_lazy_config(QUICKSTART, [f"dataloader.evaluator={value}"])
    assert lazy_test(cfg, model=None) == {}  # the model is not touched


def test_a_yaml_config_without_test_datasets_evaluates_nothing():
    cfg = tiny_retinanet_cfg()
    cfg.DATASETS.TEST = ()
    assert AlrpTrainer.test(cfg, build_model(cfg)) == {}
