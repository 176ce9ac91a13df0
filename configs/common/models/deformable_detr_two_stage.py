# Two-stage Deformable-DETR with iterative box refinement and a ResNet-50 (Zhu et al., ICLR 2021) as Hugging Face
# builds it (DeformableDetrConfig: 6 + 6 layers of width 256, 4 feature levels, 300 queries and proposals), every
# decoder layer trained (auxiliary_loss), in HuggingFaceDETR, with its optimiser: AdamW at 2e-4, the backbone at 2e-5,
# the sampling offsets and reference points at 0.1x, weight decay 1e-4, gradients clipped to norm 0.1.
# The published network starts from torchvision's ImageNet ResNet-50: set model.hf_config.backbone to a hub id with
# use_pretrained_backbone=True (e.g. "microsoft/resnet-50"), or model.pretrained to a save_pretrained folder.
from detectron2.config import LazyCall as L

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.detr import SetRankingLoss
from alrp_d2.engine.detr_optimizer import GradientClippedAdamW, detr_param_groups
from alrp_d2.modeling import HuggingFaceDETR

model = L(HuggingFaceDETR)(
    hf_config=dict(
        model_type="deformable_detr",
        backbone_config=dict(
            model_type="resnet",
            embedding_size=64,
            hidden_sizes=[256, 512, 1024, 2048],
            depths=[3, 4, 6, 3],
            layer_type="bottleneck",
            out_features=["stage2", "stage3", "stage4"],
        ),
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        two_stage=True,
        with_box_refine=True,
        auxiliary_loss=True,
    ),
    pretrained="",
    num_classes=80,
    loss=L(SetRankingLoss)(
        criterion=L(RankSortCriterion)(delta=0.5, loc_error_kind="giou"), box_terms="value_balanced"
    ),
    pixel_mean=[123.675, 116.28, 103.53],  # ImageNet's, RGB
    pixel_std=[58.395, 57.12, 57.375],
    input_format="RGB",
    num_detections=100,
)
optimizer = L(GradientClippedAdamW)(
    params=L(detr_param_groups)(
        model=None,
        base_lr="${..lr}",
        weight_decay="${..weight_decay}",
        weight_decay_norm=1e-4,
        weight_decay_embed=1e-4,
        lr_factors={"sampling_offsets": 0.1, "reference_points": 0.1},
    ),
    lr=2e-4,
    weight_decay=1e-4,
    max_norm=0.1,
)
