"""``ALRP_D2_REQUIRE_ALL_TESTS=1`` (CI) turns a run that skipped a test into a failure (``tests/conftest.py``)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")


def _run_pytest(folder: Path, require_all_tests: bool) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "ALRP_D2_REQUIRE_ALL_TESTS"}
    if require_all_tests:
        env["ALRP_D2_REQUIRE_ALL_TESTS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _suite(tmp_path: Path, test_body: str) -> Path:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(f"import pytest\n\n\ndef test_sample():\n    {test_body}\n")
    return tmp_path


def test_a_skipped_test_fails_the_run_only_when_all_tests_are_required(tmp_path):
    suite = _suite(tmp_path, 'pytest.skip("needs something")')
    required = _run_pytest(suite, require_all_tests=True)
    assert required.returncode == 1, required.stdout
    assert "ALRP_D2_REQUIRE_ALL_TESTS=1: 1 skipped (e.g. test_sample.py::test_sample): the run fails" in required.stdout
    assert _run_pytest(suite, require_all_tests=False).returncode == 0


def test_a_run_without_skips_passes_when_all_tests_are_required(tmp_path):
    required = _run_pytest(_suite(tmp_path, "assert True"), require_all_tests=True)
    assert required.returncode == 0, required.stdout
