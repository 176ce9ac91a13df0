"""Tiny random-init Hugging Face DETRs (nothing downloaded, no pretrained backbone), a fixed batch and a few
optimizer steps through the model's own ``model(pixel_values=..., labels=...)``."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import torch
from transformers import (
    ConditionalDetrConfig,
    ConditionalDetrForObjectDetection,
    DabDetrConfig,
    DabDetrForObjectDetection,
    DeformableDetrConfig,
    DeformableDetrForObjectDetection,
    Deimv2Config,
    Deimv2ForObjectDetection,
    DetrConfig,
    DetrForObjectDetection,
    DFineConfig,
    DFineForObjectDetection,
    LwDetrConfig,
    LwDetrForObjectDetection,
    LwDetrViTConfig,
    PreTrainedModel,
    ResNetConfig,
    RfDetrConfig,
    RfDetrForObjectDetection,
    RTDetrConfig,
    RTDetrForObjectDetection,
    RTDetrResNetConfig,
    RTDetrV2Config,
    RTDetrV2ForObjectDetection,
    YolosConfig,
    YolosForObjectDetection,
)

from ..tiny_detr_sizes import BACKBONE, DEFORMABLE_DETR_SIZES, RT_DETR_SIZES

NUM_LABELS = 3
IMAGE_SIZE = 64
RT_DETR = {"backbone_config": RTDetrResNetConfig(**BACKBONE), **RT_DETR_SIZES, "num_labels": NUM_LABELS}
DEFORMABLE_DETR = {
    "backbone_config": ResNetConfig(**BACKBONE),
    **DEFORMABLE_DETR_SIZES,
    "dropout": 0.0,
    "num_labels": NUM_LABELS,
}

#: Conditional and DAB-DETR: one ResNet level, 2 decoder layers of 12 queries.
CONDITIONAL_DETR = {
    "backbone_config": ResNetConfig(**BACKBONE),
    **{key: DEFORMABLE_DETR_SIZES[key] for key in ("d_model", "encoder_layers", "decoder_layers", "num_queries")},
    **{key: DEFORMABLE_DETR_SIZES[key] for key in ("encoder_ffn_dim", "decoder_ffn_dim", "auxiliary_loss")},
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "use_timm_backbone": False,
    "use_pretrained_backbone": False,
    "dropout": 0.0,
    "num_labels": NUM_LABELS,
}
#: LW-DETR and RF-DETR: a 2-block ViT / DINOv2 of width 16 (patches of 16 px), one projector level, 2 decoder layers
#: of 2 groups of 6 queries.
LW_DETR = {
    "projector_scale_factors": [1.0],
    "c2f_num_blocks": 1,
    "d_model": 16,
    "decoder_ffn_dim": 32,
    "decoder_n_points": 2,
    "decoder_layers": 2,
    "decoder_self_attention_heads": 2,
    "decoder_cross_attention_heads": 2,
    "num_queries": 6,
    "group_detr": 2,
    "dropout": 0.0,
    "num_labels": NUM_LABELS,
}
VIT = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": IMAGE_SIZE, "patch_size": 16}
LW_DETR_VIT = {**VIT, "mlp_ratio": 2, "pretrain_image_size": IMAGE_SIZE, "window_block_indices": [0], "num_windows": 4}
#: YOLOS: a 2-block ViT of width 16 (patches of 16 px) with 12 detection tokens, the last block's trained (HF's
#: YOLOS with ``auxiliary_loss`` fails in transformers 5.23: it hands ``hidden_states``, None or a tuple, to a Linear).
YOLOS = {
    **{key: VIT[key] for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "patch_size")},
    "intermediate_size": 32,
    "image_size": [IMAGE_SIZE, IMAGE_SIZE],
    "num_detection_tokens": 12,
    "use_mid_position_embeddings": False,
    "num_labels": NUM_LABELS,
}
RF_DETR_DINOV2 = {"model_type": "rf_detr_dinov2", **VIT, "num_windows": 2}

TINY_DETRS: Dict[str, Callable[..., PreTrainedModel]] = {
    "rt_detr": lambda **config: RTDetrForObjectDetection(RTDetrConfig(**{**RT_DETR, **config})),
    "rt_detr_v2": lambda **config: RTDetrV2ForObjectDetection(RTDetrV2Config(**{**RT_DETR, **config})),
    "deformable_detr_two_stage": lambda **config: DeformableDetrForObjectDetection(
        DeformableDetrConfig(**{**DEFORMABLE_DETR, "two_stage": True, "with_box_refine": True, **config})
    ),
    "deformable_detr": lambda **config: DeformableDetrForObjectDetection(
        DeformableDetrConfig(**{**DEFORMABLE_DETR, **config})
    ),
}
#: The models trained with their own box terms only (``box_terms="model"``), with those above.
OWN_BOX_TERMS_DETRS: Dict[str, Callable[..., PreTrainedModel]] = {
    "d_fine": lambda **config: DFineForObjectDetection(DFineConfig(**{**RT_DETR, **config})),
    "deimv2": lambda **config: Deimv2ForObjectDetection(Deimv2Config(**{**RT_DETR, **config})),
    "conditional_detr": lambda **config: ConditionalDetrForObjectDetection(
        ConditionalDetrConfig(**{**CONDITIONAL_DETR, **config})
    ),
    "dab_detr": lambda **config: DabDetrForObjectDetection(DabDetrConfig(**{**CONDITIONAL_DETR, **config})),
    "detr": lambda **config: DetrForObjectDetection(DetrConfig(**{**CONDITIONAL_DETR, **config})),
    "yolos": lambda **config: YolosForObjectDetection(YolosConfig(**{**YOLOS, **config})),
    "lw_detr": lambda **config: LwDetrForObjectDetection(
        LwDetrConfig(**{"backbone_config": LwDetrViTConfig(**LW_DETR_VIT, out_indices=[1, 2]), **LW_DETR, **config})
    ),
    "rf_detr": lambda **config: RfDetrForObjectDetection(
        RfDetrConfig(**{"backbone_config": {**RF_DETR_DINOV2, "out_indices": [1, 2]}, **LW_DETR, **config})
    ),
}

# The suffixes of the loss keys of one forward in training: every decoder layer, the denoising queries of every
# layer (RT-DETR), the encoder's proposals (RT-DETR's top-k, two-stage Deformable-DETR's).
SUFFIXES = {
    "rt_detr": {"", "_aux_0", "_dn_0", "_dn_1", "_enc"},
    "rt_detr_v2": {"", "_aux_0", "_dn_0", "_dn_1", "_enc"},
    "deformable_detr_two_stage": {"", "_aux_0", "_enc"},
    "deformable_detr": {"", "_aux_0"},
}


def tiny_detr(name: str, seed: int = 0, **config: object) -> PreTrainedModel:
    """The tiny model ``name`` of :data:`TINY_DETRS` or :data:`OWN_BOX_TERMS_DETRS` (its config's entries replaced
    by ``config``), seeded, in training mode."""
    torch.manual_seed(seed)
    return {**TINY_DETRS, **OWN_BOX_TERMS_DETRS}[name](**config).train()


def fixed_batch(batch_size: int = 2) -> Dict[str, object]:
    """``pixel_values`` [B, 3, 64, 64] and HF labels: two objects in the first image, one in the second (and an
    image without objects as the third)."""
    generator = torch.Generator().manual_seed(0)
    boxes = [
        torch.tensor([[0.30, 0.30, 0.25, 0.30], [0.70, 0.65, 0.30, 0.25]]),
        torch.tensor([[0.50, 0.45, 0.40, 0.50]]),
        torch.zeros(0, 4),
    ]
    classes = [torch.tensor([0, 2]), torch.tensor([1]), torch.zeros(0, dtype=torch.int64)]
    labels: List[Dict[str, torch.Tensor]] = [
        {"class_labels": c, "boxes": b} for c, b in zip(classes[:batch_size], boxes[:batch_size])
    ]
    pixel_values = torch.rand(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    return {"pixel_values": pixel_values, "labels": labels}


def seeded_forward(model: PreTrainedModel, batch: Dict[str, object], seed: int = 0):
    """``model(**batch)`` with the random draws of the forward (RT-DETR's denoising noise) seeded."""
    torch.manual_seed(seed)
    return model(**batch)


def train_steps(
    model: PreTrainedModel, batch: Dict[str, object], steps: int, lr: float = 1e-2, key: Optional[str] = None
) -> List[float]:
    """The loss of ``batch`` (``outputs.loss``, or ``outputs.loss_dict[key]``) before each of ``steps`` Adam steps and
    after the last one (``steps + 1`` values), every forward seeded alike; asserts finite losses and gradients at
    every step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        outputs = seeded_forward(model, batch)
        assert torch.isfinite(outputs.loss), outputs.loss_dict
        optimizer.zero_grad()
        outputs.loss.backward()
        gradients = [p.grad for p in model.parameters() if p.grad is not None]
        assert gradients and all(torch.isfinite(g).all() for g in gradients)
        optimizer.step()
        losses.append(float((outputs.loss if key is None else outputs.loss_dict[key]).detach()))
    with torch.no_grad():
        outputs = seeded_forward(model, batch)
        losses.append(float(outputs.loss if key is None else outputs.loss_dict[key]))
    return losses


def window_drop(values: Sequence[float], window: int) -> float:
    """How far a trajectory fell: the mean of its first ``window`` values minus the mean of its last ``window``
    (single values are noisy: a DETR's matching changes from step to step)."""
    return sum(values[:window]) / window - sum(values[-window:]) / window
