# aLRP FCOS, ResNet-50 (MSRA), in the aLRP 500 setting: 512 x 512 SSD-style training, test at 500 / 833 (detectron2's
# resize and training set), batch 32, lr 0.008 divided by 10 at epochs 75 and 95. No published figure.
# Twin: configs/alrp_fcos_R50_500.yaml.
import detectron2.data.transforms as T
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from ..common.data.ssd512 import dataloader
from ..common.models.alrp_fcos import model
from ..common.optim import SGD as optimizer
from ..common.schedule import ALRP_100EP_MAX_ITER
from ..common.schedule import lr_multiplier_100ep as lr_multiplier
from ..common.train import train

model.backbone.bottom_up.freeze_at = 2
# detectron2's BGR ImageNet ResNet: the SSD augmentation's fill follows the pixel mean.
dataloader.train.mapper.image_format = "BGR"
dataloader.train.mapper.augmentations[1].fill = get_config("common/data/constants.py").constants.imagenet_bgr256_mean
dataloader.train.dataset = dataloader.train.dataset.dataset_dicts
dataloader.train.dataset.filter_empty = True
dataloader.test.mapper.augmentations = [L(T.ResizeShortestEdge)(short_edge_length=500, max_size=833)]
optimizer.lr = 0.008
optimizer.params.weight_decay_norm = 0.0
train.max_iter = ALRP_100EP_MAX_ITER
train.self_balance_period = 3665
train.checkpointer.period = 18325
train.init_checkpoint = "detectron2://ImageNetPretrained/MSRA/R-50.pkl"
