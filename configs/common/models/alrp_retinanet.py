# aLRP RetinaNet (Oksuz et al., NeurIPS 2020, Sec. 5): detectron2's RetinaNet (common/models/retinanet.py) trained by
# one aLRP Loss over all anchors x classes, on the official network: torchvision ResNet-50, octave base 4 with 2 scales
# per octave and 3 aspect ratios (App. G.2), box coding (10, 10, 5, 5), the official test order. The yacs twin is
# configs/alrp_R50_500.yaml (Base-Official-RetinaNet.yaml).
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import alrp_loss
from alrp_d2.modeling import AlrpRetinaNet, MinIoULowQualityMatcher

from .official_network import octave_anchors, use_official_fpn
from .torchvision_resnet import use_torchvision_resnet

model = use_official_fpn(use_torchvision_resnet(get_config("common/models/retinanet.py").model))
model._target_ = AlrpRetinaNet
model.ranking_loss = alrp_loss("retinanet")
model.anchor_generator = octave_anchors(4.0, 2, [0.5, 1.0, 2.0], strides=[8, 16, 32, 64, 128])
model.head.num_anchors = 6
model.box2box_transform.weights = (10.0, 10.0, 5.0, 5.0)
# MaxIoUAssigner: a low-quality positive goes to the ground truth it is the best anchor of.
model.anchor_matcher = L(MinIoULowQualityMatcher)(
    thresholds=[0.4, 0.5], labels=[0, -1, 1], min_iou=0.0, low_quality_gt="best_anchor"
)
model.official_inference = True
model.smooth_l1_beta = 0.1  # yacs MODEL.RETINANET.SMOOTH_L1_LOSS_BETA (read by AP Loss's Smooth L1 only)
model.keep_empty_detections = True
