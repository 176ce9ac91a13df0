# Two-stage Deformable-DETR with box refinement, R50, 12 epochs on COCO with its own loss (focal, L1, GIoU: the Hugging
# Face model's, which does not train the encoder's proposals; docs/detr.md). The 12-epoch point of BRS-DETR's
# comparison; its Rank & Sort twin: deformable_detr_two_stage_R_50_12ep_rank_sort.py. Not trained here.
from ..common.data.detr_multiscale import dataloader
from ..common.models.deformable_detr_two_stage import model, optimizer
from ..common.schedule import DETR_12EP_BATCH32_MAX_ITER
from ..common.schedule import lr_multiplier_detr_12ep as lr_multiplier
from ..common.train import train

model.loss = None
dataloader.train.total_batch_size = 32
train.max_iter = DETR_12EP_BATCH32_MAX_ITER
train.checkpointer.period = 3665
train.eval_period = 3665 * 4
train.output_dir = "output/deformable_detr_two_stage_R_50_12ep_focal"
