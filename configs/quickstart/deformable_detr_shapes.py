# Quickstart (LazyConfig): a small two-stage Deformable-DETR with box refinement trained from scratch on the synthetic
# shapes dataset, on a CPU, with Rank & Sort Loss on every decoder layer and the encoder's proposals: the RT-DETR
# quickstart's twin (rtdetr_shapes.py). python train_net.py --config-file configs/quickstart/deformable_detr_shapes.py
# Hugging Face's two constraints at this size (docs/detr.md, "A tiny two-stage Deformable-DETR"): d_model is a
# multiple of 32 (the input projections' GroupNorm has 32 groups), and two_stage_num_proposals is at most the
# encoder's tokens (336 for a 128 x 128 batch at strides 8, 16 and 32).
from detectron2.config import LazyCall as L

from alrp_d2.engine.detr_optimizer import GradientClippedAdamW, detr_param_groups
from alrp_d2.modeling import HuggingFaceDETR

from ..common.data.shapes import dataloader
from ..common.schedule import step_schedule
from ..common.train import train

# A 4-stage ResNet of 16-128 channels (one basic block per stage), 3 feature levels, a 64-wide encoder of 1 layer
# and 3 decoder layers of 100 queries (and 100 encoder proposals), random init.
model = L(HuggingFaceDETR)(
    hf_config=dict(
        model_type="deformable_detr",
        backbone_config=dict(
            model_type="resnet",
            embedding_size=16,
            hidden_sizes=[16, 32, 64, 128],
            depths=[1, 1, 1, 1],
            layer_type="basic",
            out_features=["stage2", "stage3", "stage4"],
        ),
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        two_stage=True,
        with_box_refine=True,
        auxiliary_loss=True,
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
    ),
    num_classes=5,
    criterion="RankSortCriterion",
    loss_options=dict(),
    pixel_mean=[123.675, 116.28, 103.53],  # ImageNet's, RGB (HF's Deformable-DETR)
    pixel_std=[58.395, 57.12, 57.375],
    input_format="RGB",
    num_detections=100,
)
dataloader.train.mapper.image_format = "RGB"
dataloader.test.mapper.image_format = "RGB"

# Deformable-DETR's optimiser: AdamW, the backbone at a tenth of the learning rate, the sampling offsets and reference
# points at 0.1x, no weight decay on norms and embeddings, gradients clipped to norm 0.1.
optimizer = L(GradientClippedAdamW)(
    params=L(detr_param_groups)(
        model=None,
        base_lr="${..lr}",
        weight_decay="${..weight_decay}",
        lr_factors={"sampling_offsets": 0.1, "reference_points": 0.1},
    ),
    lr=1e-3,
    weight_decay=1e-4,
    max_norm=0.1,
)
train.max_iter = 400
lr_multiplier = step_schedule([320], warmup_iters=50)
train.checkpointer.period = 400
train.eval_period = 0
train.seed = 42
train.device = "cpu"
train.output_dir = "output/quickstart_deformable_detr"
