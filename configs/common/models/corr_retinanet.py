# Corr RetinaNet (Kahraman et al., AAAI 2023): detectron2's focal-loss RetinaNet (common/models/retinanet.py) plus
# 0.1 x (1 - Spearman correlation) of the positives' class scores and IoUs, averaged over the pyramid levels with at
# least two positives. The yacs twin is configs/corr_retinanet_R50_FPN_1x.yaml.
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import correlation
from alrp_d2.modeling import CorrelationRetinaNet

model = get_config("common/models/retinanet.py").model
model._target_ = CorrelationRetinaNet
model.correlation = correlation("spearman", weight=0.1, per_level=True)
