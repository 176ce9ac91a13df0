"""Every LazyConfig recipe of configs/ loads, builds a model trained by the project's losses and takes a finite
training step (at test scale: tests/d2/lazy_configs.py); those with a yacs twin are compared with it in
test_lazyconfig_twins.py, the others (the flagship recipes) step here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from detectron2.config import instantiate
from detectron2.utils.events import EventStorage

from alrp_d2.criteria import CorrelationTerm
from alrp_d2.detr import SetRankingLoss
from alrp_d2.modeling import HeadRankingLoss

from .lazy_configs import FLAGSHIPS, OWN_LOSS, TWINS, load_lazy, tiny_lazy
from .tiny_configs import CONFIG_DIR, tiny_batch, with_masks


def recipes():
    root = Path(CONFIG_DIR)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if p.parts[len(root.parts)] != "common")


def test_every_recipe_is_tested():
    assert recipes() == sorted([name for name, _ in TWINS] + list(FLAGSHIPS))


def uses_our_losses(model: torch.nn.Module) -> bool:
    return any(isinstance(m, (HeadRankingLoss, SetRankingLoss)) for m in model.modules()) or isinstance(
        getattr(model, "correlation", None), CorrelationTerm
    )


@pytest.mark.parametrize("name", sorted(FLAGSHIPS))
def test_flagship_recipe_builds_and_takes_a_finite_step(name):
    if "ViTDet" in name:
        pytest.importorskip("timm", reason="detectron2's ViT needs timm: pip install -e '.[vitdet]'")
    if "detr" in name:
        pytest.importorskip("transformers", reason="HuggingFaceDETR needs transformers: pip install -e '.[detr]'")
    cfg = FLAGSHIPS[name](tiny_lazy(load_lazy(name)))
    torch.manual_seed(0)
    model = instantiate(cfg.model)
    assert uses_our_losses(model) == (name not in OWN_LOSS)
    cfg.optimizer.params.model = model
    optimizer = instantiate(cfg.optimizer)
    model.train()
    with EventStorage():
        losses = model(with_masks(tiny_batch()))
    total = sum(losses.values())
    assert all(math.isfinite(value.item()) for value in losses.values()), losses
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
