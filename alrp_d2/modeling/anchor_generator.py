"""Anchors of octave scales computed in the float32 order of mmdetection 2.x's ``AnchorGenerator``, which the
official aLRP models were trained with."""

from __future__ import annotations

from typing import List, Sequence

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling.anchor_generator import ANCHOR_GENERATOR_REGISTRY, BufferList, DefaultAnchorGenerator
from torch import Tensor

from ..checks.errors import require_config

__all__ = ["OctaveAnchorGenerator", "octave_sizes"]

#: |SIZES - exact size| allowed (the configs list the sizes rounded to 4 decimals).
SIZE_TOLERANCE = 1e-3


def octave_sizes(stride: int, octave_base_scale: float, scales_per_octave: int) -> List[float]:
    """The anchor sizes of a level: octave_base_scale * stride * 2^(i / scales_per_octave)."""
    return [2 ** (i / scales_per_octave) * octave_base_scale * stride for i in range(scales_per_octave)]


@ANCHOR_GENERATOR_REGISTRY.register()
class OctaveAnchorGenerator(DefaultAnchorGenerator):
    """detectron2's ``DefaultAnchorGenerator`` (same anchors, same size-major order, same grid) whose cell anchors
    are computed as mmdetection's ``AnchorGenerator(octave_base_scale, scales_per_octave, ratios, strides)``:
    the scales 2^(i / scales_per_octave) * octave_base_scale rounded once to float32, then in float32
    w = stride * (1 / sqrt(ratio)) * scale, h = stride * sqrt(ratio) * scale and the corners -/+ 0.5 w, 0.5 h.

    detectron2 computes the same sizes in float64 and rounds the corners; the two differ in the last bits, which
    decides exact ties: an anchor at exactly IoU 0.5 with a box, and anchors tied as a box's best. An RPN's
    ``scales=[8]`` is octave_base_scale 8 with one scale per octave.
    """

    @configurable
    def __init__(
        self,
        *,
        octave_base_scale: float,
        scales_per_octave: int,
        aspect_ratios: Sequence[Sequence[float]],
        strides: Sequence[int],
        offset: float = 0.0,
    ):
        """
        Args:
            octave_base_scale, scales_per_octave: the anchor sizes of a level of stride s are
                octave_base_scale * s * 2^(i / scales_per_octave), i < scales_per_octave.
            aspect_ratios, strides, offset: as :class:`DefaultAnchorGenerator`.
        """
        self.octave_base_scale = octave_base_scale
        self.scales_per_octave = scales_per_octave
        sizes = [octave_sizes(stride, octave_base_scale, scales_per_octave) for stride in strides]
        super().__init__(sizes=sizes, aspect_ratios=aspect_ratios, strides=strides, offset=offset)

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: List[ShapeSpec]):
        anchors = cfg.MODEL.ANCHOR_GENERATOR
        strides = [shape.stride for shape in input_shape]
        expected = [octave_sizes(s, anchors.OCTAVE_BASE_SCALE, anchors.SCALES_PER_OCTAVE) for s in strides]
        listed = anchors.SIZES
        require_config(
            len(listed) == len(expected)
            and all(
                len(mine) == len(exact) and all(abs(a - b) <= SIZE_TOLERANCE for a, b in zip(mine, exact))
                for mine, exact in zip(listed, expected)
            ),
            "MODEL.ANCHOR_GENERATOR.SIZES",
            listed,
            f"must list OctaveAnchorGenerator's sizes OCTAVE_BASE_SCALE * stride * 2^(i / SCALES_PER_OCTAVE) for "
            f"the strides {strides}: {[[round(size, 4) for size in level] for level in expected]}",
        )
        return {
            "octave_base_scale": anchors.OCTAVE_BASE_SCALE,
            "scales_per_octave": anchors.SCALES_PER_OCTAVE,
            "aspect_ratios": anchors.ASPECT_RATIOS,
            "strides": strides,
            "offset": anchors.OFFSET,
        }

    def _calculate_anchors(self, sizes, aspect_ratios) -> BufferList:
        return BufferList(
            [self._octave_cell_anchors(stride, ratios) for stride, ratios in zip(self.strides, aspect_ratios)]
        )

    def _octave_cell_anchors(self, stride: int, aspect_ratios: Sequence[float]) -> Tensor:
        """(scales x ratios, 4) cell anchors centred on 0, size-major (detectron2's order), with mmdetection's
        float32 operations (``AnchorGenerator.gen_single_level_base_anchors``)."""
        scales = torch.tensor(
            [2 ** (i / self.scales_per_octave) * self.octave_base_scale for i in range(self.scales_per_octave)],
            dtype=torch.float32,
        )
        h_ratios = torch.sqrt(torch.tensor(list(aspect_ratios), dtype=torch.float32))
        w_ratios = 1 / h_ratios
        widths = (stride * w_ratios[None, :] * scales[:, None]).reshape(-1)
        heights = (stride * h_ratios[None, :] * scales[:, None]).reshape(-1)
        centre = 0.0
        return torch.stack(
            [centre - 0.5 * widths, centre - 0.5 * heights, centre + 0.5 * widths, centre + 0.5 * heights], dim=1
        )
