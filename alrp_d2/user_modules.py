"""The user's own modules (e.g. one that registers a ranking criterion, a dataset or a model), imported in the
launching process and in every worker: ``train_net.py --import MODULE`` / ``demo.py --import MODULE``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import List, Sequence

__all__ = ["add_import_argument", "import_user_modules"]


def add_import_argument(parser: argparse.ArgumentParser) -> None:
    """``--import MODULE`` (repeatable): a module name importable from the working directory, or a ``.py`` file."""
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import this module (a dotted name found from the working directory, or a path to a .py file) in "
        "every process before the config is read, e.g. one that registers a ranking criterion; repeatable",
    )


def import_user_modules(names: Sequence[str]) -> List[ModuleType]:
    """Imports each module (a dotted name, looked up from the working directory first, or a ``.py`` path, imported
    under its file's stem); a module already imported is not run again. Call it in the launching process and in
    every worker (detectron2's ``launch`` spawns fresh processes)."""
    modules = []
    for name in names:
        if name.endswith(".py") or os.sep in name:
            path = os.path.abspath(os.path.expanduser(name))
            if not os.path.isfile(path):
                raise FileNotFoundError(f"--import {name}: no such file {path}")
            stem = os.path.splitext(os.path.basename(path))[0]
            module = sys.modules.get(stem)
            if module is None or os.path.abspath(getattr(module, "__file__", "") or "") != path:
                spec = importlib.util.spec_from_file_location(stem, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[stem] = module
                spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as error:
                if error.name != name.split(".")[0] and error.name != name:
                    raise
                raise ModuleNotFoundError(
                    f"--import {name}: no module {name!r} on the path (the working directory {os.getcwd()} and "
                    "PYTHONPATH); give a module name or a path to a .py file",
                    name=name,
                ) from error
        modules.append(module)
    return modules
