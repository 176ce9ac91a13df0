# RS R-CNN, ResNet-50 FPN, 1x (official ranksort_faster_rcnn_r50_fpn_1x_coco.py): 39.6 box AP on COCO minival (official
# README). 12 epochs at batch 16, lr 0.012 divided by 10 at epochs 8 and 11.
# Twin: configs/rs_faster_rcnn_R50_FPN_1x.yaml.
from ..common.data.mmdet_800 import dataloader
from ..common.models.rs_rcnn import faster_rcnn as model
from ..common.models.torchvision_resnet import TORCHVISION_R50
from ..common.optim import SGD as optimizer
from ..common.schedule import RS_1X_MAX_ITER
from ..common.schedule import lr_multiplier_rs_1x as lr_multiplier
from ..common.train import train

optimizer.lr = 0.012
train.max_iter = RS_1X_MAX_ITER
train.checkpointer.period = 7330
train.init_checkpoint = TORCHVISION_R50
