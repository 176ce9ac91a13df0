"""docs/detr.md's examples, one per family, each train a tiny random-init model through HF's own forward with a
ranking criterion, as written: RT-DETR (then its own loss restored), D-FINE, RF-DETR, Deformable-DETR, DETR."""

from __future__ import annotations

import pytest
import torch
from transformers.loss.loss_utils import LOSS_MAPPING

from alrp_d2.detr.hf_loss_function import RankingLossFunction

from .docs_example import PAGE, docs_examples

#: Per example: the model's class, its box terms mode, and a key of its last step's loss_dict.
EXPECTED = [
    ("RTDetrForObjectDetection", "model", "loss_rank_dn_0"),
    ("DFineForObjectDetection", "model", "loss_fgl_aux_0"),
    ("RfDetrForObjectDetection", "model", "loss_rank_enc"),
    ("DeformableDetrForObjectDetection", "value_balanced", "loss_rank_enc"),
    ("DetrForObjectDetection", "model", "loss_rank_0"),
]


def test_one_example_per_family():
    assert len(docs_examples()) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_the_docs_example_runs_as_written(index, capsys):
    namespace: dict = {}
    exec(compile(docs_examples()[index], str(PAGE), "exec"), namespace)
    model, outputs = namespace["model"], namespace["outputs"]
    name, box_terms, key = EXPECTED[index]
    assert type(model).__name__ == name
    assert torch.isfinite(outputs.loss) and key in outputs.loss_dict and "loss_rank" in outputs.loss_dict
    assert "loss_rank" in capsys.readouterr().out
    if index == 0:  # restored
        assert model.loss_function is LOSS_MAPPING["RTDetrForObjectDetection"]
    else:
        assert isinstance(model.loss_function, RankingLossFunction) and model.loss_function.loss.box_terms == box_terms
