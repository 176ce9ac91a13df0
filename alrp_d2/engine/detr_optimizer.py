"""The optimiser of the DETR recipes: detectron2's ``get_default_optimizer_params`` with the published parameter
groups (the backbone's learning rate a fraction of the rest, no weight decay on normalisation layers and embeddings,
Deformable-DETR's smaller learning rate of the sampling offsets and reference points), and AdamW clipping the global
gradient norm before each step (RT-DETR's ``clip_max_norm`` 0.1, Deformable-DETR's 0.1)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

import torch
from detectron2.solver.build import get_default_optimizer_params, reduce_param_groups
from torch import nn

__all__ = ["GradientClippedAdamW", "detr_param_groups"]


def detr_param_groups(
    model: nn.Module,
    base_lr: float,
    weight_decay: float,
    backbone_lr_factor: float = 0.1,
    weight_decay_norm: float = 0.0,
    weight_decay_embed: float = 0.0,
    lr_factors: Optional[Mapping[str, float]] = None,
) -> List[Dict[str, Any]]:
    """The parameter groups of ``model`` (a :class:`~alrp_d2.modeling.HuggingFaceDETR`):

    - learning rate ``base_lr``, times ``backbone_lr_factor`` for a parameter of the backbone (a name with
      ``.backbone.``), times ``lr_factors[key]`` for a name that contains ``key`` (Deformable-DETR:
      ``{"sampling_offsets": 0.1, "reference_points": 0.1}``);
    - weight decay ``weight_decay``; ``weight_decay_norm`` for the parameters of normalisation layers (detectron2's
      list: BatchNorm, GroupNorm, LayerNorm, ...) and ``weight_decay_embed`` for those of ``nn.Embedding`` layers
      (the queries' and the denoising classes' embeddings).
    """
    factors = dict(lr_factors or {})

    def lr_factor(name: str) -> float:
        factor = backbone_lr_factor if ".backbone." in f".{name}" else 1.0
        for key, value in factors.items():
            if key in name:
                factor *= value
        return factor

    groups = get_default_optimizer_params(
        model,
        base_lr=base_lr,
        weight_decay=weight_decay,
        weight_decay_norm=weight_decay_norm,
        lr_factor_func=lr_factor,
    )
    embeddings = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    split: List[Dict[str, Any]] = []
    for group in groups:
        for parameter in group["params"]:
            embedding = {"weight_decay": weight_decay_embed} if id(parameter) in embeddings else {}
            split.append({**group, "params": [parameter], **embedding})
    return reduce_param_groups(split)


class GradientClippedAdamW(torch.optim.AdamW):
    """AdamW whose ``step`` first clips the gradients of all its parameters to a global L2 norm of at most
    ``max_norm`` (``torch.nn.utils.clip_grad_norm_``; DETR's ``clip_max_norm``)."""

    def __init__(self, params: Iterable[Any], max_norm: float, **kwargs: Any):
        if not max_norm > 0:
            raise ValueError(f"GradientClippedAdamW(max_norm={max_norm!r}): must be > 0")
        super().__init__(params, **kwargs)
        self.max_norm = max_norm

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        parameters = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(parameters, self.max_norm)
        return super().step(closure)
