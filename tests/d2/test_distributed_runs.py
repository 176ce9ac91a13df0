"""Distributed runs that end (loopback, CPU workers with gloo): machines started with different configs
stop naming the keys, a machine that never starts ends the run after --dist-timeout, and a rank
killed while its loader workers start leaves no process behind. Each run ends itself within
seconds; a test that would hang fails at its subprocess timeout instead."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = "configs/quickstart/alrp_retinanet_shapes.yaml"
TINY = [
    "MODEL.RETINANET.NUM_CONVS",
    "1",
    "MODEL.FPN.OUT_CHANNELS",
    "16",
    "MODEL.RETINANET.NORM",
    "",
    "TEST.EVAL_PERIOD",
    "0",
]
TOKEN_VARIABLE = "ALRP_D2_TEST_RUN"
RUN_LIMIT_S = 120  # a run that has not ended by then hangs


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


LOGS: Dict[int, Path] = {}  # pid of a train_net.py process -> its output


def train_net(tmp_path: Path, token: str, *arguments: str) -> subprocess.Popen:
    """train_net.py marked with ``token`` in its environment (inherited by every process it starts),
    its output in a file of ``tmp_path``."""
    command = [sys.executable, "train_net.py", "--config-file", CONFIG, *arguments]
    environment = dict(os.environ, **{TOKEN_VARIABLE: token})
    log = tmp_path / f"{uuid.uuid4().hex}.log"
    with open(log, "w") as f:
        process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=f, stderr=subprocess.STDOUT)
    LOGS[process.pid] = log
    return process


def output(process: subprocess.Popen) -> str:
    return LOGS[process.pid].read_text()


def marked_processes(token: str) -> Dict[int, int]:
    """{pid: parent pid} of the live processes whose environment holds ``token``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes()
            status = (entry / "stat").read_text()
        except OSError:
            continue
        state = status.rsplit(")", 1)[1].split()
        if f"{TOKEN_VARIABLE}={token}".encode() in environment.split(b"\0") and state[0] != "Z":
            found[int(entry.name)] = int(state[1])
    return found


def left_behind(token: str, grace_s: float = RUN_LIMIT_S) -> Dict[int, int]:
    """The processes of ``token`` still alive ``grace_s`` seconds after the run ended (multiprocessing's
    resource tracker exits shortly after the launcher; a loader worker spawned just before its rank died first
    imports torch, detectron2 and alrp_d2 to unpickle its dataset, then its parent check ends it: on CI's two
    loaded cores, with four workers starting at once, that took over 30 s)."""
    deadline = time.monotonic() + grace_s
    while marked_processes(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    return marked_processes(token)


def wait_all(processes: List[subprocess.Popen]) -> None:
    deadline = time.monotonic() + RUN_LIMIT_S
    for process in processes:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            pytest.fail(f"the run did not end within {RUN_LIMIT_S} s:\n{output(process)[-3000:]}")


def machine(tmp_path: Path, token: str, rank: int, port: int, *opts: str) -> subprocess.Popen:
    arguments = ["--num-gpus", "1", "--num-machines", "2", "--machine-rank", str(rank)]
    arguments += ["--dist-url", f"tcp://127.0.0.1:{port}", "--dist-timeout", "20"]
    return train_net(tmp_path, token, *arguments, *TINY, "OUTPUT_DIR", str(tmp_path / f"machine{rank}"), *opts)


@pytest.fixture
def token():
    """The mark of this test's processes; any still alive at the end are killed (and the test has
    failed on them)."""
    mark = uuid.uuid4().hex
    yield mark
    for pid in marked_processes(mark):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_machines_with_different_configs_stop_naming_the_keys(tmp_path, token):
    port = free_port()
    first = machine(tmp_path, token, 0, port, "SOLVER.MAX_ITER", "10")
    second = machine(tmp_path, token, 1, port, "SOLVER.MAX_ITER", "20", "MODEL.ALRP.RANKING", "global")
    wait_all([first, second])
    for process in (first, second):
        text = output(process)
        assert process.returncode != 0, text[-3000:]
        assert "MachinesDisagreeError: the processes of this distributed run were started with different" in text
        assert "SOLVER.MAX_ITER: 10 on ranks [0]; 20 on ranks [1]" in text
        assert "MODEL.ALRP.RANKING: 'per_worker' on ranks [0]; 'global' on ranks [1]" in text
    assert not left_behind(token)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_machine_that_never_starts_ends_the_run_after_the_timeout(tmp_path, token):
    arguments = ["--num-gpus", "1", "--num-machines", "2", "--machine-rank", "0"]
    arguments += ["--dist-url", f"tcp://127.0.0.1:{free_port()}", "--dist-timeout", "1"]  # always waited out
    alone = train_net(tmp_path, token, *arguments, *TINY, "OUTPUT_DIR", str(tmp_path / "alone"))
    wait_all([alone])
    text = output(alone)
    assert alone.returncode != 0 and "1/2 clients joined" in text, text[-3000:]
    assert not left_behind(token)


def loader_workers(token: str, launcher: int) -> Dict[int, List[int]]:
    """{rank pid: its loader workers' pids} of the run started by ``launcher``: the ranks and their
    loader workers are started by multiprocessing's spawn (detectron2's launch sets it)."""
    processes = marked_processes(token)
    spawned = {pid: parent for pid, parent in processes.items() if b"spawn_main" in cmdline(pid)}
    ranks = [pid for pid, parent in spawned.items() if parent == launcher]
    return {rank: [pid for pid, parent in spawned.items() if parent == rank] for rank in ranks}


def cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
def test_a_rank_killed_while_its_loader_workers_start_leaves_no_process(tmp_path, token):
    run = train_net(
        tmp_path, token, "--num-gpus", "2", "--dist-timeout", "20", *TINY,
        "DATALOADER.NUM_WORKERS", "2", "SOLVER.IMS_PER_BATCH", "2", "OUTPUT_DIR", str(tmp_path / "killed"),
    )  # fmt: skip
    deadline = time.monotonic() + RUN_LIMIT_S
    killed = None
    while killed is None and time.monotonic() < deadline and run.poll() is None:
        for rank, workers in loader_workers(token, run.pid).items():
            if workers:
                os.kill(rank, signal.SIGKILL)
                killed = rank
                break
        time.sleep(0.05)
    assert killed is not None, f"no loader worker started:\n{output(run)[-3000:]}"
    wait_all([run])
    assert run.returncode != 0
    left = left_behind(token)
    assert not left, f"processes left behind: {[cmdline(pid)[:80] for pid in left]}"
