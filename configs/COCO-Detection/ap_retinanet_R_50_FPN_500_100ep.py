# The official AP Loss RetinaNet (ap_loss_retinanet_r50_fpn_100e_coco500.py; official README 35.4 AP on minival, paper
# Table 2 35.5): the interpolated AP Loss + Smooth L1 (beta 1) on the encoded deltas, lr 0.002, otherwise aLRPLoss500.
# Twin: configs/ap_R50_500.yaml.
from alrp_d2.lazy_config import ap_loss

from .alrp_retinanet_R_50_FPN_500_100ep import dataloader, lr_multiplier, model, optimizer, train

model.ranking_loss = ap_loss("retinanet")
model.smooth_l1_beta = 1.0
optimizer.lr = 0.002
