"""The sizes of the tests' tiny random-init Hugging Face DETRs (plain values: importable without transformers), shared
by the models built directly (``hf/tiny_detrs.py``) and through detectron2 (``d2/tiny_detr_detectors.py``)."""

from __future__ import annotations

from typing import Any, Dict

BACKBONE: Dict[str, Any] = {
    "embedding_size": 8,
    "hidden_sizes": [8, 16, 16, 16],
    "depths": [1, 1, 1, 1],
    "layer_type": "basic",
    "out_features": ["stage2", "stage3", "stage4"],
}
RT_DETR_SIZES: Dict[str, Any] = {
    "encoder_in_channels": [16, 16, 16],
    "encoder_hidden_dim": 16,
    "encoder_ffn_dim": 32,
    "encoder_attention_heads": 2,
    "hidden_expansion": 0.5,
    "d_model": 16,
    "decoder_in_channels": [16, 16, 16],
    "decoder_ffn_dim": 32,
    "decoder_attention_heads": 2,
    "decoder_layers": 2,
    "decoder_n_points": 2,
    "num_queries": 12,
    "num_denoising": 8,
}
DEFORMABLE_DETR_SIZES: Dict[str, Any] = {
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "num_feature_levels": 3,
    "encoder_n_points": 2,
    "decoder_n_points": 2,
    "num_queries": 12,
    "two_stage_num_proposals": 12,
    "auxiliary_loss": True,
}
