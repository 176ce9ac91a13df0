# RS Cascade R-CNN, ResNet-50 FPN, 1x (ranksort_cascade_rcnn_r50_fpn_1x_coco.py of Rank & Sort Loss and of BRL): 41.3
# box AP on COCO minival in the RS README (no log or model released), 41.1 reported by BRL for its RS baseline.
# RS R-CNN's recipe: 12 epochs at batch 16, lr 0.012 divided by 10 at epochs 8 and 11. Not trained here.
from ..common.data.mmdet_800 import dataloader
from ..common.models.rs_cascade_rcnn import model
from ..common.models.torchvision_resnet import TORCHVISION_R50
from ..common.optim import SGD as optimizer
from ..common.schedule import RS_1X_MAX_ITER
from ..common.schedule import lr_multiplier_rs_1x as lr_multiplier
from ..common.train import train

optimizer.lr = 0.012
train.max_iter = RS_1X_MAX_ITER
train.checkpointer.period = 7330
train.init_checkpoint = TORCHVISION_R50
