"""The event writers of a training run: progress lines, metrics.json (read by tools/plot_training.py) and
TensorBoard."""

from __future__ import annotations

import os
from typing import List

from detectron2.utils.events import CommonMetricPrinter, EventWriter, JSONWriter, TensorboardXWriter
from detectron2.utils.file_io import PathManager

__all__ = ["alrp_writers"]


def alrp_writers(output_dir: str, max_iter: int, period: int) -> List[EventWriter]:
    """detectron2's writers, with metrics.json smoothed over ``period`` iterations (the logging period; detectron2
    fixes 20): a resumed run logs the same values when the checkpoint period is a multiple of it."""
    PathManager.mkdirs(output_dir)
    return [
        CommonMetricPrinter(max_iter, window_size=period),
        JSONWriter(os.path.join(output_dir, "metrics.json"), window_size=period),
        TensorboardXWriter(output_dir, window_size=period),
    ]
