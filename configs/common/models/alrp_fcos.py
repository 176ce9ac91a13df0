# aLRP FCOS: detectron2's FCOS (common/models/fcos.py: centre sampling, P6/P7 from P5, GroupNorm head, centre-ness
# trained by BCE) whose focal and GIoU losses are one aLRP Loss over all locations x classes; the low score threshold
# of the aLRP detectors. The yacs twin is configs/alrp_fcos_R50_500.yaml.
from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import alrp_loss
from alrp_d2.modeling import AlrpFCOS

model = get_config("common/models/fcos.py").model
model._target_ = AlrpFCOS
model.ranking_loss = alrp_loss("fcos")
model.test_score_thresh = 0.05
