"""Skips every module of this folder, with one reason, when Hugging Face transformers (the ``detr`` extra) is not
installed: the modules import it at their top, so they are replaced by a collector that only skips."""

import importlib.util
from pathlib import Path
from typing import Any, Iterable

import pytest

TRANSFORMERS_MISSING = (
    "transformers is not installed (the 'detr' extra, see docs/detr.md): the Hugging Face tests in tests/hf are skipped"
)

if importlib.util.find_spec("transformers") is None:

    class _SkippedModule(pytest.File):
        """A test module that is not imported and is reported as skipped."""

        def collect(self) -> Iterable[Any]:
            pytest.skip(TRANSFORMERS_MISSING)

    def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.File:
        return _SkippedModule.from_parent(parent, path=module_path)
