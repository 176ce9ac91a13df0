"""Reports at the end of the run whether the detectron2 integration tests (``tests/d2``) ran. With
``ALRP_D2_REQUIRE_ALL_TESTS=1`` (``.ci/run`` sets it when ``CI=true``) a run that skipped any test fails."""

import importlib.util
import os
from typing import List, Union

import pytest

HAS_DETECTRON2 = importlib.util.find_spec("detectron2") is not None
REQUIRE_ALL_TESTS = os.environ.get("ALRP_D2_REQUIRE_ALL_TESTS") == "1"

_skipped: List[str] = []


def _record_skip(report: Union[pytest.CollectReport, pytest.TestReport]) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _record_skip(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record_skip(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if REQUIRE_ALL_TESTS and _skipped and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if HAS_DETECTRON2:
        terminalreporter.write_line("detectron2 integration tests: RAN (detectron2 is importable)")
    else:
        terminalreporter.write_line("detectron2 integration tests: SKIPPED (tests/d2: detectron2 is not importable)")
    if REQUIRE_ALL_TESTS and _skipped:
        terminalreporter.write_line(
            f"ALRP_D2_REQUIRE_ALL_TESTS=1: {len(_skipped)} skipped (e.g. {_skipped[0]}): the run fails", red=True
        )


@pytest.fixture(params=["scan", "dense"])
def ranking_path(request):
    """Runs the test on each path of the ranking losses (``alrp_d2.losses.ranking_path``), whatever the device:
    ``scan`` (the CPU's) and ``dense`` (an accelerator's); the test passes it as the losses' ``path``."""
    return request.param
