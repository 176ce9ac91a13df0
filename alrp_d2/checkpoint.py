"""Loading weights that cannot silently mean nothing: a checkpoint whose parameter shapes differ
from the model's (e.g. another dataset's class head) is an error unless the config opts in with
MODEL.ALLOW_PARTIAL_WEIGHTS (fine-tuning from a model trained on another dataset)."""

from __future__ import annotations

from typing import Any, Dict

from detectron2.checkpoint import DetectionCheckpointer
from detectron2.config import CfgNode
from detectron2.engine import DefaultPredictor
from fvcore.common.checkpoint import _IncompatibleKeys

__all__ = ["AlrpCheckpointer", "AlrpPredictor", "IncompatibleWeightsError"]


class IncompatibleWeightsError(ValueError):
    """The weights have parameters whose shapes do not fit the model built from the config."""


class AlrpCheckpointer(DetectionCheckpointer):
    """detectron2's ``DetectionCheckpointer`` that raises :class:`IncompatibleWeightsError`
    instead of fvcore's "Skip loading parameter ... incompatible shapes" warning, unless
    ``allow_partial`` (then it warns as detectron2 does and those parameters keep their values)."""

    def __init__(self, model, save_dir: str = "", *, allow_partial: bool = False, **kwargs: Any):
        super().__init__(model, save_dir, **kwargs)
        self.allow_partial = allow_partial
        self._path = "the weights"

    @classmethod
    def like(cls, checkpointer: DetectionCheckpointer, allow_partial: bool) -> AlrpCheckpointer:
        """The same model, directory and checkpointables as ``checkpointer``."""
        return cls(
            checkpointer.model,
            checkpointer.save_dir,
            save_to_disk=checkpointer.save_to_disk,
            allow_partial=allow_partial,
            **checkpointer.checkpointables,
        )

    def load(self, path: str, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        self._path = path
        return super().load(path, *args, **kwargs)

    def _load_model(self, checkpoint: Any) -> _IncompatibleKeys:
        incompatible = super()._load_model(checkpoint)
        if incompatible.incorrect_shapes and not self.allow_partial:
            rows = "\n".join(
                f"  {name}: {tuple(saved)} in the weights, {tuple(model)} in the model"
                for name, saved, model in incompatible.incorrect_shapes
            )
            raise IncompatibleWeightsError(
                f"{len(incompatible.incorrect_shapes)} parameter(s) of {self._path} "
                f"do not fit the model built from the config (e.g. a class head for another number of "
                f"classes):\n{rows}\nCheck the config (NUM_CLASSES) and MODEL.WEIGHTS; to fine-tune from "
                "these weights on purpose, leaving those parameters at their initialisation, set "
                "MODEL.ALLOW_PARTIAL_WEIGHTS True."
            )
        return incompatible


class AlrpPredictor(DefaultPredictor):
    """detectron2's ``DefaultPredictor`` loading MODEL.WEIGHTS with :class:`AlrpCheckpointer`
    (the parent builds the model without weights; they are loaded once, checked)."""

    def __init__(self, cfg: CfgNode):
        without_weights = cfg.clone()
        without_weights.defrost()
        without_weights.MODEL.WEIGHTS = ""
        super().__init__(without_weights)
        self.cfg = cfg.clone()
        allow_partial = cfg.MODEL.get("ALLOW_PARTIAL_WEIGHTS", False)  # a config without add_alrp_config: False
        AlrpCheckpointer(self.model, allow_partial=allow_partial).load(cfg.MODEL.WEIGHTS)
