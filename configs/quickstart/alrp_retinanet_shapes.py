# Quickstart (LazyConfig): aLRP RetinaNet trained from scratch on the synthetic shapes dataset, on a CPU; the twin of
# alrp_retinanet_shapes.yaml. python train_net.py --config-file configs/quickstart/alrp_retinanet_shapes.py
from detectron2.config import LazyCall as L
from detectron2.layers import ShapeSpec
from detectron2.model_zoo import get_config
from detectron2.modeling.backbone import ResNet

from alrp_d2.lazy_config import alrp_loss
from alrp_d2.modeling import AlrpRetinaNet

from ..common.data.shapes import dataloader
from ..common.optim import SGD as optimizer
from ..common.schedule import step_schedule
from ..common.train import train

# detectron2's RetinaNet trained by aLRP Loss, with the paper's box coding and test order.
model = get_config("common/models/retinanet.py").model
model._target_ = AlrpRetinaNet
model.ranking_loss = alrp_loss("retinanet")
model.box2box_transform.weights = (10.0, 10.0, 5.0, 5.0)
model.official_inference = True
model.smooth_l1_beta = 0.1  # yacs MODEL.RETINANET.SMOOTH_L1_LOSS_BETA (read by AP Loss's Smooth L1 only)
# ResNet-18 with BatchNorm (stem and res2 frozen as detectron2's default), random init, a 64-channel FPN
# and a two-conv GroupNorm head for 5 classes.
model.backbone.bottom_up.stem.norm = "BN"
model.backbone.bottom_up.stages = L(ResNet.make_default_stages)(depth=18, norm="BN")
model.backbone.bottom_up.freeze_at = 2
model.backbone.out_channels = 64
model.backbone.top_block.in_channels = 512
model.head.input_shape = [ShapeSpec(channels=64)] * 5
model.head.conv_dims = [64, 64]
model.head.norm = "GN"
model.num_classes = 5
# Objects are 12-68 px on 128 px images: octave base 2 (anchors of 2x the stride).
model.anchor_generator.sizes = [[16, 22.6274], [32, 45.2548], [64, 90.5097], [128, 181.0193], [256, 362.0387]]
model.head.num_anchors = 6
# A ranking loss fixes the order of the scores, not their level: 0.01 keeps the AP of threshold 0.
model.test_score_thresh = 0.01

optimizer.lr = 0.04
optimizer.params.weight_decay_norm = 0.0
train.max_iter = 1200
lr_multiplier = step_schedule([900, 1100], warmup_iters=100)
train.checkpointer.period = 1200
train.eval_period = 0
train.seed = 42
train.device = "cpu"
train.output_dir = "output/quickstart_retinanet_lazy"
