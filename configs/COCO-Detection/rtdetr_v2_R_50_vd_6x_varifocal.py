# RT-DETR v2 R50-vd (RT-DETRv2-L) on COCO with its published loss, varifocal (the Hugging Face model's own loss, with
# its L1 and GIoU terms): published 53.4 AP (Lv et al., 2024; not trained here). Its ranking twins:
# rtdetr_v2_R_50_vd_6x_rank_sort.py, rtdetr_v2_R_50_vd_6x_alrp.py. Not reproduced: the EMA of the weights (0.9999).
from ..common.data.rtdetr_640 import dataloader
from ..common.models.rtdetr_v2 import model, optimizer
from ..common.schedule import RTDETR_6X_MAX_ITER
from ..common.schedule import lr_multiplier_rtdetr_6x as lr_multiplier
from ..common.train import train

model.loss = None
train.max_iter = RTDETR_6X_MAX_ITER
train.checkpointer.period = 7330
train.eval_period = 7330 * 6
train.output_dir = "output/rtdetr_v2_R_50_vd_6x_varifocal"
