# RS Mask R-CNN on detectron2's new baseline: new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py (from scratch, SyncBN,
# large-scale jitter at 1024, batch 64, 100 epochs, AMP) with its RPN, box and mask heads trained as RS Mask R-CNN's
# (Rank & Sort Loss without sampling, the RPN's weighted 0.2, the mask loss score-weighted and balanced by the box
# head's). The learning rate is detectron2's 0.1 times 0.6, RS R-CNN's 0.012 over the 0.02 of the cross-entropy
# Faster R-CNN (a guess: not tuned, not trained here).
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import rank_sort_loss, ranked_rcnn

from ..common.data.lrp_evaluator import lrp_evaluator

recipe = get_config("new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py")
dataloader, lr_multiplier, model, optimizer, train = (
    recipe.dataloader,
    recipe.lr_multiplier,
    recipe.model,
    recipe.optimizer,
    recipe.train,
)
ranked_rcnn(model, rank_sort_loss)
dataloader.evaluator = lrp_evaluator
optimizer.lr = 0.06
