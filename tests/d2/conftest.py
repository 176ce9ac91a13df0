"""Skips every module of this folder, with one reason, when detectron2 is not installed: the
modules import detectron2 at their top, so they are replaced by a collector that only skips."""

import importlib.util
from pathlib import Path
from typing import Any, Iterable

import pytest

DETECTRON2_MISSING = (
    "detectron2 is not installed (see README, 'Install'): the integration tests in tests/d2 are skipped"
)

if importlib.util.find_spec("detectron2") is None:

    class _SkippedModule(pytest.File):
        """A test module that is not imported and is reported as skipped."""

        def collect(self) -> Iterable[Any]:
            pytest.skip(DETECTRON2_MISSING)

    def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.File:
        return _SkippedModule.from_parent(parent, path=module_path)
