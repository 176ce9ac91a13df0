# Deformable-DETR's COCO data, as detectron2 transforms: flip and a multi-scale resize (shorter side 480-800 in steps of
# 32, longer side at most 1333) in training at batch 16, 800 / 1333 at test; RGB images; detectron2's COCO loaders and
# the LRP evaluator. Not reproduced: DETR's alternative branch (resize to 400-600, random crop of 384-600, resize).
import detectron2.data.transforms as T
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.evaluation import COCOLRPEvaluator

dataloader = get_config("common/data/coco.py").dataloader
dataloader.train.mapper.augmentations = [
    L(T.RandomFlip)(horizontal=True),
    L(T.ResizeShortestEdge)(short_edge_length=tuple(range(480, 801, 32)), max_size=1333, sample_style="choice"),
]
dataloader.train.mapper.image_format = "RGB"
dataloader.train.mapper.use_instance_mask = False
dataloader.train.total_batch_size = 16
dataloader.test.mapper.image_format = "RGB"
dataloader.evaluator = L(COCOLRPEvaluator)(
    dataset_name="${..test.dataset.names}", output_dir="${...train.output_dir}/inference"
)
