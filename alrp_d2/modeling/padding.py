"""Per-image tensors of different lengths as one padded batch tensor."""

from __future__ import annotations

from typing import List

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

__all__ = ["pad_per_image", "valid_entries"]


def pad_per_image(values: List[Tensor], padding_value: float) -> Tensor:
    """(N, G, ...) the per-image (G_n, ...) tensors padded to G = max(1, max G_n), so that index 0
    is valid for every image. No host synchronisation: the lengths are the tensors' shapes."""
    # A one-row dummy sequence keeps G >= 1 when no image has a row.
    dummy = values[0].new_full((1, *values[0].shape[1:]), padding_value)
    return pad_sequence([*values, dummy], batch_first=True, padding_value=padding_value)[:-1]


def valid_entries(counts: List[int], width: int, device: torch.device) -> Tensor:
    """(N, width) bool, True in the first ``counts[n]`` entries of row n: the real rows of a batch padded by
    :func:`pad_per_image`. Made on ``device`` without copying the counts from the host (a copy to a GPU from
    pageable memory waits for the device)."""
    rows = [torch.ones(count, dtype=torch.bool, device=device) for count in counts]
    width_row = torch.zeros(width, dtype=torch.bool, device=device)
    return pad_sequence([*rows, width_row], batch_first=True, padding_value=False)[:-1]
