# RS Mask R-CNN on ViTDet-B: detectron2's common/models/mask_rcnn_vitdet.py (ViT-B/16 from MAE, simple feature pyramid,
# LN heads) with the recipe of ViTDet's COCO/mask_rcnn_vitdet_b_100ep.py (LSJ at 1024, batch 64, 100 epochs, AdamW with
# layer-wise lr decay 0.7, AMP), its heads trained as RS Mask R-CNN's. detectron2's ViT needs timm (pip install
# "alrp-d2[vitdet]"). The learning rate is ViTDet's 1e-4 (not tuned for RS Loss, not trained here).
from functools import partial

from detectron2.model_zoo import get_config
from detectron2.modeling.backbone.vit import get_vit_lr_decay_rate

from alrp_d2.lazy_config import rank_sort_loss, ranked_rcnn

from ..common.data.lrp_evaluator import lrp_evaluator

lsj = get_config("new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py")
dataloader, lr_multiplier, train = lsj.dataloader, lsj.lr_multiplier, lsj.train
dataloader.train.mapper.image_format = "RGB"
dataloader.evaluator = lrp_evaluator
lr_multiplier.warmup_length = 250 / train.max_iter
lr_multiplier.warmup_factor = 0.001
train.init_checkpoint = "detectron2://ImageNetPretrained/MAE/mae_pretrain_vit_base.pth?matching_heuristics=True"

model = get_config("common/models/mask_rcnn_vitdet.py").model
ranked_rcnn(model, rank_sort_loss)

optimizer = get_config("common/optim.py").AdamW
optimizer.params.lr_factor_func = partial(get_vit_lr_decay_rate, num_layers=12, lr_decay_rate=0.7)
optimizer.params.overrides = {"pos_embed": {"weight_decay": 0.0}}
