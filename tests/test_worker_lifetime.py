"""Processes forked by a rank die with it, even one that never reaches its ``worker_init_fn``
(a data loader worker blocked right after the fork)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# a rank that installs the hooks, forks a child that blocks before any worker code, then is killed
RANK = """
import os, signal, sys, time
from torch.utils.data import DataLoader
from alrp_d2.data.worker_lifetime import workers_die_with_parent
workers_die_with_parent(DataLoader(range(4), num_workers=1))
child = os.fork()
if child == 0:
    os.close(1), os.close(2)  # the test reads the rank's output to its end
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's; reads /proc")
def test_a_child_forked_by_a_killed_rank_dies_before_its_worker_code_runs():
    run = subprocess.run([sys.executable, "-c", RANK], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr
    child = int(run.stdout.split()[0])
    deadline = time.monotonic() + 10.0
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the forked child outlived its killed parent")
