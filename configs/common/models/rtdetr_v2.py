# RT-DETR v2 with a ResNet-50-vd (Lv et al., 2024, "RT-DETRv2-L", rtdetrv2_r50vd_6x_coco.yml) as Hugging Face builds
# it (RTDetrV2Config's defaults are this network: a 256-wide hybrid encoder, 6 decoder layers of 300 queries, 100
# denoising queries), in HuggingFaceDETR, with its optimiser: AdamW at 1e-4, the backbone at 1e-5, weight decay 1e-4
# except on normalisation layers and embeddings, gradients clipped to norm 0.1.
# The published network starts from ImageNet weights of a ResNet-50-vd (PaddleClas's) that Hugging Face does not ship
# as a backbone: set model.pretrained to a save_pretrained folder or a hub id (e.g. "PekingU/rtdetr_v2_r50vd", the
# COCO model) to start from weights; "" trains from random init.
from detectron2.config import LazyCall as L

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.detr import SetRankingLoss
from alrp_d2.engine.detr_optimizer import GradientClippedAdamW, detr_param_groups
from alrp_d2.modeling import HuggingFaceDETR

model = L(HuggingFaceDETR)(
    hf_config=dict(
        model_type="rt_detr_v2",
        backbone_config=dict(
            model_type="rt_detr_resnet",
            embedding_size=64,
            hidden_sizes=[256, 512, 1024, 2048],
            depths=[3, 4, 6, 3],
            layer_type="bottleneck",
            out_features=["stage2", "stage3", "stage4"],
        ),
    ),
    pretrained="",
    num_classes=80,
    loss=L(SetRankingLoss)(
        criterion=L(RankSortCriterion)(delta=0.5, loc_error_kind="giou"), box_terms="value_balanced"
    ),
    pixel_mean=[0.0, 0.0, 0.0],  # HF's RT-DETR takes RGB pixels / 255
    pixel_std=[255.0, 255.0, 255.0],
    input_format="RGB",
    num_detections=300,
)
optimizer = L(GradientClippedAdamW)(
    params=L(detr_param_groups)(model=None, base_lr="${..lr}", weight_decay="${..weight_decay}"),
    lr=1e-4,
    betas=(0.9, 0.999),
    weight_decay=1e-4,
    max_norm=0.1,
)
