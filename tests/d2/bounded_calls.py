"""Running a risky call (a bomb, input that crashed native code) in a forked process with a capped
address space and a time limit, so that a regression fails the test instead of the machine: the
call's result or exception comes back; running out of memory or time, or dying by a signal (a
segmentation fault), is reported as such."""

from __future__ import annotations

import multiprocessing
import resource
import signal
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

#: The address space the child may add to what it starts with (the parent's, e.g. 3.7 GB with torch and
#: detectron2 imported): a fresh interpreter with these imports then stays under 6 GiB.
EXTRA_ADDRESS_SPACE = 2 << 30
TIME_LIMIT_S = 30


@dataclass(frozen=True)
class Outcome:
    """What the call did: its value's repr, or the type and message of what it raised, or how the process ended."""

    value: Optional[str] = None
    error_type: Optional[str] = None
    error: str = ""
    ended: str = ""  # "signal 11", "timed out after 30 s", "exit code 1" when the child ended without reporting


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _child(function: Callable[[], Any], connection: Any) -> None:
    limit = _address_space() + EXTRA_ADDRESS_SPACE
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.alarm(TIME_LIMIT_S)
    try:
        connection.send(Outcome(value=repr(function())[:2000]))
    except BaseException as error:  # MemoryError, RecursionError, ... are outcomes too
        message = f"{error}\n{traceback.format_exc(limit=-3)}"
        connection.send(Outcome(error_type=type(error).__name__, error=message[:4000]))


def run_bounded(function: Callable[[], Any]) -> Outcome:
    """Calls ``function()`` in a forked process with :data:`EXTRA_ADDRESS_SPACE` more address space than it starts
    with and :data:`TIME_LIMIT_S` seconds (SIGALRM; killed 10 s later)."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(function, sender), daemon=True)
    process.start()
    sender.close()
    outcome = None
    if receiver.poll(TIME_LIMIT_S + 10):
        try:
            outcome = receiver.recv()
        except EOFError:  # the child died before it reported
            outcome = None
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
        return Outcome(ended=f"timed out after {TIME_LIMIT_S} s")
    if outcome is not None:
        return outcome
    code = process.exitcode or 0
    return Outcome(ended=f"signal {-code}" if code < 0 else f"exit code {code}")
