# The network of the official aLRP / Rank & Sort models (mmdetection 2.x) where detectron2's differs
# (docs/paper_notes.md, "The official network"): torchvision ResNet (torchvision_resnet.py), the FPN's convolutions
# xavier_uniform, P7 = conv(P6) without a ReLU, anchors in mmdetection's float32 order.
from detectron2.config import LazyCall as L

from alrp_d2.modeling import ConfigurableFPN, OctaveAnchorGenerator


def use_official_fpn(model):
    """``model.backbone`` (a detectron2 FPN) as the official FPN; returns ``model``."""
    model.backbone._target_ = ConfigurableFPN
    model.backbone.weight_init = "xavier_uniform"
    model.backbone.relu_before_p7 = False  # no effect without a P6-P7 top block
    return model


def octave_anchors(octave_base_scale, scales_per_octave, aspect_ratios, strides):
    """mmdetection's anchors: octave_base_scale * stride * 2^(i / scales_per_octave), centred on the pixel corner."""
    return L(OctaveAnchorGenerator)(
        octave_base_scale=octave_base_scale,
        scales_per_octave=scales_per_octave,
        aspect_ratios=[aspect_ratios],
        strides=strides,
        offset=0.0,
    )
