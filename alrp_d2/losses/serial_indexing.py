"""Gathers of the per-positive tensors that stay on the calling thread.

On the CPU, PyTorch's advanced indexing (``table[index]``) and ``gather`` split even a few thousand entries over
the intra-op threads and wait for every one of them, so that on a machine whose cores are busy each call can wait for
a descheduled thread; ``index_select`` runs such sizes on the calling thread (``benchmarks/serial_gathers.py``,
figures in docs/performance.md). The losses' O(P) work makes over a hundred small gathers per call (Rank & Sort
Loss's sorting relations most of them), all through :func:`take_rows`. ``searchsorted`` splits over the threads
from 200 queries as well; the losses make 3 to 9 such calls per call and keep them.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["take_rows"]


def take_rows(table: Tensor, index: Tensor) -> Tensor:
    """``table[index]`` for an integer ``index`` of any shape: rows of ``table``'s first dimension."""
    return torch.index_select(table, 0, index.reshape(-1)).view(*index.shape, *table.shape[1:])
