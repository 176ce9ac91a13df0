"""Configs are bounded before detectron2 reads them (alrp_d2/config/yaml_bound.py): a YAML alias bomb under a real
key is refused in under 5 s naming the file, before train_net.py reaches detectron2's default_setup (whose OmegaConf
conversion ran over 300 s on it); the same bound holds for _BASE_ files, --opts values and LazyConfig overrides."""

from __future__ import annotations

import argparse
import time

import pytest

import train_net
from alrp_d2.config import setup_cfg, yaml_bound
from alrp_d2.config.yaml_bound import MAX_CONFIG_NODES, ConfigTooLargeError, check_value_size
from alrp_d2.engine.lazy_run import load_lazy_config

from .bounded_calls import run_bounded
from .lazy_runs import REPO_ROOT

RETINANET = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.yaml")
LAZY_RETINANET = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.py")


def alias_bomb(path, base: str = "") -> str:
    """1 KB whose INPUT.SSD.MIN_IOUS nests aliases nine levels deep, each list ten references to the previous one
    (over 10**9 nodes expanded)."""
    lines = [f"_BASE_: {base}"] if base else []
    lines += ["INPUT:", "  SSD:", "    MIN_IOUS:", "      - &a0 [0.1, 0.3, 0.5, 0.7, 0.9, 0.1, 0.3, 0.5, 0.7, 0.9]"]
    lines += [f"      - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def timed_train_net_main(path: str) -> str:
    """train_net.py's main on the config ``path`` (it raises before default_setup); its error and duration."""
    args = train_net.get_parser().parse_args(["--config-file", path])
    start = time.perf_counter()
    try:
        train_net.main(args)
    except ConfigTooLargeError as error:
        return f"{time.perf_counter() - start:.3f} {error}"
    return "not refused"


def test_an_alias_bomb_is_refused_in_under_5_s_naming_the_file(tmp_path, monkeypatch):
    path = alias_bomb(tmp_path / "bomb.yaml")
    monkeypatch.setattr(train_net, "default_setup", lambda *_: pytest.fail("default_setup reached"))
    outcome = run_bounded(lambda: timed_train_net_main(path))
    assert outcome.value is not None, outcome
    seconds, message = outcome.value.strip("'").split(" ", 1)
    assert float(seconds) < 5 and f"the config file {path} holds 12,345,679,017 nodes" in message
    assert f"over the limit of {MAX_CONFIG_NODES:,}" in message


def test_a_bomb_in_a_base_file_or_a_recursive_alias_is_refused(tmp_path):
    base = alias_bomb(tmp_path / "base.yaml", base=RETINANET)
    child = tmp_path / "child.yaml"
    child.write_text(f"_BASE_: {base}\nSOLVER:\n  MAX_ITER: 3\n")
    with pytest.raises(ConfigTooLargeError, match=f"the config file {base} holds"):
        setup_cfg(str(child))
    recursive = tmp_path / "recursive.yaml"
    recursive.write_text("INPUT:\n  SSD:\n    MIN_IOUS: &a [0.1, *a]\n")
    with pytest.raises(ConfigTooLargeError, match=f"the config file {recursive}: a recursive alias"):
        setup_cfg(str(recursive))
    assert setup_cfg(RETINANET).INPUT.SSD.ENABLED is not None  # the project's configs are far below the bound


def test_opts_values_and_lazyconfig_overrides_are_bounded(monkeypatch):
    monkeypatch.setattr(yaml_bound, "MAX_CONFIG_NODES", 50)  # hydra's parser takes minutes for 100,000 values
    big = "[" + ", ".join(["0.5"] * 50) + "]"
    with pytest.raises(ConfigTooLargeError, match="the --opts value of INPUT.SSD.MIN_IOUS holds 51 nodes"):
        setup_cfg(RETINANET, ["INPUT.SSD.MIN_IOUS", big])
    with pytest.raises(ConfigTooLargeError, match=r"alrp_retinanet_shapes.py: the override train.seed=\.\.\. holds"):
        load_lazy_config(LAZY_RETINANET, [f"train.seed={big}"])
    shared = [0.5] * 10
    for _ in range(5):
        shared = [shared] * 10
    with pytest.raises(ConfigTooLargeError, match="holds 1,111,111 nodes"):  # shared references counted each time
        check_value_size(shared, "value")
    check_value_size(argparse.Namespace(), "an object is one node")
