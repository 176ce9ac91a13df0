# Quickstart (LazyConfig): a small two-stage Deformable-DETR with box refinement trained from scratch on the synthetic
# shapes dataset, on a CPU, with Rank & Sort Loss on every decoder layer and the encoder's proposals: the RT-DETR
# quickstart's twin (its data, schedule and training settings). python train_net.py --config-file
# configs/quickstart/deformable_detr_shapes.py
# Hugging Face's two constraints at this size (docs/detr.md, "A tiny two-stage Deformable-DETR"): d_model is a
# multiple of 32 (the input projections' GroupNorm has 32 groups), and two_stage_num_proposals is at most the
# encoder's tokens (336 for a 128 x 128 batch at strides 8, 16 and 32).
from ..common.models.deformable_detr_two_stage import model, optimizer
from .rtdetr_shapes import dataloader, lr_multiplier, train

# The recipe's network (common/models/deformable_detr_two_stage.py) with a 4-stage ResNet of 16-128 channels (one
# basic block per stage), 3 feature levels, a 64-wide encoder of 1 layer and 3 decoder layers of 100 queries (and
# 100 encoder proposals), random init; the recipe's optimiser at the RT-DETR quickstart's learning rate.
model.hf_config.backbone_config.update(
    embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], layer_type="basic"
)
model.hf_config.update(
    d_model=64,
    encoder_layers=1,
    decoder_layers=3,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    num_feature_levels=3,
    encoder_n_points=4,
    decoder_n_points=4,
    num_queries=100,
    two_stage_num_proposals=100,
)
model.num_classes = 5
optimizer.lr = 1e-3
train.output_dir = "output/quickstart_deformable_detr"
