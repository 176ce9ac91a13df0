# Quickstart (LazyConfig): a small RT-DETR v2 trained from scratch on the synthetic shapes dataset, on a CPU, with
# Rank & Sort Loss. python train_net.py --config-file configs/quickstart/rtdetr_shapes.py
# Other losses: model.loss.rank_weight=2.0, model.loss.ranking=global, or model.loss=null (the model's own varifocal
# loss); aLRP Loss as configs/COCO-Detection/rtdetr_v2_R_50_vd_6x_alrp.py. docs/detr.md, "detectron2 detectors".
from detectron2.config import LazyCall as L

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.detr import SetRankingLoss
from alrp_d2.engine.detr_optimizer import GradientClippedAdamW, detr_param_groups
from alrp_d2.modeling import HuggingFaceDETR

from ..common.data.shapes import dataloader
from ..common.schedule import step_schedule
from ..common.train import train

# RT-DETR v2 (Lv et al., 2024) with a 4-stage ResNet-vd of 16-128 channels (one block per stage), a 64-wide
# one-layer hybrid encoder and 3 decoder layers of 100 queries and 30 denoising queries, random init. The
# backbone's BatchNorm trains (HF's RT-DETR freezes it, for ImageNet weights).
RESNET_VD = dict(
    model_type="rt_detr_resnet",
    embedding_size=16,
    hidden_sizes=[16, 32, 64, 128],
    depths=[1, 1, 1, 1],
    layer_type="basic",
    out_features=["stage2", "stage3", "stage4"],
)
model = L(HuggingFaceDETR)(
    hf_config=dict(
        model_type="rt_detr_v2",
        backbone_config=RESNET_VD,
        freeze_backbone_batch_norms=False,
        encoder_in_channels=[32, 64, 128],
        encoder_hidden_dim=64,
        encoder_ffn_dim=128,
        encoder_attention_heads=4,
        hidden_expansion=0.5,
        d_model=64,
        decoder_in_channels=[64, 64, 64],
        decoder_ffn_dim=128,
        decoder_attention_heads=4,
        decoder_layers=3,
        decoder_n_points=4,
        num_queries=100,
        num_denoising=30,
    ),
    num_classes=5,
    loss=L(SetRankingLoss)(
        criterion=L(RankSortCriterion)(delta=0.5, loc_error_kind="giou"), box_terms="value_balanced"
    ),
    pixel_mean=[0.0, 0.0, 0.0],  # HF's RT-DETR takes RGB pixels / 255
    pixel_std=[255.0, 255.0, 255.0],
    input_format="RGB",
    num_detections=100,
)
dataloader.train.mapper.image_format = "RGB"
dataloader.test.mapper.image_format = "RGB"

# RT-DETR's optimiser: AdamW, the backbone at a tenth of the learning rate, no weight decay on norms and
# embeddings, gradients clipped to norm 0.1.
optimizer = L(GradientClippedAdamW)(
    params=L(detr_param_groups)(model=None, base_lr="${..lr}", weight_decay="${..weight_decay}"),
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
train.output_dir = "output/quickstart_rtdetr"
