"""Host synchronisations per training step from the project's code: at most two per ranking head
(the number of positives and the selection of the relevant negatives, both data-dependent sizes),
counted with a dispatch-mode counter (tests/host_syncs.py) on one forward and backward of every
detector."""

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from ..host_syncs import HostSyncCounter
from .tiny_configs import (
    load_config,
    make_tiny,
    tiny_batch,
    tiny_faster_rcnn_cfg,
    tiny_rank_sort_cfg,
    tiny_retinanet_cfg,
    with_masks,
)

SYNCS_PER_RANKING_HEAD = 2


def dense_cfg(config: str, node: str, **alrp):
    cfg = make_tiny(load_config(config))
    head = cfg.MODEL[node]
    head.NUM_CLASSES, head.NUM_CONVS, head.NORM = 3, 1, ""
    for key, value in alrp.items():
        setattr(cfg.MODEL.ALRP, key, value)
    return cfg


def fcos_cfg(centerness: str):
    cfg = dense_cfg("alrp_fcos_R50_500.yaml", "FCOS")
    cfg.MODEL.FCOS.CENTERNESS = centerness
    return cfg


# (config, number of ranking heads)
DETECTORS = {
    "retinanet_iou": (lambda: tiny_retinanet_cfg(), 1),
    # the official networks (octave anchors, the MaxIoUAssigner's low-quality rule, P7 without ReLU; FoveaBox's
    # below, whose paper configs build the official network)
    "retinanet_official_network": (lambda: tiny_retinanet_cfg("alrp_R50_500.yaml"), 1),
    "faster_rcnn_official_network": (lambda: tiny_faster_rcnn_cfg("alrp_faster_rcnn_R50_FPN_500.yaml"), 2),
    "retinanet_atss": (lambda: tiny_retinanet_cfg(MATCHER="atss"), 1),
    "retinanet_ap_interpolated": (lambda: tiny_retinanet_cfg(CRITERION="InterpolatedAPCriterion"), 1),
    "faster_rcnn": (lambda: tiny_faster_rcnn_cfg(), 2),
    "faster_rcnn_any_iou_low_quality": (lambda: tiny_faster_rcnn_cfg(RPN_LOW_QUALITY_MIN_IOU=0.0), 2),
    "foveabox_alrp": (lambda: dense_cfg("foveabox_alrp_R50_500.yaml", "FOVEABOX"), 1),
    "foveabox_ap_smooth_l1": (lambda: dense_cfg("foveabox_ap_R50_500.yaml", "FOVEABOX"), 1),
    "foveabox_focal": (lambda: dense_cfg("foveabox_focal_R50_500.yaml", "FOVEABOX"), 0),
    "fcos_alrp_centerness": (lambda: fcos_cfg("bce"), 1),
    "fcos_alrp": (lambda: fcos_cfg("none"), 1),
    "rs_faster_rcnn": (lambda: tiny_rank_sort_cfg("rs_faster_rcnn_R50_FPN_1x.yaml"), 2),
    "rs_mask_rcnn": (lambda: tiny_rank_sort_cfg("rs_mask_rcnn_R50_FPN_1x.yaml"), 2),
    "rs_atss": (lambda: tiny_rank_sort_cfg("rs_atss_R50_FPN_1x.yaml"), 1),
}


def count_training_step(cfg) -> HostSyncCounter:
    torch.manual_seed(0)
    model = build_model(cfg).train()
    with EventStorage():
        model(with_masks(tiny_batch()))  # first call: lazily built state (anchors' caches) is not a step's cost
        with HostSyncCounter() as syncs:
            losses = model(with_masks(tiny_batch()))
            sum(losses.values()).backward()
    return syncs


@pytest.mark.parametrize("name", list(DETECTORS))
def test_project_code_syncs_at_most_twice_per_ranking_head(name):
    make_cfg, heads = DETECTORS[name]
    syncs = count_training_step(make_cfg())
    budget = max(heads * SYNCS_PER_RANKING_HEAD, 1)  # the focal-loss FoveaBox counts its positives once
    assert syncs.total("alrp_d2") <= budget, syncs.by_operation.get("alrp_d2")


def test_the_counter_sees_what_it_must():
    values = torch.arange(6.0)
    with HostSyncCounter() as syncs:
        values[values > 2]
        values.nonzero()
        values.sum().item()
        values.tolist()
        values.cumsum(0)
    assert syncs.total(None) == 4
    assert dict(syncs.by_operation[None]) == {"index": 1, "nonzero": 1, "_local_scalar_dense": 1, "tolist": 1}
