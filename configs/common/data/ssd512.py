# The aLRP Loss paper's data (Sec. 5, App. G.2), as the official pipeline: 512 x 512 SSD-style training (photometric
# distortion, expand, min-IoU crop, resize, flip) at batch 32 on mmdetection's training set (crowd-only images kept,
# boxes under 1 px dropped), test at 500 / 833 resized as mmcv does; RGB images. detectron2's COCO loaders
# (common/data/coco.py) with the mapper of alrp_d2 (AlrpDatasetMapper, which gives the crop the boxes) and the LRP
# evaluator.
import detectron2.data.transforms as T
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.data.augmentation import Cv2Resize, PhotometricDistortion, RandomExpand, RandomMinIoUCrop
from alrp_d2.data.dataset_mapper import AlrpDatasetMapper
from alrp_d2.data.inference_resize import MmcvRescale
from alrp_d2.data.training_filter import mmdet_training_filter
from alrp_d2.evaluation import COCOLRPEvaluator

TORCHVISION_RGB_MEAN = [123.675, 116.28, 103.53]

dataloader = get_config("common/data/coco.py").dataloader
dataloader.train.dataset.filter_empty = False
dataloader.train.dataset = L(mmdet_training_filter)(dataset_dicts=dataloader.train.dataset)
dataloader.train.mapper = L(AlrpDatasetMapper)(
    is_train=True,
    augmentations=[
        L(PhotometricDistortion)(image_format="${...image_format}"),
        L(RandomExpand)(fill=TORCHVISION_RGB_MEAN, ratio_range=(1.0, 4.0), prob=0.5),
        L(RandomMinIoUCrop)(min_ious=(1.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.0), min_crop_size=0.3),
        L(Cv2Resize)(shape=(512, 512)),
        L(T.RandomFlip)(prob=0.5, horizontal=True),
    ],
    image_format="RGB",
    boxes_to_augmentations=True,
)
dataloader.train.total_batch_size = 32
dataloader.test.mapper = L(AlrpDatasetMapper)(
    is_train=False,
    augmentations=[L(MmcvRescale)(short_edge=500, long_edge=833)],
    image_format="${...train.mapper.image_format}",
)
dataloader.evaluator = L(COCOLRPEvaluator)(
    dataset_name="${..test.dataset.names}", output_dir="${...train.output_dir}/inference"
)
