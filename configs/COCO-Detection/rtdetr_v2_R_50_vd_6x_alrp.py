# RT-DETR v2 R50-vd trained by aLRP Loss (delta 1, its own localisation term of the E_loc inside its ranking, and the
# L1 term, both balanced to the ranking loss's value); otherwise the varifocal recipe. Not trained here.
from detectron2.config import LazyCall as L

from alrp_d2.criteria import AlrpCriterion
from alrp_d2.detr import SetRankingLoss

from .rtdetr_v2_R_50_vd_6x_varifocal import dataloader, lr_multiplier, model, optimizer, train

# A Hungarian matching has no positive-labelling IoU threshold: tau 0 in E_loc = (1 - GIoU) / 2 / (1 - tau).
model.loss = L(SetRankingLoss)(criterion=L(AlrpCriterion)(delta=1.0, loc_error_kind="giou", tau=0.0), box_terms="own")
train.output_dir = "output/rtdetr_v2_R_50_vd_6x_alrp"
