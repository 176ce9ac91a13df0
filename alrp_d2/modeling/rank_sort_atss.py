"""RS-ATSS (Oksuz et al., "Rank & Sort Loss for Object Detection and Instance Segmentation", ICCV
2021): an ATSS detector trained by Rank & Sort Loss, as the official ``RankBasedATSSHead``."""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.modeling import META_ARCH_REGISTRY
from detectron2.modeling.meta_arch.retinanet import RetinaNetHead
from torch import Tensor, nn

from .alrp_retinanet import AlrpRetinaNet

__all__ = ["LevelScaledRetinaNetHead", "RankSortATSS"]


class LevelScaledRetinaNetHead(RetinaNetHead):
    """detectron2's RetinaNetHead whose box deltas are multiplied by a learnable scalar per pyramid level,
    initialised at 1: the ATSS head's ``Scale`` (Zhang et al., CVPR 2020; mmdetection's ``ATSSHead``, which the
    official RS-ATSS head builds on, without its centre-ness branch)."""

    @configurable
    def __init__(self, *, input_shape, **kwargs):
        """
        Args:
            input_shape: the shapes of the pyramid levels.
            kwargs: :class:`RetinaNetHead` arguments.
        """
        super().__init__(input_shape=input_shape, **kwargs)
        self.scales = nn.Parameter(torch.ones(len(input_shape)))

    def forward(self, features: List[Tensor]) -> Tuple[List[Tensor], List[Tensor]]:
        logits, deltas = super().forward(features)
        return logits, [level * scale for level, scale in zip(deltas, self.scales)]


@META_ARCH_REGISTRY.register()
class RankSortATSS(AlrpRetinaNet):
    """:class:`AlrpRetinaNet` with the ATSS head (:class:`LevelScaledRetinaNetHead`; GroupNorm from
    MODEL.RETINANET.NORM), the ranking loss named "atss" (``loss_atss_cls``, ``loss_atss_loc``). With
    MODEL.ALRP.CRITERION "RankSortCriterion" and MATCHER "atss" it is RS-ATSS (``configs/rs_atss_R50_FPN_1x.yaml``):
    one RS Loss over all anchors x classes of the batch with the IoUs of the positives' decoded boxes as targets, and
    the GIoU loss of each positive weighted by its detached best class score and balanced by the loss values of
    the step (:class:`~alrp_d2.modeling.HeadRankingLoss`); no centre-ness."""

    ranking_loss_name = "atss"

    @classmethod
    def from_config(cls, cfg: CfgNode) -> Dict:
        ret = super().from_config(cfg)
        shapes = ret["backbone"].output_shape()
        ret["head"] = LevelScaledRetinaNetHead(cfg, [shapes[f] for f in cfg.MODEL.RETINANET.IN_FEATURES])
        return ret
