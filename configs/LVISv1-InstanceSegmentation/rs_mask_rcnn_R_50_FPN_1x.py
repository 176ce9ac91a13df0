# RS Mask R-CNN on LVIS v1 (official ranksort_mask_rcnn_r50_fpn_1x_lvis_v1.py: 25.2 mask AP, 25.9 box AP on LVIS v1 val,
# official README): RS Mask R-CNN's network with 1203 classes and up to 300 detections per image, multi-scale training
# (640-800) with repeat factor sampling (threshold 0.001), 12 epochs at batch 16, lr 0.012; detectron2's LVIS evaluator
# with the official LRP-Error's LVIS LRP (LVISLRPEvaluator; LVIS AP needs `pip install lvis`, LRP does not).
# The score threshold is the official config's 0.6 ("different from 1e-4 as the default setting for efficiency": RS
# Loss's scores need no low threshold, and 1e-4 keeps up to 300 boxes of every image). The repeat factor sampler is not
# resumable: a resumed run restarts its sample stream.
from detectron2.config import LazyCall as L
from detectron2.data.samplers import RepeatFactorTrainingSampler
from detectron2.model_zoo import get_config

from alrp_d2.evaluation import LVISLRPEvaluator

from ..common.data.mmdet_800 import dataloader
from ..common.models.rs_rcnn import mask_rcnn as model
from ..common.models.torchvision_resnet import TORCHVISION_R50
from ..common.optim import SGD as optimizer
from ..common.schedule import step_schedule
from ..common.train import train

# About 100k images with annotations: 6,250 iterations per epoch at batch 16.
train.max_iter = 75000
lr_multiplier = step_schedule([50000, 68750])
train.checkpointer.period = 6250
train.init_checkpoint = TORCHVISION_R50
optimizer.lr = 0.012

dataloader.train.dataset.dataset_dicts.names = "lvis_v1_train"
dataloader.train.mapper.augmentations[0].short_edge_length = (640, 672, 704, 736, 768, 800)
dataloader.train.mapper.use_instance_mask = True
dataloader.train.sampler = L(RepeatFactorTrainingSampler)(
    repeat_factors=L(RepeatFactorTrainingSampler.repeat_factors_from_category_frequency)(
        dataset_dicts="${dataloader.train.dataset}", repeat_thresh=0.001
    )
)
dataloader.test.dataset.names = "lvis_v1_val"
dataloader.evaluator = L(LVISLRPEvaluator)(dataset_name="${..test.dataset.names}", max_dets_per_image=300)

model.roi_heads.num_classes = 1203
model.roi_heads.box_predictor.test_score_thresh = 0.6
model.roi_heads.box_predictor.test_topk_per_image = 300
