# Corr RetinaNet, ResNet-50 FPN, 1x (Kahraman et al., AAAI 2023; fehmikahraman/CorrLoss
# retinanet_r50_fpn_1x_coco_spearman_single_01.py): detectron2's retinanet_R_50_FPN_1x recipe with Correlation Loss.
# No published figure is quoted (the official models are mmdetection's); not trained here.
# Twin: configs/corr_retinanet_R50_FPN_1x.yaml.
from detectron2.model_zoo import get_config

from alrp_d2.evaluation import COCOLRPEvaluator

from ..common.models.corr_retinanet import model
from ..common.train import train

recipe = get_config("COCO-Detection/retinanet_R_50_FPN_1x.py")
dataloader, optimizer, lr_multiplier = recipe.dataloader, recipe.optimizer, recipe.lr_multiplier
dataloader.evaluator._target_ = COCOLRPEvaluator
dataloader.evaluator.output_dir = "${...train.output_dir}/inference"
model.backbone.bottom_up.freeze_at = 2
train.init_checkpoint = recipe.train.init_checkpoint
