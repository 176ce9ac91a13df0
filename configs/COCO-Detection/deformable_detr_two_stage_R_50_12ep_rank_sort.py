# Two-stage Deformable-DETR R50, 12 epochs, trained by Rank & Sort Loss on every decoder layer and the encoder's
# proposals (delta 0.5, the ranking term weighted 2 and the L1 and GIoU terms balanced to its value: BRS-DETR's layer
# loss); otherwise the focal recipe. Not trained here.
from detectron2.config import LazyCall as L

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.detr import SetRankingLoss

from .deformable_detr_two_stage_R_50_12ep_focal import dataloader, lr_multiplier, model, optimizer, train

model.loss = L(SetRankingLoss)(
    criterion=L(RankSortCriterion)(delta=0.5, loc_error_kind="giou"), box_terms="value_balanced", rank_weight=2.0
)
train.output_dir = "output/deformable_detr_two_stage_R_50_12ep_rank_sort"
