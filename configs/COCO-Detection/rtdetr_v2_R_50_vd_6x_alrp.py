# RT-DETR v2 R50-vd trained by aLRP Loss (delta 1, its own localisation term of the E_loc inside its ranking, and the
# L1 term, both balanced to the ranking loss's value); otherwise the varifocal recipe. Not trained here.
from .rtdetr_v2_R_50_vd_6x_varifocal import dataloader, lr_multiplier, model, optimizer, train

model.criterion = "AlrpCriterion"
model.loss_options = dict(box_terms="own")
train.output_dir = "output/rtdetr_v2_R_50_vd_6x_alrp"
