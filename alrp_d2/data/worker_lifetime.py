"""Data loader workers that end with the process that started them (a rank of a distributed run):
a rank that is killed, even while its workers start, leaves no worker behind.

PyTorch's workers notice a dead parent only between two requests (its ``ManagerWatchdog`` polls
every 5 s, once the worker loop runs); a worker still starting, or busy, lives on. On Linux each
worker asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), then checks
that the parent is still the process that started it (it may have died before the request). A
forked worker asks right after the fork, in an ``os.register_at_fork`` hook of the rank: a worker
forked from a many-threaded rank can block before its ``worker_init_fn`` runs (a lock held by
another thread at the fork) and would otherwise outlive a killed rank. A spawned worker asks in
its ``worker_init_fn``, after it has imported what its dataset needs (seconds; a rank started by
``--num-gpus N`` spawns its workers). Elsewhere only the check runs."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any, Callable, Optional

from torch.utils.data import DataLoader

__all__ = ["DieWithParent", "workers_die_with_parent"]

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# loaded at import: a child forked from a many-threaded process must not load a library (dlopen's lock)
LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _ask_for_kill_with_parent() -> None:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on Linux (this process is killed when its parent dies)."""
    if LIBC is not None:
        if LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed in a data loader worker")


class _ForkedChildrenDieWithParent:
    """The ``os.register_at_fork`` hooks of a rank: every process it forks asks for SIGKILL when the
    rank dies, before it runs any code of its own, and ends at once if the rank died during the fork."""

    installed = False

    def __init__(self) -> None:
        self.parent = os.getpid()

    def before(self) -> None:
        self.parent = os.getpid()

    def after_in_child(self) -> None:
        _ask_for_kill_with_parent()
        if os.getppid() != self.parent:
            os._exit(1)

    @classmethod
    def install(cls) -> None:
        """Registers the hooks once per process (a forked child inherits them)."""
        if not cls.installed:
            hooks = cls()
            os.register_at_fork(before=hooks.before, after_in_child=hooks.after_in_child)
            cls.installed = True


class DieWithParent:
    """A DataLoader ``worker_init_fn`` (module docstring), then ``then(worker_id)`` if given. Built
    in the process that iterates the loader (its pid is the parent the workers must have); the
    loader must be iterated from a thread that lives as long as its workers (the signal follows
    the thread that forked them)."""

    def __init__(self, then: Optional[Callable[[int], Any]] = None):
        self.parent = os.getpid()
        self.then = then

    def __call__(self, worker_id: int) -> None:
        _ask_for_kill_with_parent()
        if os.getppid() != self.parent:
            os._exit(1)  # the rank died before the request: nothing would end this worker
        if self.then is not None:
            self.then(worker_id)


def workers_die_with_parent(loader: Any) -> Any:
    """``loader`` (a DataLoader, or detectron2's ``AspectRatioGroupedDataset`` over one) with
    :class:`DieWithParent` before its ``worker_init_fn``, and this process's forked children asking
    for SIGKILL with it from their first instruction (module docstring); returned for chaining."""
    _ForkedChildrenDieWithParent.install()
    inner = loader if isinstance(loader, DataLoader) else getattr(loader, "dataset", None)
    if not isinstance(inner, DataLoader):
        raise TypeError(f"{type(loader).__name__} is not a DataLoader (nor a dataset over one)")
    if not isinstance(inner.worker_init_fn, DieWithParent):
        inner.worker_init_fn = DieWithParent(then=inner.worker_init_fn)
    return loader
