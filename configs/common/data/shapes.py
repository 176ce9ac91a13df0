# The synthetic shapes dataset of alrp_d2 (5 classes, 128 px images; generated on first use): detectron2's COCO
# loaders (common/data/coco.py) at 128 px with flips, and the LRP evaluator on shapes_val.
import detectron2.data.transforms as T
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

import alrp_d2.data  # registers shapes_train and shapes_val
from alrp_d2.evaluation import COCOLRPEvaluator

dataloader = get_config("common/data/coco.py").dataloader
dataloader.train.dataset.names = "shapes_train"
dataloader.train.mapper.augmentations = [
    L(T.ResizeShortestEdge)(short_edge_length=(128,), sample_style="choice", max_size=128),
    L(T.RandomFlip)(horizontal=True),
]
dataloader.train.mapper.use_instance_mask = False
dataloader.train.total_batch_size = 8
dataloader.train.num_workers = 1
dataloader.test.dataset.names = "shapes_val"
dataloader.test.mapper.augmentations = [L(T.ResizeShortestEdge)(short_edge_length=128, max_size=128)]
dataloader.test.num_workers = 1
dataloader.evaluator = L(COCOLRPEvaluator)(
    dataset_name="${..test.dataset.names}", output_dir="${...train.output_dir}/inference"
)
