# The official two-stage network of aLRP Faster R-CNN and RS R-CNN (mmdetection 2.x; yacs Base-Official-FasterRCNN.yaml
# and Base-RankSort-RCNN.yaml): detectron2's Mask R-CNN (common/models/mask_rcnn_fpn.py) without its mask head, on the
# official network, RPN anchors 8 x stride, box coding (10, 10, 5, 5) in both stages, the official RPN assigner
# (low-quality matches at IoU >= 0.3 to the ground truth they are the best anchor of), zero-area proposals kept, the
# official box head initialisation and the detections that clipping made empty kept. Losses: ranked_rcnn.
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.modeling import AlrpGeneralizedRCNN, MinIoULowQualityMatcher, XavierUniformFCHead

from .official_network import octave_anchors, use_official_fpn
from .torchvision_resnet import use_torchvision_resnet

model = use_official_fpn(use_torchvision_resnet(get_config("common/models/mask_rcnn_fpn.py").model))
model._target_ = AlrpGeneralizedRCNN
model.keep_empty_detections = True
for mask_key in ("mask_in_features", "mask_pooler", "mask_head"):
    del model.roi_heads[mask_key]
rpn = model.proposal_generator
rpn.anchor_generator = octave_anchors(8.0, 1, [0.5, 1.0, 2.0], strides=[4, 8, 16, 32, 64])
rpn.anchor_matcher = L(MinIoULowQualityMatcher)(
    thresholds=[0.3, 0.7], labels=[0, -1, 1], min_iou=0.3, low_quality_gt="best_anchor"
)
rpn.box2box_transform.weights = (10.0, 10.0, 5.0, 5.0)
rpn.min_box_size = -1
model.roi_heads.box_head._target_ = XavierUniformFCHead
model.roi_heads.box_predictor.test_nms_thresh = 0.5
