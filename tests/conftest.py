"""Reports at the end of the run whether the detectron2 integration tests (``tests/d2``) ran."""

import importlib.util

HAS_DETECTRON2 = importlib.util.find_spec("detectron2") is not None


def pytest_terminal_summary(terminalreporter):
    if HAS_DETECTRON2:
        terminalreporter.write_line("detectron2 integration tests: RAN (detectron2 is importable)")
    else:
        terminalreporter.write_line("detectron2 integration tests: SKIPPED (tests/d2: detectron2 is not importable)")
