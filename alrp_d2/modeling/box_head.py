"""The box head of the official Faster R-CNN models (mmdetection's ``Shared2FCBBoxHead``) as a detectron2 box
head: its fully connected layers initialised as mmdetection's."""

from __future__ import annotations

from detectron2.config import configurable
from detectron2.modeling.roi_heads import ROI_BOX_HEAD_REGISTRY, FastRCNNConvFCHead
from torch import nn

__all__ = ["XavierUniformFCHead"]


@ROI_BOX_HEAD_REGISTRY.register()
class XavierUniformFCHead(FastRCNNConvFCHead):
    """detectron2's ``FastRCNNConvFCHead`` whose fully connected layers start as mmdetection's shared fcs
    (``xavier_uniform_``, gain 1, bias 0: the official Faster R-CNN box heads, fc1 std 0.0121 with 256 x 7 x 7
    inputs and 1024 outputs) instead of detectron2's ``c2_xavier_fill`` (fc1 std 0.0089). The layers, their names
    and the forward are detectron2's (MODEL.ROI_BOX_HEAD.NAME "XavierUniformFCHead")."""

    @configurable
    def __init__(self, input_shape, **kwargs):
        super().__init__(input_shape, **kwargs)
        for layer in self.fcs:
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
