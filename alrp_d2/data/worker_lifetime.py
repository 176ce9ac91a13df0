"""Data loader workers that end with the process that started them (a rank of a distributed run):
a rank that is killed, even while its workers start, leaves no worker behind.

PyTorch's workers notice a dead parent only between two requests (its ``ManagerWatchdog`` polls
every 5 s, once the worker loop runs); a worker still starting, or busy, lives on. On Linux each
worker asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), then checks
that the parent is still the process that built the loader (it may have died before the request).
Elsewhere only the check runs."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any, Callable, Optional

from torch.utils.data import DataLoader

__all__ = ["DieWithParent", "workers_die_with_parent"]

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class DieWithParent:
    """A DataLoader ``worker_init_fn`` (module docstring), then ``then(worker_id)`` if given. Built
    in the process that iterates the loader (its pid is the parent the workers must have); the
    loader must be iterated from a thread that lives as long as its workers (the signal follows
    the thread that forked them)."""

    def __init__(self, then: Optional[Callable[[int], Any]] = None):
        self.parent = os.getpid()
        self.then = then

    def __call__(self, worker_id: int) -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed in a data loader worker")
        if os.getppid() != self.parent:
            os._exit(1)  # the rank died before the request: nothing would end this worker
        if self.then is not None:
            self.then(worker_id)


def workers_die_with_parent(loader: Any) -> Any:
    """``loader`` (a DataLoader, or detectron2's ``AspectRatioGroupedDataset`` over one) with
    :class:`DieWithParent` before its ``worker_init_fn``; returned for chaining."""
    inner = loader if isinstance(loader, DataLoader) else getattr(loader, "dataset", None)
    if not isinstance(inner, DataLoader):
        raise TypeError(f"{type(loader).__name__} is not a DataLoader (nor a dataset over one)")
    if not isinstance(inner.worker_init_fn, DieWithParent):
        inner.worker_init_fn = DieWithParent(then=inner.worker_init_fn)
    return loader
