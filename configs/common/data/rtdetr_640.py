# RT-DETR's COCO data (rtdetrv2 r50vd 6x): photometric distortion, zoom-out (expand, fill 0), min-IoU crop (p 0.8),
# flip and a 640 x 640 resize in training at batch 16, a 640 x 640 resize at test; RGB images; detectron2's COCO
# loaders with the mapper of alrp_d2 (which gives the crop the boxes) and the LRP evaluator.
# Not reproduced: the last epoch without these augmentations (RT-DETR's "stop_epoch").
import detectron2.data.transforms as T
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.data.augmentation import Cv2Resize, PhotometricDistortion, RandomExpand, RandomMinIoUCrop
from alrp_d2.data.dataset_mapper import AlrpDatasetMapper
from alrp_d2.evaluation import COCOLRPEvaluator

dataloader = get_config("common/data/coco.py").dataloader
dataloader.train.mapper = L(AlrpDatasetMapper)(
    is_train=True,
    augmentations=[
        L(PhotometricDistortion)(image_format="${...image_format}"),
        L(RandomExpand)(fill=[0.0, 0.0, 0.0], ratio_range=(1.0, 4.0), prob=0.5),
        L(T.RandomApply)(tfm_or_aug=L(RandomMinIoUCrop)(), prob=0.8),
        L(Cv2Resize)(shape=(640, 640)),
        L(T.RandomFlip)(prob=0.5, horizontal=True),
    ],
    image_format="RGB",
    boxes_to_augmentations=True,
)
dataloader.train.total_batch_size = 16
dataloader.test.mapper = L(AlrpDatasetMapper)(
    is_train=False, augmentations=[L(Cv2Resize)(shape=(640, 640))], image_format="RGB"
)
dataloader.evaluator = L(COCOLRPEvaluator)(
    dataset_name="${..test.dataset.names}", output_dir="${...train.output_dir}/inference"
)
