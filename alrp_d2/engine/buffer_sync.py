"""One model for evaluation and saving in a multi-worker run: detectron2 trains with DDP's
``broadcast_buffers=False``, so every worker keeps its own BatchNorm running statistics, while the checkpoint holds
the main process's. Before an evaluation every worker takes the main process's buffers, so that the metrics at the
end of training are those of the saved model (``--eval-only`` on it gives the same)."""

from __future__ import annotations

import torch.distributed as dist
from detectron2.utils import comm
from torch import nn

__all__ = ["broadcast_buffers_from_main"]


def broadcast_buffers_from_main(model: nn.Module) -> None:
    """Copies the main process's buffers (BatchNorm statistics, the self-balance weights) into every worker's model;
    nothing in a single process. Every worker must call it (a collective). Training is unaffected: BatchNorm uses
    the batch's statistics while it trains."""
    if comm.get_world_size() == 1:
        return
    for buffer in model.buffers():
        dist.broadcast(buffer.data, src=0)
