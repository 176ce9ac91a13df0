"""The check of what a ranking criterion returns (a user's criterion, docs/criteria.md, included), on every path that
calls it (detection heads, DETR sets): one :class:`~alrp_d2.criteria.CriterionOutput` a set, of scalar
floating-point tensors whose losses carry the gradient of their inputs, a statistics record and positive weights of
one entry a box positive. Without it a vector, a tuple, a float or a detached loss fails deep inside the head or
detectron2's trainer, or trains nothing silently. Only the tensors' metadata are read: no host synchronisation."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from ..losses.ranking_statistics import RankingStatistics
from .ranking_criterion import CriterionOutput, CriterionSet

__all__ = ["CriterionOutputError", "check_criterion_outputs"]

#: The fields of a CriterionOutput that are scalar tensors, checked.
TENSOR_FIELDS = ("loss_cls", "loss_loc", "loc_factor")


class CriterionOutputError(TypeError):
    """A ranking criterion returned something other than a CriterionOutput of scalar tensors with gradients."""


def _name(criterion: Any) -> str:
    return f"{type(criterion).__module__}.{type(criterion).__qualname__}"


def _check_output(criterion: Any, output: Any, ranking_set: CriterionSet) -> None:
    """Raises :class:`CriterionOutputError` naming the criterion's class and the field when ``output``, the
    criterion's output for ``ranking_set``, is not a ``CriterionOutput`` whose :data:`TENSOR_FIELDS` are
    0-dimensional floating-point tensors, whose ``statistics`` is a ``RankingStatistics`` and whose
    ``positive_weights`` is None or one detached weight a box positive, or when, with gradients enabled, ``loss_cls``
    does not depend on requiring-grad logits or ``loss_loc`` on requiring-grad ``loc_losses``."""
    name = _name(criterion)
    if not isinstance(output, CriterionOutput):
        raise CriterionOutputError(
            f"the ranking criterion {name} returned a {type(output).__qualname__}, not a CriterionOutput whose "
            f"{', '.join(TENSOR_FIELDS)} are scalar tensors"
        )
    for field in TENSOR_FIELDS:
        value = getattr(output, field)
        if not (isinstance(value, Tensor) and value.dim() == 0 and value.is_floating_point()):
            raise CriterionOutputError(
                f"the ranking criterion {name} returned {field} as {_shown(value)}: it must be a 0-dimensional "
                "floating-point tensor (reduce the loss over its entries, e.g. .sum() / number of positives)"
            )
    if not isinstance(output.statistics, RankingStatistics):
        raise CriterionOutputError(
            f"the ranking criterion {name} returned statistics as {_shown(output.statistics)}: it must be a "
            "RankingStatistics (e.g. RankingStatistics.of(positive magnitude, negative magnitude, cls=loss_cls))"
        )
    weights, num_box = output.positive_weights, len(ranking_set.targets.box.row)
    if weights is not None and not (isinstance(weights, Tensor) and tuple(weights.shape) == (num_box,)):
        raise CriterionOutputError(
            f"the ranking criterion {name} returned positive_weights as {_shown(weights)}: it must be None or a "
            f"tensor of one weight a box positive, ({num_box},)"
        )
    if not torch.is_grad_enabled():
        return
    for field, source in (("loss_cls", ranking_set.logits), ("loss_loc", ranking_set.loc_losses)):
        if source.requires_grad and not getattr(output, field).requires_grad:
            raise CriterionOutputError(
                f"the ranking criterion {name} returned {field} without a gradient (detached, or not computed from "
                f"its {'logits' if field == 'loss_cls' else 'loc_losses'}): training would not update the head by it"
            )


def _shown(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__qualname__}"


def check_criterion_outputs(criterion: Any, outputs: Any, sets: Sequence[CriterionSet]) -> None:
    """Checks what ``criterion(sets, group)`` returned: raises :class:`CriterionOutputError` naming the criterion's
    class unless ``outputs`` is a list of one output a set, and naming the field of an output that is wrong
    (:func:`_check_output`)."""
    if not (isinstance(outputs, list) and len(outputs) == len(sets)):
        shown = f"a list of {len(outputs)}" if isinstance(outputs, list) else f"a {type(outputs).__qualname__}"
        raise CriterionOutputError(
            f"the ranking criterion {_name(criterion)} returned {shown} for {len(sets)} sets: it must return a list "
            "of one CriterionOutput a set, in the order of the sets"
        )
    for output, ranking_set in zip(outputs, sets):
        _check_output(criterion, output, ranking_set)
