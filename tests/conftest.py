"""Test set-up: makes the loop reference and train_net.py importable and reports whether the detectron2
integration tests ran."""
import importlib.util
import os
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS_DIR)
sys.path.insert(1, os.path.dirname(TESTS_DIR))  # train_net.py and benchmarks/ at the repository root

HAS_DETECTRON2 = importlib.util.find_spec("detectron2") is not None
DETECTRON2_SKIP_REASON = "detectron2 is not installed (see README, 'Install'): integration test skipped"


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "detectron2 is not installed" in str(r.longrepr)]
    if HAS_DETECTRON2:
        terminalreporter.write_line("detectron2 integration tests: RAN (detectron2 is importable)")
    else:
        terminalreporter.write_line(
            f"detectron2 integration tests: SKIPPED ({len(skipped)} skipped, detectron2 is not importable)"
        )
