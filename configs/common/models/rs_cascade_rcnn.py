# RS Cascade R-CNN (Rank & Sort Loss's and Bucketed Ranking-based Losses' ranksort_cascade_rcnn_r50_fpn_1x_coco.py):
# detectron2's Cascade R-CNN (common/models/cascade_rcnn.py, without its mask head) on the official network of RS R-CNN
# (official_rcnn.py: its RPN trained by Rank & Sort Loss weighted 0.2), every stage trained by Rank & Sort Loss without
# sampling, class-agnostic GIoU regression decoded with (10, 10, 5, 5) in every stage (detectron2's stages use 10, 20,
# 30), IoU thresholds 0.5 / 0.6 / 0.7, stage loss weights 1, 1, 1 with nothing scaled on the features (mmdetection's
# default cascade: 1, 0.5, 0.25; detectron2's: the features' gradient averaged over the stages), score threshold 0.4
# (the BRL config; the RS config 0.05).
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import rank_sort_loss
from alrp_d2.modeling import AlrpCascadeROIHeads, AlrpFastRCNNOutputLayers, AlrpRPN, XavierUniformFCHead

from .official_network import use_official_fpn
from .official_rcnn import model as official_rcnn
from .torchvision_resnet import use_torchvision_resnet

model = use_official_fpn(use_torchvision_resnet(get_config("common/models/cascade_rcnn.py").model))
model._target_ = official_rcnn._target_
model.keep_empty_detections = True
model.proposal_generator = official_rcnn.proposal_generator
model.proposal_generator._target_ = AlrpRPN
model.proposal_generator.ranking_loss = rank_sort_loss("rpn", loss_weight=0.2)
heads = model.roi_heads
heads._target_ = AlrpCascadeROIHeads
for mask_key in ("mask_in_features", "mask_pooler", "mask_head"):
    del heads[mask_key]
for stage, (box_head, predictor) in enumerate(zip(heads.box_heads, heads.box_predictors)):
    box_head._target_ = XavierUniformFCHead
    predictor._target_ = AlrpFastRCNNOutputLayers
    predictor.ranking_loss = rank_sort_loss(f"box{stage}")  # loss_box<k>_cls_stage<k>, sb/box<k>/...
    predictor.box2box_transform.weights = (10.0, 10.0, 5.0, 5.0)
    predictor.test_score_thresh = 0.4
    predictor.test_nms_thresh = 0.5
