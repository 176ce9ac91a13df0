"""The trainer sums what the model sums: :class:`~alrp_d2.modeling.HuggingFaceDETR`'s training terms add up to the
HF model's own ``outputs.loss`` with ``box_terms="model"`` on the RT-DETR, D-FINE and Deformable-DETR quickstarts (at
the tests' size), its metrics logged, not summed; and :func:`weighted_hf_terms` does so on the ``loss_dict`` of every
supported HF family, with its own loss and with the ranking loss in place of its classification terms."""

from __future__ import annotations

import pytest
import torch
from detectron2.config import instantiate
from detectron2.utils.events import EventStorage

from alrp_d2.detr import set_prediction_criterion, use_ranking_loss
from alrp_d2.modeling.detr_inputs import detr_batch, hf_labels
from alrp_d2.modeling.huggingface_detr import weighted_hf_terms

from .lazy_configs import FLAGSHIPS, load_lazy, tiny_lazy
from .tiny_detr_detectors import two_sizes

pytest.importorskip("transformers", reason="HuggingFaceDETR needs transformers: pip install -e '.[detr]'")

from ..hf.tiny_detrs import OWN_BOX_TERMS_DETRS, TINY_DETRS, fixed_batch, seeded_forward, tiny_detr  # noqa: E402


def quickstart_model(name: str):
    """The quickstart ``name``'s model at the tests' size, trained by the ranking loss with ``box_terms="model"``."""
    cfg = FLAGSHIPS[f"quickstart/{name}"](tiny_lazy(load_lazy(f"quickstart/{name}")))
    cfg.model.loss.box_terms = "model"
    torch.manual_seed(0)
    return instantiate(cfg.model).train()


@pytest.mark.parametrize("name", ["rtdetr_shapes.py", "dfine_shapes.py", "deformable_detr_shapes.py"])
def test_the_quickstarts_terms_sum_to_the_models_own_total(name):
    model = quickstart_model(name)
    inputs = two_sizes()
    torch.manual_seed(1)
    with EventStorage() as storage:
        terms = model(inputs)
    torch.manual_seed(1)
    batch = detr_batch(inputs, model.pixel_mean, model.pixel_std, model.input_format == "BGR", 32, model.masked)
    outputs = model.detr(
        pixel_values=batch.pixel_values,
        pixel_mask=batch.pixel_mask if model.masked else None,
        labels=hf_labels([x["instances"] for x in inputs], batch.scales),
    )
    torch.testing.assert_close(sum(terms.values()), outputs.loss)
    assert "loss_rank" in terms and all(key.startswith("loss_") for key in terms)
    logged = storage.latest()
    if name == "deformable_detr_shapes.py":  # HF's dict unweighted, with cardinality_error: its raw sum differs
        assert "cardinality_error" in logged and "cardinality_error" in outputs.loss_dict
        assert abs(float(sum(outputs.loss_dict.values()).detach() - outputs.loss.detach())) > 1.0
    else:
        assert not any(key.startswith("cardinality_error") for key in logged)


@pytest.mark.parametrize("ranked", [False, True], ids=["own_loss", "box_terms_model"])
@pytest.mark.parametrize("name", sorted({**TINY_DETRS, **OWN_BOX_TERMS_DETRS}))
def test_every_familys_terms_sum_to_its_own_total(name, ranked):
    model = tiny_detr(name)
    if ranked:
        use_ranking_loss(model, set_prediction_criterion("RankSortCriterion"), box_terms="model")
    outputs = seeded_forward(model, fixed_batch())
    terms, metrics = weighted_hf_terms(model, outputs.loss_dict)
    torch.testing.assert_close(sum(terms.values()), outputs.loss)
    assert set(terms) | set(metrics) == set(outputs.loss_dict)
    assert all(key.startswith("cardinality_error") for key in metrics)
