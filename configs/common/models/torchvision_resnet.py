# The ResNet of the official aLRP / Rank & Sort models: torchvision's ImageNet weights (pytorch style: stride in the
# 3x3 conv, RGB input normalised by the ImageNet mean and std), stem and res2 frozen, the other BatchNorm layers with
# frozen statistics and trained affine parameters (alrp_d2.modeling.FrozenStatsBatchNorm2d).
# Apply to the ``model`` of a detectron2 common model: ``use_torchvision_resnet(model)``.
from alrp_d2.modeling import FrozenStatsBatchNorm2d

TORCHVISION_R50 = "detectron2://ImageNetPretrained/torchvision/R-50.pkl"


def use_torchvision_resnet(model, bottom_up=None):
    """Sets the ResNet of ``model.backbone.bottom_up`` (or ``bottom_up``) and the pixel statistics to the official
    models'; returns ``model``."""
    bottom_up = model.backbone.bottom_up if bottom_up is None else bottom_up
    bottom_up.stem.norm = FrozenStatsBatchNorm2d
    bottom_up.stages.norm = FrozenStatsBatchNorm2d
    bottom_up.stages.stride_in_1x1 = False
    bottom_up.freeze_at = 2
    model.pixel_mean = [123.675, 116.28, 103.53]
    model.pixel_std = [58.395, 57.12, 57.375]
    model.input_format = "RGB"
    return model
