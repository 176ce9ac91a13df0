# The Rank & Sort Loss configs' data (mmdetection's coco_detection.py): 800 x 1333 single-scale training with flips at
# batch 16 on mmdetection's training set, test at 800 / 1333 resized as mmcv does; RGB images. detectron2's COCO loaders
# (common/data/coco.py) and the LRP evaluator.
import detectron2.data.transforms as T
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.data.inference_resize import MmcvRescale
from alrp_d2.data.training_filter import mmdet_training_filter
from alrp_d2.evaluation import COCOLRPEvaluator

dataloader = get_config("common/data/coco.py").dataloader
dataloader.train.dataset.filter_empty = False
dataloader.train.dataset = L(mmdet_training_filter)(dataset_dicts=dataloader.train.dataset)
dataloader.train.mapper.augmentations[0].short_edge_length = (800,)
dataloader.train.mapper.image_format = "RGB"
dataloader.train.mapper.use_instance_mask = False
dataloader.test.mapper.augmentations = [L(MmcvRescale)(short_edge=800, long_edge=1333)]
dataloader.evaluator = L(COCOLRPEvaluator)(
    dataset_name="${..test.dataset.names}", output_dir="${...train.output_dir}/inference"
)
