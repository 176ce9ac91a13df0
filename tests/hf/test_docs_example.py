"""docs/detr.md's example trains a tiny RT-DETR with Rank & Sort Loss through HF's own forward, then restores its
own loss."""

from __future__ import annotations

import torch
from transformers.loss.loss_utils import LOSS_MAPPING

from .docs_example import PAGE, docs_example


def test_the_docs_example_runs_as_written(capsys):
    namespace: dict = {}
    exec(compile(docs_example(), str(PAGE), "exec"), namespace)
    model, outputs = namespace["model"], namespace["outputs"]
    assert model.loss_function is LOSS_MAPPING["RTDetrForObjectDetection"]
    assert torch.isfinite(outputs.loss) and "loss_rank_dn_0" in outputs.loss_dict
    assert "loss_rank" in capsys.readouterr().out
