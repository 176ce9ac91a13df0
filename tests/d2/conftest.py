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
else:
    import logging

    @pytest.fixture(autouse=True)
    def project_logs_reach_pytest():
        """Records of the "alrp_d2" loggers reach pytest's ``caplog`` in every test: detectron2's ``setup_logger``,
        which train_net.py and demo.py run in-process, stops that logger from propagating to the root logger."""
        project_logger = logging.getLogger("alrp_d2")
        propagate = project_logger.propagate
        project_logger.propagate = True
        yield
        project_logger.propagate = propagate
