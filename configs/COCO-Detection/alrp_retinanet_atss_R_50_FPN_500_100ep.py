# aLRPLoss500, ResNet-50, ATSS (official alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py; official README 41.0 AP on
# minival, paper Table 6 41.3 on test-dev): one aspect ratio, ATSS assignment, lr steps at epochs 75 and 95.
# Twin: configs/alrp_R50_ATSS_500.yaml.
from detectron2.config import LazyCall as L

from alrp_d2.modeling import AtssMatcher

from ..common.models.official_network import octave_anchors
from ..common.schedule import lr_multiplier_100ep as lr_multiplier
from .alrp_retinanet_R_50_FPN_500_100ep import dataloader, model, optimizer, train

model.anchor_generator = octave_anchors(4.0, 2, [1.0], strides=[8, 16, 32, 64, 128])
model.head.num_anchors = 2
model.anchor_matcher = L(AtssMatcher)(topk=9)
