# aLRPLoss500, ResNet-50, IoU assignment (official alrp_loss_retinanet_r50_fpn_100e_coco500.py; paper Table 2: 38.9 AP
# on minival): 100 epochs at batch 32, lr 0.008 divided by 10 at epochs 60 and 80. Twin: configs/alrp_R50_500.yaml.
from ..common.data.ssd512 import dataloader
from ..common.models.alrp_retinanet import model
from ..common.models.torchvision_resnet import TORCHVISION_R50
from ..common.optim import SGD as optimizer
from ..common.schedule import ALRP_100EP_MAX_ITER
from ..common.schedule import lr_multiplier_100ep_60_80 as lr_multiplier
from ..common.train import train

optimizer.lr = 0.008
train.max_iter = ALRP_100EP_MAX_ITER
train.self_balance_period = 3665
train.checkpointer.period = 18325
train.init_checkpoint = TORCHVISION_R50
