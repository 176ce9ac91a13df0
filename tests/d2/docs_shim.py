"""Stands in for ``python``, ``python3``, ``uv`` and ``bash`` while tests/d2/test_docs_run.py runs a docs block with
bash (DEVELOPERS.md, "Docs that run"). Called as ``docs_shim.py NAME ARGUMENTS...``; it appends every command to
``$DOCS_RUN_LOG`` (JSON lines: program, arguments, exit status) and

- with ``DOCS_RUN_MODE=check``: runs nothing (the test parses the logged commands);
- with ``DOCS_RUN_MODE=run``: runs the command with ``$DOCS_RUN_PYTHON``, shortened: a ``train_net.py`` command gets
  :data:`SHORT_YAML` or :data:`SHORT_LAZY` appended (2 iterations of 2 images, no learning-rate step, no loader
  worker process), and a command
  that already succeeded in this folder, as shortened, is not run again.

``uv run SCRIPT.py ...`` / ``uv run python ...`` stand for ``python SCRIPT.py ...`` / ``python ...``. The shim imports
nothing beyond the standard library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List

SHORT_YAML = [
    *("SOLVER.MAX_ITER", "2", "SOLVER.STEPS", "()", "SOLVER.CHECKPOINT_PERIOD", "2", "SOLVER.IMS_PER_BATCH", "2"),
    *("DATALOADER.NUM_WORKERS", "0"),
]
SHORT_LAZY = [
    *("train.max_iter=2", "train.checkpointer.period=2"),
    *("dataloader.train.total_batch_size=2", "dataloader.train.num_workers=0"),
]


def shortened(arguments: List[str]) -> List[str]:
    """A train_net.py command with the short schedule appended (the last value of a key wins)."""
    if arguments and os.path.basename(arguments[0]) == "train_net.py" and "--config-file" in arguments[:-1]:
        config = arguments[arguments.index("--config-file") + 1]
        return arguments + (SHORT_LAZY if config.endswith(".py") else SHORT_YAML)
    return arguments


def log(entry: dict) -> None:
    with open(os.environ["DOCS_RUN_LOG"], "a") as f:
        f.write(json.dumps(entry) + "\n")


def succeeded_before(program: str, arguments: List[str]) -> bool:
    with open(os.environ["DOCS_RUN_LOG"]) as f:
        entries = [json.loads(line) for line in f]
    return any(e["program"] == program and e["arguments"] == arguments and e.get("status") == 0 for e in entries)


def main(name: str, arguments: List[str]) -> int:
    if name == "uv" and arguments[:1] == ["run"] and len(arguments) > 1:
        if arguments[1] in ("python", "python3"):
            name, arguments = "python", arguments[2:]
        elif arguments[1].endswith(".py"):
            name, arguments = "python", arguments[1:]
    program = "python" if name in ("python", "python3") else name
    if os.environ["DOCS_RUN_MODE"] == "check":
        log({"program": program, "arguments": arguments, "cwd": os.getcwd()})
        return 0
    if program == "python":
        arguments = shortened(arguments)
        if succeeded_before(program, arguments):
            print(f"docs_shim: ran already in this folder: python {' '.join(arguments)}")
            log({"program": program, "arguments": arguments, "cwd": os.getcwd(), "status": 0, "ran": "already"})
            return 0
        command = [os.environ["DOCS_RUN_PYTHON"], *arguments]
    elif program == "bash":
        command = ["/bin/bash", *arguments]
    else:
        print(f"docs_shim: {name} {' '.join(arguments)} is not run by the docs test (mark the block otherwise)")
        return 1
    status = subprocess.run(command).returncode
    log({"program": program, "arguments": arguments, "cwd": os.getcwd(), "status": status})
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
