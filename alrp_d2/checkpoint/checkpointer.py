"""Checkpoints that cannot silently mean nothing or be lost.

- Weights must belong to the model: parameters whose shapes differ, parameters of the model the
  weights lack and parameters of the weights the model lacks are an error naming them, unless
  MODEL.ALLOW_PARTIAL_WEIGHTS (fine-tuning from a model of another dataset). The one exception is
  the initialisation of a training run from backbone weights (:data:`BACKBONE_INITIALISATION`).
- Checkpoints and ``last_checkpoint`` are written atomically
  (:func:`~alrp_d2.checkpoint.atomic_write.write_atomically`): a kill at any byte leaves the previous file intact.
- Resuming reads ``last_checkpoint``, which may only name a file of the output directory; when that
  checkpoint cannot be read it falls back to the newest readable checkpoint there (never a link
  leading out of it), with a warning.
- Weights with a NaN or infinite value are an error naming the parameters (:class:`NonFiniteWeightsError`):
  a model loaded from them predicts nothing, or trains on NaN.
- Checkpoints record the classes they were trained on (``"classes"``: the training set's names and
  category ids); evaluation and predictors compare them with their datasets'
  (:func:`check_weights_classes`); weights without the record (earlier versions, other sources)
  load with one warning.
- ``.pkl`` weights are read by an unpickler that builds nothing but arrays and containers
  (:func:`~alrp_d2.checkpoint.safe_pickle.load_weights_pickle`), and must hold numeric arrays; ``.pth`` files by torch's
  ``weights_only`` loader, after the sizes their archive declares are checked
  (:func:`~alrp_d2.checkpoint.archive.check_archive_sizes`: no decompression bomb).
"""

from __future__ import annotations

import logging
import os
from typing import IO, Any, Dict, List, Optional, Tuple

import torch
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.utils.file_io import PathManager
from fvcore.common.checkpoint import _filter_reused_missing_keys, _IncompatibleKeys

from ..data.dataset_classes import DatasetClasses, classes_record
from .archive import check_archive_sizes
from .atomic_write import write_atomically
from .safe_pickle import UnsafePickleError, load_weights_pickle
from .weights import (
    CLASSES_KEY,
    IncompatibleWeightsError,
    NonFiniteWeightsError,
    UnreadableCheckpointError,
    listed,
    non_finite_names,
    weights_from_pickle,
)

__all__ = ["AlrpCheckpointer", "BACKBONE_INITIALISATION", "LAST_CHECKPOINT"]

logger = logging.getLogger(__name__)

LAST_CHECKPOINT = "last_checkpoint"
BACKBONE_INITIALISATION = (
    "weights that provide every parameter of the backbone's bottom-up network (backbone.bottom_up.*, or "
    "backbone.* for a backbone without FPN) with its shapes, and no parameter the model lacks unless they are "
    "matched by detectron2's name heuristics (the ImageNet .pkl files, whose classifier has no place in a detector)"
)
UNTRACKED_BUFFER = "num_batches_tracked"  # BatchNorm's step counter, unused with a momentum; may be absent


def _initialised_prefix(model_keys: List[str]) -> str:
    """The part of the model that backbone weights initialise: the bottom-up network of an FPN
    backbone, or the whole backbone."""
    return "backbone.bottom_up." if any(k.startswith("backbone.bottom_up.") for k in model_keys) else "backbone."


class AlrpCheckpointer(DetectionCheckpointer):
    """detectron2's ``DetectionCheckpointer`` with weights that must belong, atomic saving, resuming
    that falls back to the newest readable checkpoint, and safe ``.pkl`` loading.

    ``allow_partial``: weights that do not fit are loaded as detectron2 does (those parameters keep
    their values, with fvcore's warnings). ``initialisation``: ``resume_or_load`` starts a training
    run, so that MODEL.WEIGHTS may be :data:`BACKBONE_INITIALISATION` (the trainer's checkpointer);
    evaluation and predictors need weights for the whole model. ``classes``: the classes the model
    is trained on, recorded in every checkpoint it saves."""

    def __init__(
        self,
        model,
        save_dir: str = "",
        *,
        allow_partial: bool = False,
        initialisation: bool = False,
        classes: Optional[DatasetClasses] = None,
        **kwargs: Any,
    ):
        super().__init__(model, save_dir, **kwargs)
        self.allow_partial = allow_partial
        self.initialisation = initialisation
        self.classes = classes
        self._loading_initialisation = False
        self.loaded_path = "the weights"  # the file the last load read

    @classmethod
    def like(
        cls,
        checkpointer: DetectionCheckpointer,
        allow_partial: bool,
        initialisation: bool = True,
        classes: Optional[DatasetClasses] = None,
    ) -> AlrpCheckpointer:
        """The same model, directory and checkpointables as ``checkpointer``."""
        return cls(
            checkpointer.model,
            checkpointer.save_dir,
            save_to_disk=checkpointer.save_to_disk,
            allow_partial=allow_partial,
            initialisation=initialisation,
            classes=classes,
            **checkpointer.checkpointables,
        )

    # ---- saving ----------------------------------------------------------------------------------

    def save(self, name: str, **kwargs: Any) -> None:
        """fvcore's ``Checkpointer.save`` (the model, the checkpointables and ``kwargs`` in
        ``<save_dir>/<name>.pth``, then ``last_checkpoint``), writing both files atomically, with
        the record of the classes."""
        if not self.save_dir or not self.save_to_disk:
            return
        data: Dict[str, Any] = {"model": self.model.state_dict()}
        data.update({key: obj.state_dict() for key, obj in self.checkpointables.items()})
        data.update(kwargs)
        if self.classes is not None:
            data[CLASSES_KEY] = classes_record(self.classes)
        basename = f"{name}.pth"
        path = os.path.join(self.save_dir, basename)
        self.logger.info(f"Saving checkpoint to {path}")

        def write(f: IO[bytes]) -> None:
            torch.save(data, f)

        write_atomically(path, write)
        self.tag_last_checkpoint(basename)

    def tag_last_checkpoint(self, last_filename_basename: str) -> None:
        """Names the last checkpoint in ``<save_dir>/last_checkpoint``, atomically."""

        def write(f: IO[bytes]) -> None:
            f.write(last_filename_basename.encode())

        write_atomically(os.path.join(self.save_dir, LAST_CHECKPOINT), write)

    # ---- resuming --------------------------------------------------------------------------------

    def get_checkpoint_file(self) -> str:
        """The checkpoint that ``last_checkpoint`` names ("" when it is unreadable or empty). Raises
        ValueError when it names anything but a file of the output directory (a path elsewhere, a
        link leading out of it)."""
        tag = os.path.join(self.save_dir, LAST_CHECKPOINT)
        try:
            with open(tag) as f:
                name = f.read().strip()
        except (OSError, UnicodeDecodeError):
            return ""
        if not name:
            return ""
        path = os.path.join(self.save_dir, name)
        directory = os.path.realpath(self.save_dir)
        inside = os.path.basename(name) == name and name not in (".", "..")
        if not inside or os.path.dirname(os.path.realpath(path)) != directory:
            raise ValueError(
                f"{tag} names {name!r}, which is not a file of the output directory {directory}: resuming "
                "loads only checkpoints of OUTPUT_DIR. Write the file name of one of its checkpoints into "
                f"{LAST_CHECKPOINT}, or delete it to start a new run."
            )
        return path

    def _checkpoints_newest_first(self) -> List[str]:
        """The checkpoints of the output directory, newest first; a link leading out of it is left out."""
        directory = os.path.realpath(self.save_dir)
        files = [f for f in self.get_all_checkpoint_files() if os.path.dirname(os.path.realpath(f)) == directory]
        return sorted(files, key=lambda path: (os.path.getmtime(path), path), reverse=True)

    def resume_or_load(self, path: str, *, resume: bool = True) -> Dict[str, Any]:
        """fvcore's ``resume_or_load``: with ``resume`` and a ``last_checkpoint``, every state of
        that checkpoint; when it cannot be read, of the newest readable checkpoint of the output
        directory (a warning names both); an error when none can be read. Otherwise the model
        weights of ``path``."""
        if not (resume and self.has_checkpoint()):
            self._loading_initialisation = self.initialisation
            try:
                return self.load(path, checkpointables=[])
            finally:
                self._loading_initialisation = False
        latest = self.get_checkpoint_file()
        candidates = [latest] if latest else []
        candidates += [c for c in self._checkpoints_newest_first() if c != latest]
        failures: List[Tuple[str, str]] = [] if latest else [(LAST_CHECKPOINT, "it names no checkpoint")]
        for candidate in candidates:
            if not os.path.isfile(candidate):
                failures.append((candidate, "no such file"))
                continue
            try:
                checkpoint = self.load(candidate)
            except UnreadableCheckpointError as error:
                failures.append((candidate, str(error)))
                continue
            if failures:
                logger.warning(
                    f"The latest checkpoint of {self.save_dir} cannot be read ({failures[0][0]}: {failures[0][1]}); "
                    f"resumed from {candidate}, the newest readable checkpoint there."
                )
            return checkpoint
        reasons = "\n".join(f"  {name}: {reason}" for name, reason in failures)
        raise UnreadableCheckpointError(
            f"cannot resume: no checkpoint of {self.save_dir} can be read:\n{reasons}\n"
            "Start again without --resume (or with another OUTPUT_DIR)."
        )

    # ---- loading ---------------------------------------------------------------------------------

    def load(self, path: str, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        """detectron2's ``load``, which this checkpointer may call again after a failure (detectron2
        leaves the URL of a failed load set, refusing the next)."""
        self.loaded_path = path
        try:
            return super().load(path, *args, **kwargs)
        finally:
            self._parsed_url_during_load = None

    def _load_file(self, filename: str) -> Dict[str, Any]:
        """detectron2's loading (``.pth``: torch's ``weights_only`` loader), with ``.pkl`` files
        unpickled safely; a file that cannot be read raises :class:`UnreadableCheckpointError`."""
        try:
            if filename.endswith(".pkl"):
                with PathManager.open(filename, "rb") as f:
                    return weights_from_pickle(load_weights_pickle(f, filename), filename)
            check_archive_sizes(filename)
            return super()._load_file(filename)
        except (UnsafePickleError, UnreadableCheckpointError):
            raise
        except Exception as error:  # torch and pickle raise RuntimeError, EOFError, ValueError, ... on damage
            raise UnreadableCheckpointError(
                f"cannot read the checkpoint {filename} ({type(error).__name__}: {error})"
            ) from error

    def _load_model(self, checkpoint: Any) -> _IncompatibleKeys:
        non_finite = non_finite_names(checkpoint["model"])
        if non_finite:
            raise NonFiniteWeightsError(
                f"{self.loaded_path} has {len(non_finite)} parameter(s) with NaN or infinite values (weights of a "
                f"diverged run?):\n{listed(non_finite)}\nLoad the weights of an earlier checkpoint."
            )
        name_matched = bool(checkpoint.get("matching_heuristics", False))
        incompatible = super()._load_model(checkpoint)
        if self.allow_partial:
            return incompatible
        missing = [
            key
            for key in _filter_reused_missing_keys(self.model, incompatible.missing_keys)
            if not key.endswith(UNTRACKED_BUFFER)
        ]
        if self._loading_initialisation and self._initialises_backbone(incompatible, missing, name_matched):
            logger.info(
                f"{self.loaded_path} initialises the backbone; the other {len(missing)} parameters of the model keep "
                "their initialisation"
            )
            return incompatible
        if incompatible.incorrect_shapes or missing or incompatible.unexpected_keys:
            raise IncompatibleWeightsError(self._incompatibility(incompatible, missing))
        return incompatible

    def _initialises_backbone(self, incompatible: _IncompatibleKeys, missing: List[str], name_matched: bool) -> bool:
        """Whether the loaded weights are :data:`BACKBONE_INITIALISATION`."""
        prefix = _initialised_prefix(list(self.model.state_dict()))
        return (
            not incompatible.incorrect_shapes
            and (name_matched or not incompatible.unexpected_keys)
            and not any(key.startswith(prefix) for key in missing)
        )

    def _incompatibility(self, incompatible: _IncompatibleKeys, missing: List[str]) -> str:
        parts = [f"{self.loaded_path} does not fit the model built from the config:"]
        if incompatible.incorrect_shapes:
            rows = "\n".join(
                f"  {name}: {tuple(saved)} in the weights, {tuple(model)} in the model"
                for name, saved, model in incompatible.incorrect_shapes
            )
            parts.append(
                f"{len(incompatible.incorrect_shapes)} parameter(s) with other shapes (e.g. a class head for "
                f"another number of classes):\n{rows}"
            )
        if missing:
            parts.append(f"{len(missing)} parameter(s) of the model missing from the weights:\n{listed(missing)}")
        if incompatible.unexpected_keys:
            parts.append(
                f"{len(incompatible.unexpected_keys)} parameter(s) of the weights that the model does not have "
                f"(weights of another architecture?):\n{listed(incompatible.unexpected_keys)}"
            )
        training_note = (
            f" A training run may start from {BACKBONE_INITIALISATION}."
            if self.initialisation
            else " Evaluation and predictors need weights for the whole model."
        )
        parts.append(
            "Check the config (META_ARCHITECTURE, NUM_CLASSES) and MODEL.WEIGHTS." + training_note + " To "
            "load these weights anyway, leaving the parameters they do not fit at their initialisation "
            "(fine-tuning), set MODEL.ALLOW_PARTIAL_WEIGHTS True."
        )
        return "\n".join(parts)
