# RS Mask R-CNN, ResNet-50 FPN, 1x (official ranksort_mask_rcnn_r50_fpn_1x_coco.py): 40.0 box AP and 36.4 mask AP on
# COCO minival (official README). RS R-CNN's recipe with the mask head trained as the official RankBasedFCNMaskHead:
# a Dice loss weighted by the box head's scores and balanced by its RS Loss, on at most 200 positives per GPU.
# Twin: configs/rs_mask_rcnn_R50_FPN_1x.yaml.
from ..common.data.mmdet_800 import dataloader
from ..common.models.rs_rcnn import mask_rcnn as model
from ..common.models.torchvision_resnet import TORCHVISION_R50
from ..common.optim import SGD as optimizer
from ..common.schedule import RS_1X_MAX_ITER
from ..common.schedule import lr_multiplier_rs_1x as lr_multiplier
from ..common.train import train

dataloader.train.mapper.use_instance_mask = True
optimizer.lr = 0.012
train.max_iter = RS_1X_MAX_ITER
train.checkpointer.period = 7330
train.init_checkpoint = TORCHVISION_R50
