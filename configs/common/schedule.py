# The step schedules of the yacs configs, following train.max_iter: linear warmup of 500 iterations from 0.001, the
# learning rate divided by 10 at each step.
from detectron2.config import LazyCall as L

from alrp_d2.engine.lr_schedule import warmup_multistep_schedule


def step_schedule(steps, warmup_iters=500):
    """The multiplier dropping at the iterations ``steps`` of a run of train.max_iter iterations."""
    return L(warmup_multistep_schedule)(max_iter="${train.max_iter}", steps=steps, warmup_iters=warmup_iters)


# 100 epochs of COCO train2017 at batch 32 (3,665 iterations per epoch), steps at epochs 75 and 95 (aLRP Loss App. G)
# or 60 and 80 (the paper's Table 2 IoU RetinaNets).
ALRP_100EP_MAX_ITER = 366500
lr_multiplier_100ep = step_schedule([274875, 348175])
lr_multiplier_100ep_60_80 = step_schedule([219900, 293200])
# 12 epochs at batch 16 (7,330 iterations per epoch), steps at epochs 8 and 11 (the Rank & Sort Loss configs).
RS_1X_MAX_ITER = 87960
lr_multiplier_rs_1x = step_schedule([58640, 80630])
# 72 epochs at batch 16 (RT-DETR v2's "6x"), a warm-up of 2,000 iterations, then a constant learning rate.
RTDETR_6X_MAX_ITER = 72 * 7330
lr_multiplier_rtdetr_6x = step_schedule([], warmup_iters=2000)
# 12 epochs at batch 32 (3,665 iterations per epoch), the learning rate divided by 10 after epoch 11 (Deformable-DETR's
# schedule, shortened as H-Deformable-DETR's and BRS-DETR's 12-epoch baselines).
DETR_12EP_BATCH32_MAX_ITER = 12 * 3665
lr_multiplier_detr_12ep = step_schedule([11 * 3665], warmup_iters=0)
