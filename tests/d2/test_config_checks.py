"""setup_cfg refuses values that would fail later without naming their key (infinities and NaN in our
float keys, solver periods below 1) and loads YAML safely unless --allow-unsafe-config."""

from __future__ import annotations

import glob
import os

import pytest

import demo as demo_module
import train_net
from alrp_d2.config import UnsafeConfigError, setup_cfg

from .tiny_configs import CONFIG_DIR


@pytest.mark.parametrize(
    "key, value",
    [
        ("MODEL.ALRP.DELTA", "1e999"),
        ("MODEL.ALRP.SB_INIT_WEIGHT", "1e999"),
        ("MODEL.ALRP.LOC_WEIGHT", "1e999"),
        ("MODEL.ALRP.RPN_WEIGHT", "1e999"),
        ("MODEL.ALRP.RPN_DELTA", "1e999"),
        ("INPUT.SSD.EXPAND_RATIO_RANGE", "(1.0, 1e999)"),
        ("INPUT.SSD.MIN_IOUS", "(1.0, -1e999)"),
        ("MODEL.FOVEABOX.SCALE_RANGES", "[[1, 64], [32, 1e999]]"),
        ("MODEL.FCOS.CENTER_SAMPLING_RADIUS", "1e999"),
    ],
)
def test_infinite_values_name_their_key(key, value):
    with pytest.raises(ValueError, match=rf"Invalid config value {key}=.*inf.*: must be finite"):
        setup_cfg(None, [key, value])


def test_infinities_and_nan_in_yaml_name_their_key(tmp_path):
    for text, key in (("MODEL:\n  ALRP:\n    DELTA: .inf\n", "DELTA"), ("MODEL:\n  ALRP:\n    TAU: .nan\n", "TAU")):
        config = tmp_path / "config.yaml"
        config.write_text(text)
        with pytest.raises(ValueError, match=rf"MODEL\.ALRP\.{key}=(inf|nan): must be finite"):
            setup_cfg(str(config))


@pytest.mark.parametrize("key", ["SOLVER.LOG_PERIOD", "SOLVER.CHECKPOINT_PERIOD", "SOLVER.MAX_ITER"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_solver_periods_must_be_positive(key, value):
    with pytest.raises(ValueError, match=rf"Invalid config value {key}={value}: must be an integer >= 1"):
        setup_cfg(None, [key, value])


def test_self_balance_period_must_be_a_non_negative_integer():
    with pytest.raises(ValueError, match=r"Invalid config value MODEL.ALRP.SB_PERIOD=-5: must be an integer >= 0"):
        setup_cfg(None, ["MODEL.ALRP.SB_PERIOD", "-5"])


def test_every_shipped_config_passes():
    for path in glob.glob(os.path.join(CONFIG_DIR, "**", "*.yaml"), recursive=True):
        setup_cfg(path)


# ---- YAML that constructs Python objects -----------------------------------------------------------


def write_unsafe_config(tmp_path, marker) -> str:
    """A config whose _BASE_ file runs a shell command (SEED: its exit status) and builds a float by a call."""
    base = tmp_path / "base.yaml"
    base.write_text(
        f'SEED: !!python/object/apply:os.system ["touch {marker}"]\n'
        'MODEL:\n  ALRP:\n    DELTA: !!python/object/apply:float ["2.5"]\n'
    )
    config = tmp_path / "config.yaml"
    config.write_text("_BASE_: base.yaml\nSOLVER:\n  MAX_ITER: 10\n")
    return str(config)


def test_config_tags_that_construct_objects_are_refused(tmp_path):
    marker = tmp_path / "code_ran"
    config = write_unsafe_config(tmp_path, marker)
    with pytest.raises(UnsafeConfigError, match=f"(?s)config file {config} .*base.yaml.*--allow-unsafe-config"):
        setup_cfg(config)
    arguments = ["--config-file", config, "--input", str(tmp_path), "--output", str(tmp_path / "out")]
    assert demo_module.main(arguments) == 2
    assert not marker.exists()


def test_allow_unsafe_config_keeps_detectron2s_behaviour(tmp_path):
    marker = tmp_path / "code_ran"
    config = write_unsafe_config(tmp_path, marker)
    args = train_net.get_parser().parse_args(["--config-file", config, "--allow-unsafe-config"])
    cfg = setup_cfg(args.config_file, args.opts, allow_unsafe=args.allow_unsafe_config)
    assert cfg.MODEL.ALRP.DELTA == 2.5 and cfg.SEED == 0 and marker.exists()
