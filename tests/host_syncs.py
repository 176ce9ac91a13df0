"""Counting the operations that make the host wait for the device (host synchronisations).

On a GPU, reading a value computed on the device (``.item()``, ``.tolist()``, ``bool(tensor)``) or
producing a tensor whose size depends on values (``nonzero``, boolean-mask indexing,
``masked_select``, ``unique``, ``bincount``) blocks the host until the device has caught up. The
counter sees these operations on any device, so a CPU run counts the synchronisations a GPU run
would make. Each one is attributed to the code that issued it: the innermost frame of alrp_d2 or
detectron2, where detectron2's small helpers (``detectron2/layers/wrappers.py``,
``detectron2/structures/``) count for their caller.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any, Dict, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostSyncCounter"]

aten = torch.ops.aten

#: aten operations whose output size or value the host must read.
_SYNC_OPS = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.argwhere.default,
    aten.masked_select.default,
    aten.bincount.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.repeat_interleave.Tensor,
    aten.equal.default,
    aten.is_nonzero.default,
}
#: Tensor methods that copy a device tensor to the host (not dispatched as aten operations).
_SYNC_METHODS = {"tolist", "numpy", "cpu"}

_PROJECT = os.sep + "alrp_d2" + os.sep
_DETECTRON2 = os.sep + "detectron2" + os.sep
_TRANSPARENT = (os.sep + "detectron2" + os.sep + "layers" + os.sep + "wrappers.py", _DETECTRON2 + "structures" + os.sep)


def _owner(frame: Any) -> Optional[str]:
    """'alrp_d2' or 'detectron2' for the innermost frame of either (detectron2's helpers are
    transparent), None for code of neither."""
    while frame is not None:
        path = frame.f_code.co_filename
        if _PROJECT in path:
            return "alrp_d2"
        if _DETECTRON2 in path and not any(part in path for part in _TRANSPARENT):
            return "detectron2"
        frame = frame.f_back
    return None


def _has_bool_index(args: Any) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, counter: HostSyncCounter):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # repeat_interleave reads its output's size unless the caller gives it.
        sized = func is aten.repeat_interleave.Tensor and (kwargs or {}).get("output_size") is not None
        syncs = (func in _SYNC_OPS and not sized) or (
            func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default) and _has_bool_index(args)
        )
        if syncs:
            self.counter._record(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


class _MethodCounter(TorchFunctionMode):
    def __init__(self, counter: HostSyncCounter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in _SYNC_METHODS:
            self.counter._record(func.__name__)
        return func(*args, **(kwargs or {}))


class HostSyncCounter:
    """Counts host synchronisations inside a ``with`` block, by owner ('alrp_d2', 'detectron2',
    None) and by owner and operation.

    Example::

        with HostSyncCounter() as syncs:
            losses = model(batch); sum(losses.values()).backward()
        syncs.total("alrp_d2")
    """

    def __init__(self) -> None:
        self.by_owner: Counter = Counter()
        self.by_operation: Dict[Optional[str], Counter] = {}
        self._modes: list = []

    def _record(self, operation: str) -> None:
        owner = _owner(sys._getframe(2))
        self.by_owner[owner] += 1
        self.by_operation.setdefault(owner, Counter())[operation] += 1

    def total(self, owner: Optional[str] = "alrp_d2") -> int:
        return self.by_owner[owner]

    def __enter__(self) -> HostSyncCounter:
        self._modes = [_MethodCounter(self), _DispatchCounter(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
