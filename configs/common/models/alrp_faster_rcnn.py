# aLRP Faster R-CNN (Sec. 5.4, App. G.4): both stages trained by aLRP Loss without sampling, the RPN's with tau 0.7
# and weight 0.2, each stage self-balanced; the official RPN's objectness prior 0.01; the proposals train the box head
# without the ground-truth boxes (PseudoSampler). The yacs twin is configs/alrp_faster_rcnn_R50_FPN_500.yaml.
from detectron2.config import LazyCall as L

from alrp_d2.lazy_config import alrp_loss, ranked_rcnn
from alrp_d2.modeling import with_objectness_prior

from .official_rcnn import model


def rpn_alrp_loss(name, **kwargs):
    return alrp_loss(name, tau=0.7, **kwargs)


ranked_rcnn(model, alrp_loss, rpn_loss=rpn_alrp_loss)
model.proposal_generator.head = L(with_objectness_prior)(head=model.proposal_generator.head, prior_prob=0.01)
model.roi_heads.proposal_append_gt = False
