"""Config keys of alrp-d2 (``add_alrp_config``) and their validation."""

from __future__ import annotations

from typing import Optional, Sequence

from detectron2.config import CfgNode as CN
from detectron2.config import get_cfg

from .losses.localisation_error import LOC_ERROR_KINDS

__all__ = ["add_alrp_config", "setup_cfg", "validate_alrp_config", "require_config", "CLS_LOSSES", "MATCHERS"]

CLS_LOSSES = ("alrp", "ap")
MATCHERS = ("iou", "atss")


def add_alrp_config(cfg: CN) -> None:
    """Adds the aLRP keys to a detectron2 config (in place), as detectron2 projects do."""
    cfg.MODEL.ALRP = CN()
    # Smoothness of the step function H (App. E, Eq. 14); the only hyperparameter of aLRP Loss.
    cfg.MODEL.ALRP.DELTA = 1.0
    # Localisation error E_loc: "giou" ((1 - GIoU) / 2) or "iou" (1 - IoU), divided by 1 - TAU.
    cfg.MODEL.ALRP.LOC_ERROR = "giou"
    # Positive-labelling IoU threshold used to normalise E_loc (Sec. 2.2).
    cfg.MODEL.ALRP.TAU = 0.5
    # Classification loss: "alrp" (aLRP Loss) or "ap" (AP Loss + IoU-based loss, paper Table 2 / App. G).
    cfg.MODEL.ALRP.CLS_LOSS = "alrp"
    # Self-balance (Sec. 4.2, App. F.3): the localisation weight becomes mean(L) / mean(L_loc) of the
    # previous period; SB_PERIOD = 0 means one epoch (training images / IMS_PER_BATCH).
    cfg.MODEL.ALRP.SB_ENABLED = True
    cfg.MODEL.ALRP.SB_INIT_WEIGHT = 50.0
    cfg.MODEL.ALRP.SB_PERIOD = 0
    # Constant localisation weight w_r used when SB is off (paper Table 3).
    cfg.MODEL.ALRP.LOC_WEIGHT = 1.0
    # Anchor assignment of aLRP RetinaNet: "iou" (detectron2's Matcher with
    # MODEL.RETINANET.IOU_THRESHOLDS) or "atss" (Zhang et al., CVPR 2020).
    cfg.MODEL.ALRP.MATCHER = "iou"
    cfg.MODEL.ALRP.ATSS_TOPK = 9
    # aLRP Faster R-CNN (Sec. 5.4, App. G.4): weight of the whole RPN loss, the RPN's own tau
    # (its positives are IoU >= 0.7) and delta.
    cfg.MODEL.ALRP.RPN_WEIGHT = 0.2
    cfg.MODEL.ALRP.RPN_TAU = 0.7
    cfg.MODEL.ALRP.RPN_DELTA = 1.0

    # SSD-style training augmentation (Liu et al., ECCV 2016), as used by the paper.
    cfg.INPUT.SSD = CN()
    cfg.INPUT.SSD.ENABLED = False
    cfg.INPUT.SSD.SIZE = 512
    cfg.INPUT.SSD.BRIGHTNESS_DELTA = 32
    cfg.INPUT.SSD.CONTRAST_RANGE = (0.5, 1.5)
    cfg.INPUT.SSD.SATURATION_RANGE = (0.5, 1.5)
    cfg.INPUT.SSD.HUE_DELTA = 18
    cfg.INPUT.SSD.EXPAND_PROB = 0.5
    cfg.INPUT.SSD.EXPAND_RATIO_RANGE = (1.0, 4.0)
    cfg.INPUT.SSD.MIN_IOUS = (0.1, 0.3, 0.5, 0.7, 0.9)
    cfg.INPUT.SSD.MIN_CROP_SIZE = 0.3


def setup_cfg(config_file: Optional[str] = None, opts: Sequence[str] = ()) -> CN:
    """detectron2's defaults, the aLRP keys, ``config_file`` and then the ``KEY VALUE`` pairs of
    ``opts`` (the one config entry point of train_net.py, demo.py, tests and benchmarks, as
    detectron2's ``demo/demo.py:setup_cfg``). The result is not frozen."""
    cfg = get_cfg()
    add_alrp_config(cfg)
    if config_file:
        cfg.merge_from_file(config_file)
    cfg.merge_from_list(list(opts))
    return cfg


def require_config(condition: bool, key: str, value, expectation: str) -> None:
    """Raises ValueError naming the config key when ``condition`` does not hold."""
    if not condition:
        raise ValueError(f"Invalid config value {key}={value!r}: {expectation}")


def validate_alrp_config(cfg: CN) -> None:
    """Raises ValueError naming the key of the first invalid aLRP setting."""
    alrp = cfg.MODEL.ALRP
    require_config(alrp.DELTA > 0, "MODEL.ALRP.DELTA", alrp.DELTA, "must be > 0")
    require_config(alrp.RPN_DELTA > 0, "MODEL.ALRP.RPN_DELTA", alrp.RPN_DELTA, "must be > 0")
    require_config(
        alrp.LOC_ERROR in LOC_ERROR_KINDS, "MODEL.ALRP.LOC_ERROR", alrp.LOC_ERROR, f"must be one of {LOC_ERROR_KINDS}"
    )
    require_config(0.0 <= alrp.TAU < 1.0, "MODEL.ALRP.TAU", alrp.TAU, "must be in [0, 1)")
    require_config(0.0 <= alrp.RPN_TAU < 1.0, "MODEL.ALRP.RPN_TAU", alrp.RPN_TAU, "must be in [0, 1)")
    require_config(alrp.CLS_LOSS in CLS_LOSSES, "MODEL.ALRP.CLS_LOSS", alrp.CLS_LOSS, f"must be one of {CLS_LOSSES}")
    require_config(alrp.SB_INIT_WEIGHT > 0, "MODEL.ALRP.SB_INIT_WEIGHT", alrp.SB_INIT_WEIGHT, "must be > 0")
    require_config(
        isinstance(alrp.SB_PERIOD, int) and alrp.SB_PERIOD >= 0,
        "MODEL.ALRP.SB_PERIOD",
        alrp.SB_PERIOD,
        "must be an integer >= 0 (0: one epoch)",
    )
    require_config(alrp.LOC_WEIGHT > 0, "MODEL.ALRP.LOC_WEIGHT", alrp.LOC_WEIGHT, "must be > 0")
    require_config(alrp.MATCHER in MATCHERS, "MODEL.ALRP.MATCHER", alrp.MATCHER, f"must be one of {MATCHERS}")
    require_config(
        isinstance(alrp.ATSS_TOPK, int) and alrp.ATSS_TOPK >= 1, "MODEL.ALRP.ATSS_TOPK", alrp.ATSS_TOPK, "must be >= 1"
    )
    require_config(alrp.RPN_WEIGHT > 0, "MODEL.ALRP.RPN_WEIGHT", alrp.RPN_WEIGHT, "must be > 0")
