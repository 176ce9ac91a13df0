# aLRP Mask R-CNN on detectron2's new baseline new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py: its RPN (tau 0.7, weight
# 0.2) and box head trained by aLRP Loss without sampling, each self-balanced (one epoch per period); the mask head
# keeps detectron2's loss, on every foreground proposal. RS Mask R-CNN's mask loss needs a box loss balanced by its
# values (RankSortMaskHead with a value-balanced criterion), which aLRP Loss is not. The learning rate is detectron2's
# 0.1 times 0.6 as the RS recipe (a guess: not tuned, not trained here).
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import alrp_loss, ranked_rcnn

from ..common.data.lrp_evaluator import lrp_evaluator


def rpn_alrp_loss(name, **kwargs):
    return alrp_loss(name, tau=0.7, **kwargs)


recipe = get_config("new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py")
dataloader, lr_multiplier, model, optimizer, train = (
    recipe.dataloader,
    recipe.lr_multiplier,
    recipe.model,
    recipe.optimizer,
    recipe.train,
)
ranked_rcnn(model, alrp_loss, rpn_loss=rpn_alrp_loss)
dataloader.evaluator = lrp_evaluator
optimizer.lr = 0.06
