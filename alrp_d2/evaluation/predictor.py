"""detectron2's ``DefaultPredictor`` with checked weights and the config's test-time resize."""

from __future__ import annotations

import logging

from detectron2.config import CfgNode
from detectron2.engine import DefaultPredictor

from ..checkpoint import AlrpCheckpointer
from ..data.inference_resize import build_test_resize

__all__ = ["AlrpPredictor"]

logger = logging.getLogger(__name__)


class AlrpPredictor(DefaultPredictor):
    """detectron2's ``DefaultPredictor`` loading MODEL.WEIGHTS with :class:`AlrpCheckpointer`
    (the parent builds the model without weights; they are loaded once, checked) and resizing as
    INPUT.TEST_RESIZE says. An empty MODEL.WEIGHTS gives a randomly initialised model, with a warning."""

    def __init__(self, cfg: CfgNode):
        without_weights = cfg.clone()
        without_weights.defrost()
        without_weights.MODEL.WEIGHTS = ""
        super().__init__(without_weights)
        self.cfg = cfg.clone()
        if cfg.INPUT.get("TEST_RESIZE", "detectron2") != "detectron2":  # a config without add_alrp_config
            self.aug = build_test_resize(cfg)
        if not cfg.MODEL.WEIGHTS:
            logger.warning("MODEL.WEIGHTS is empty: the predictor uses a randomly initialised model")
        allow_partial = cfg.MODEL.get("ALLOW_PARTIAL_WEIGHTS", False)  # a config without add_alrp_config: False
        AlrpCheckpointer(self.model, allow_partial=allow_partial).load(cfg.MODEL.WEIGHTS)
