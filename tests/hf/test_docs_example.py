"""docs/detr.md's example trains a tiny RT-DETR with Rank & Sort Loss through HF's own forward."""

from __future__ import annotations

import torch

from alrp_d2.detr.hf_loss_function import RankingLossFunction

from .docs_example import PAGE, docs_example


def test_the_docs_example_runs_as_written(capsys):
    namespace: dict = {}
    exec(compile(docs_example(), str(PAGE), "exec"), namespace)
    model, outputs = namespace["model"], namespace["outputs"]
    assert isinstance(model._loss_function, RankingLossFunction)
    assert torch.isfinite(outputs.loss) and "loss_rank_dn_0" in outputs.loss_dict
    assert "loss_rank" in capsys.readouterr().out
