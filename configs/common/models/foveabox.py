# aLRP FoveaBox (Sec. 5.4, App. G; official alrp_loss_fovea_r50_fpn_4x4_100e_coco500.py): FoveaBox as mmdetection's
# FoveaHead on detectron2's RetinaNet (common/models/retinanet.py) with one square "anchor" per location (the base edge
# of its level), trained by aLRP Loss against the boxes decoded from the clamped targets; official network and test.
# The yacs twin is configs/foveabox_alrp_R50_500.yaml (foveabox_base.yaml).
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config
from detectron2.modeling.anchor_generator import DefaultAnchorGenerator

from alrp_d2.lazy_config import alrp_loss
from alrp_d2.modeling import AlrpFoveaBox
from alrp_d2.modeling.foveabox import FoveaBoxTransform, FoveaMatcher

from .official_network import use_official_fpn
from .torchvision_resnet import use_torchvision_resnet

STRIDES = [8, 16, 32, 64, 128]

model = use_official_fpn(use_torchvision_resnet(get_config("common/models/retinanet.py").model))
model._target_ = AlrpFoveaBox
model.ranking_loss = alrp_loss("fovea")
model.loc_target = "decoded_target"
model.head.num_anchors = 1
model.anchor_generator = L(DefaultAnchorGenerator)(
    sizes=[[16.0], [32.0], [64.0], [128.0], [256.0]], aspect_ratios=[1.0], strides=STRIDES, offset=0.5
)
model.box2box_transform = L(FoveaBoxTransform)(scale_clamp=None)
model.anchor_matcher = L(FoveaMatcher)(
    strides=STRIDES, scale_ranges=[[1, 64], [32, 128], [64, 256], [128, 512], [256, 2048]], sigma=0.4
)
model.focal_loss_alpha = 0.4
model.focal_loss_gamma = 1.5
model.smooth_l1_beta = 0.11
model.clip_to_last_pixel = True
model.keep_empty_detections = True
