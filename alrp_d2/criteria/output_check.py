"""The check of what a ranking criterion returns (a user's criterion, docs/criteria.md, included): a
:class:`~alrp_d2.criteria.CriterionOutput` of scalar floating-point tensors whose losses carry the gradient of their
inputs. Without it a vector, a tuple, a float or a detached loss fails deep inside the head or detectron2's trainer, or
trains nothing silently. Only the tensors' metadata are read: no host synchronisation."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from .ranking_criterion import CriterionOutput, CriterionSet

__all__ = ["CriterionOutputError", "check_criterion_output", "check_criterion_outputs"]

#: The fields of a CriterionOutput that are scalar tensors, checked.
TENSOR_FIELDS = ("loss_cls", "loss_loc", "loc_factor")


class CriterionOutputError(TypeError):
    """A ranking criterion returned something other than a CriterionOutput of scalar tensors with gradients."""


def check_criterion_output(criterion: Any, output: Any, logits: Tensor, loc_losses: Tensor) -> None:
    """Raises :class:`CriterionOutputError` naming the criterion's class and the field when ``output`` (what
    ``criterion(logits, targets, loc_losses, group)`` returned) is not a ``CriterionOutput`` whose
    :data:`TENSOR_FIELDS` are 0-dimensional floating-point tensors, or when, with gradients enabled, ``loss_cls``
    does not depend on requiring-grad ``logits`` or ``loss_loc`` on requiring-grad ``loc_losses``."""
    name = f"{type(criterion).__module__}.{type(criterion).__qualname__}"
    if not isinstance(output, CriterionOutput):
        raise CriterionOutputError(
            f"the ranking criterion {name} returned a {type(output).__qualname__}, not a CriterionOutput whose "
            f"{', '.join(TENSOR_FIELDS)} are scalar tensors"
        )
    for field in TENSOR_FIELDS:
        value = getattr(output, field)
        if not (isinstance(value, Tensor) and value.dim() == 0 and value.is_floating_point()):
            shown = f"a {type(value).__qualname__}"
            if isinstance(value, Tensor):
                shown = f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
            raise CriterionOutputError(
                f"the ranking criterion {name} returned {field} as {shown}: it must be a 0-dimensional floating-point "
                "tensor (reduce the loss over its entries, e.g. .sum() / number of positives)"
            )
    if not torch.is_grad_enabled():
        return
    for field, source in (("loss_cls", logits), ("loss_loc", loc_losses)):
        if source.requires_grad and not getattr(output, field).requires_grad:
            raise CriterionOutputError(
                f"the ranking criterion {name} returned {field} without a gradient (detached, or not computed from "
                f"its {'logits' if field == 'loss_cls' else 'loc_losses'}): training would not update the head by it"
            )


def check_criterion_outputs(criterion: Any, outputs: Any, sets: Sequence[CriterionSet]) -> None:
    """:func:`check_criterion_output` of every output of ``criterion.rank_sets(sets, group)``; raises
    :class:`CriterionOutputError` naming the criterion's class unless ``outputs`` is a list of one output a set."""
    if not (isinstance(outputs, list) and len(outputs) == len(sets)):
        name = f"{type(criterion).__module__}.{type(criterion).__qualname__}"
        shown = f"a list of {len(outputs)}" if isinstance(outputs, list) else f"a {type(outputs).__qualname__}"
        raise CriterionOutputError(
            f"the ranking criterion {name} returned {shown} from rank_sets of {len(sets)} sets: it must return a list "
            "of one CriterionOutput a set, in the order of the sets"
        )
    for output, ranking_set in zip(outputs, sets):
        check_criterion_output(criterion, output, ranking_set.logits, ranking_set.loc_losses)
