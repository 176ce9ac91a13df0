# RS-ATSS (Oksuz et al., ICCV 2021; official ranksort_atss_r50_fpn_1x_coco.py): detectron2's RetinaNet
# (common/models/retinanet.py) with the ATSS head (GroupNorm, a learnt scale per level), ATSS assignment (top 9 per
# level), anchors 4 x stride x 2^(i/3) of one aspect ratio, P6/P7 from P5, trained by one Rank & Sort Loss; official
# network and test. The yacs twin is configs/rs_atss_R50_FPN_1x.yaml.
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import rank_sort_loss
from alrp_d2.modeling import AtssMatcher, LevelScaledRetinaNetHead, RankSortATSS

from .official_network import octave_anchors, use_official_fpn
from .torchvision_resnet import use_torchvision_resnet

model = use_official_fpn(use_torchvision_resnet(get_config("common/models/retinanet.py").model))
model._target_ = RankSortATSS
model.ranking_loss = rank_sort_loss("atss")
model.backbone.top_block.in_feature = "p5"
model.backbone.top_block.in_channels = "${..out_channels}"
model.head._target_ = LevelScaledRetinaNetHead
model.head.norm = "GN"
model.head.num_anchors = 3
model.anchor_generator = octave_anchors(4.0, 3, [1.0], strides=[8, 16, 32, 64, 128])
model.box2box_transform.weights = (10.0, 10.0, 5.0, 5.0)
model.anchor_matcher = L(AtssMatcher)(topk=9)
model.test_nms_thresh = 0.6
model.official_inference = True
model.smooth_l1_beta = 0.1  # yacs MODEL.RETINANET.SMOOTH_L1_LOSS_BETA (read by AP Loss's Smooth L1 only)
model.keep_empty_detections = True
