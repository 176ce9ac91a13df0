# aLRP RetinaNet (Oksuz et al., NeurIPS 2020, Sec. 5): detectron2's RetinaNet (common/models/retinanet.py) trained by
# one aLRP Loss over all anchors x classes, on the official network: torchvision ResNet-50, octave base 4 with 2 scales
# per octave and 3 aspect ratios (App. G.2), box coding (10, 10, 5, 5), the official test order. The yacs twin is
# configs/alrp_R50_500.yaml (Base-aLRP-RetinaNet.yaml).
from detectron2.config import LazyCall as L
from detectron2.model_zoo import get_config

from alrp_d2.modeling import AlrpCriterion, AlrpRetinaNet, HeadRankingLoss, MinIoULowQualityMatcher

from .torchvision_resnet import use_torchvision_resnet

model = use_torchvision_resnet(get_config("common/models/retinanet.py").model)
model._target_ = AlrpRetinaNet
model.ranking_loss = L(HeadRankingLoss)(
    name="retinanet",
    criterion=L(AlrpCriterion)(delta=1.0, loc_error_kind="giou", tau=0.5),
    loc_weight=50.0,
    self_balanced=True,
)
model.anchor_generator.sizes = [[32, 45.2548], [64, 90.5097], [128, 181.0193], [256, 362.0387], [512, 724.0773]]
model.head.num_anchors = 6
model.box2box_transform.weights = (10.0, 10.0, 5.0, 5.0)
model.anchor_matcher = L(MinIoULowQualityMatcher)(thresholds=[0.4, 0.5], labels=[0, -1, 1], min_iou=0.0)
model.official_inference = True
