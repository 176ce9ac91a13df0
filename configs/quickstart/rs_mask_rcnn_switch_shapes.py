# Quickstart (LazyConfig): detectron2's own Mask R-CNN recipe from its model zoo, switched to RS Mask R-CNN in one line
# (docs/lazyconfig.md, "Switch a detectron2 model"), trained from scratch on the synthetic shapes dataset; on a CPU
# when the machine has no GPU. python train_net.py --config-file configs/quickstart/rs_mask_rcnn_switch_shapes.py
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import ranked_rcnn

from ..common.data.shapes import dataloader
from ..common.schedule import step_schedule

recipe = get_config("COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.py")
model, optimizer, train = recipe.model, recipe.optimizer, recipe.train
ranked_rcnn(model)  # the switch

# The shapes dataset: 5 classes, 128 px images, instance masks as COCO RLE (bitmasks, not polygons).
model.roi_heads.num_classes = 5
dataloader.train.mapper.use_instance_mask = True
dataloader.train.mapper.instance_mask_format = "bitmask"
# A ResNet-18 from random initialisation. detectron2's FrozenBN is made for ImageNet weights: from scratch it lets
# the features blow up, every predicted box has IoU 0, Rank & Sort Loss ranks no positive and every loss is exactly 0
# (docs/getting_started.md, "A run that stops learning"). BatchNorm in the ResNet and GroupNorm in the FPN train.
model.backbone.bottom_up.stages.depth = 18
del model.backbone.bottom_up.stages.stride_in_1x1
model.backbone.bottom_up.stem.norm = "BN"
model.backbone.bottom_up.stages.norm = "BN"
model.backbone.norm = "GN"
# Narrower than on COCO (a CPU iteration stays short); anchors of 4x the stride for objects of 12-68 px.
model.backbone.out_channels = 64
model.proposal_generator.head.in_channels = 64
model.proposal_generator.anchor_generator.sizes = [[16], [32], [64], [128], [256]]
model.proposal_generator.pre_nms_topk = (600, 1000)
model.proposal_generator.post_nms_topk = (128, 256)
model.roi_heads.box_head.input_shape.channels = 64
model.roi_heads.box_head.fc_dims = [256, 256]
model.roi_heads.box_predictor.input_shape.channels = 256
model.roi_heads.mask_head.input_shape.channels = 64
model.roi_heads.mask_head.conv_dims = [64, 64, 64, 64, 64]

optimizer.lr = 0.02
train.max_iter = 1000
lr_multiplier = step_schedule([750, 900], warmup_iters=100)  # a warm-up in iterations, whatever train.max_iter
train.checkpointer.period = 1000
train.eval_period = 0
train.init_checkpoint = ""
train.seed = 42
train.output_dir = "output/quickstart_rs_mask_rcnn_switch"
