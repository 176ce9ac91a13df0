"""The backbone and head arguments of a RetinaNet-style dense detector built from a config node of its own."""

from __future__ import annotations

from typing import Any, Dict, Tuple

from detectron2.config import CfgNode
from detectron2.modeling import Backbone, build_backbone

__all__ = ["dense_head_inputs"]


def dense_head_inputs(cfg: CfgNode, head_cfg: CfgNode) -> Tuple[Backbone, Dict[str, Any]]:
    """The backbone of ``cfg`` and the arguments of a RetinaNet-style head (one anchor per
    location) on its ``head_cfg.IN_FEATURES`` levels (``head_cfg``: MODEL.FOVEABOX or MODEL.FCOS)."""
    backbone = build_backbone(cfg)
    shapes = backbone.output_shape()
    feature_shapes = [shapes[f] for f in head_cfg.IN_FEATURES]
    head_args = dict(
        input_shape=feature_shapes,
        num_classes=head_cfg.NUM_CLASSES,
        conv_dims=[feature_shapes[0].channels] * head_cfg.NUM_CONVS,
        norm=head_cfg.NORM,
        prior_prob=head_cfg.PRIOR_PROB,
    )
    return backbone, head_args
