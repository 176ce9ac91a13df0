"""docs/lazyconfig.md's switches of detectron2's own LazyConfigs to the ranking losses, and the lines that shrink such
a config to test scale (ResNet-18, the shapes dataset, 2 images of 128 px per iteration)."""

from __future__ import annotations

from pathlib import Path

HEADER = """from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import alrp_loss, correlation, ranked_rcnn
from alrp_d2.modeling import AlrpRetinaNet, CorrelationRetinaNet

recipe = get_config("{config}")
model, dataloader, optimizer, lr_multiplier, train = (
    recipe.model, recipe.dataloader, recipe.optimizer, recipe.lr_multiplier, recipe.train
)
"""
# The switches of docs/lazyconfig.md.
SWITCHES = {
    "alrp_retinanet": (
        "COCO-Detection/retinanet_R_50_FPN_1x.py",
        'model._target_ = AlrpRetinaNet\nmodel.ranking_loss = alrp_loss("retinanet")\n',
        ["loss_retinanet_cls", "loss_retinanet_loc", "sb/retinanet/weight"],
    ),
    "corr_retinanet": (
        "COCO-Detection/retinanet_R_50_FPN_1x.py",
        "model._target_ = CorrelationRetinaNet\nmodel.correlation = correlation()\n",
        ["loss_cls", "loss_box_reg", "loss_retinanet_corr"],
    ),
    "rs_mask_rcnn": (
        "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.py",
        "ranked_rcnn(model)\n",
        ["loss_rpn_cls", "loss_box_cls", "loss_box_loc", "loss_mask", "sb/box/mask_weight"],
    ),
}
TEST_SCALE = """
model.backbone.bottom_up.stages.depth = 18
del model.backbone.bottom_up.stages.stride_in_1x1
if "top_block" in model.backbone and "in_channels" in model.backbone.top_block:
    model.backbone.top_block.in_channels = 512
(model.roi_heads if "roi_heads" in model else model).num_classes = 5
dataloader.train.dataset.names = dataloader.test.dataset.names = "switch_train"
dataloader.train.total_batch_size = 2
dataloader.train.num_workers = 0
dataloader.train.mapper.augmentations[0].short_edge_length = (128,)
dataloader.train.mapper.augmentations[0].max_size = 128
dataloader.train.mapper.instance_mask_format = "bitmask"  # the shapes dataset's masks are RLE
del dataloader.evaluator
train.update(max_iter=2, device="cpu", init_checkpoint="", log_period=1, seed=3)
"""


def write_switched_config(path: Path, name: str, max_iter: int = 2) -> Path:
    """The switch ``name`` of :data:`SWITCHES` at test scale, ``max_iter`` iterations, written to ``path``."""
    config, switch, _ = SWITCHES[name]
    path.write_text(HEADER.format(config=config) + switch + TEST_SCALE.replace("max_iter=2", f"max_iter={max_iter}"))
    return path
