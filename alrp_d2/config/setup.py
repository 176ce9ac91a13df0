"""The one config entry point ``setup_cfg`` of train_net.py, demo.py, the tools, tests and benchmarks."""

from __future__ import annotations

import ast
import contextlib
from typing import Iterator, List, Optional, Sequence

import yaml
from detectron2.config import CfgNode as CN
from detectron2.config import get_cfg

from ..checks.errors import ConfigError, ConfigKeyError
from .keys import add_alrp_config
from .validation import validate_alrp_config
from .yaml_bound import check_option_values, check_yaml_size

__all__ = ["UnsafeConfigError", "setup_cfg"]


class UnsafeConfigError(ConfigError):
    """A config file uses YAML tags that construct Python objects (they can run code)."""


def setup_cfg(config_file: Optional[str] = None, opts: Sequence[str] = (), allow_unsafe: bool = False) -> CN:
    """detectron2's defaults, the aLRP keys, ``config_file`` and then the ``KEY VALUE`` pairs of
    ``opts`` (the one config entry point of train_net.py, demo.py, tests and benchmarks, as
    detectron2's ``demo/demo.py:setup_cfg``). The result is not frozen.

    The file (and its ``_BASE_`` files) is read with ``yaml.safe_load``: a tag that constructs a
    Python object (``!!python/object/apply:...``) raises :class:`UnsafeConfigError`, unless
    ``allow_unsafe`` (train_net.py / demo.py ``--allow-unsafe-config``), which falls back to
    detectron2's ``yaml.unsafe_load`` for such files."""
    check_option_values(opts)  # bounded before yacs reads them (alias bombs: yaml_bound.py)
    cfg = get_cfg()
    add_alrp_config(cfg)
    if config_file:
        check_yaml_size(config_file)
        with yacs_refusals(config_file):
            try:
                cfg.merge_from_file(config_file, allow_unsafe=allow_unsafe)
            except yaml.constructor.ConstructorError as error:
                raise UnsafeConfigError(
                    f"the config file {config_file} (or one of its _BASE_ files) uses a YAML tag that constructs a "
                    f"Python object, which can run code:\n{error}\nRemove the tag, or pass --allow-unsafe-config "
                    "(setup_cfg(..., allow_unsafe=True)) if you trust the file."
                ) from error
    with yacs_refusals("the command-line options"):
        cfg.merge_from_list(_integers_as_floats(cfg, opts))
    validate_alrp_config(cfg)
    return cfg


@contextlib.contextmanager
def yacs_refusals(source: str) -> Iterator[None]:
    """yacs's refusals of ``source`` (a config file, or the command-line options) as :class:`ConfigError`: a key the
    config does not have or that was renamed (:class:`ConfigKeyError`), a value of another type, an odd list of
    options."""
    try:
        yield
    except ConfigError:
        raise
    except KeyError as error:
        raise ConfigKeyError(f"{source}: {error.args[0] if error.args else error}") from error
    except (ValueError, AssertionError) as error:
        raise ConfigError(f"{source}: {error}") from error


def _integers_as_floats(cfg: CN, opts: Sequence[str]) -> List[str]:
    """``opts`` with an integer given to a float key written as a float (``MODEL.ALRP.DELTA 2``
    means 2.0; yacs would refuse the int), so that the value reaches our range checks."""
    opts = list(opts)
    for i in range(0, len(opts) - 1, 2):
        default = cfg
        for name in str(opts[i]).split("."):
            default = default.get(name) if isinstance(default, CN) else None
        if isinstance(default, float) and type(value := _literal(opts[i + 1])) is int:
            opts[i + 1] = repr(float(value))
    return opts


def _literal(text: object) -> object:
    try:
        return ast.literal_eval(str(text))
    except (ValueError, SyntaxError):
        return text
