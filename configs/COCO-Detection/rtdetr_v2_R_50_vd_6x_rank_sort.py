# RT-DETR v2 R50-vd trained by Rank & Sort Loss on every decoder layer, its denoising queries and the encoder's top-k
# (delta 0.5, the ranking term weighted 2 and the L1 and GIoU terms balanced to its value, as BRS-DETR); otherwise
# the varifocal recipe. Not trained here.
from detectron2.config import LazyCall as L

from alrp_d2.criteria import RankSortCriterion
from alrp_d2.detr import SetRankingLoss

from .rtdetr_v2_R_50_vd_6x_varifocal import dataloader, lr_multiplier, model, optimizer, train

model.loss = L(SetRankingLoss)(
    criterion=L(RankSortCriterion)(delta=0.5, loc_error_kind="giou"), box_terms="value_balanced", rank_weight=2.0
)
train.output_dir = "output/rtdetr_v2_R_50_vd_6x_rank_sort"
