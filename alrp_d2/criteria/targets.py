"""The positives of a head's ranking, as the ranking criteria take them: which (row, class) logits are positive,
which rows are ignored, and with Rank & Sort Loss the sorting targets."""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

__all__ = ["PositiveTargets", "RankSortTargets", "RowLabels", "Targets"]


class RowLabels(NamedTuple):
    """detectron2's labels of a head's rows: with ``num_classes`` K, a class in [0, K) for positives, K for
    background and -1 for ignored rows; with ``num_classes`` None (the RPN's objectness), 1 object, 0 background,
    -1 ignored."""

    labels: Tensor
    num_classes: Optional[int]


class PositiveTargets(NamedTuple):
    """A head's positives as ranking inputs for its (rows, classes) logits, a row being an
    (image, anchor) pair or a proposal.

    Attributes:
        row: (P,) the row of each positive.
        label: (P,) its class.
        valid: (rows, 1) bool, False for the ignored rows (every class of them).
        labels_in_range: 0-d bool, whether every row's label was a class, the background or
            "ignored"; the loss is NaN otherwise (a class id beyond the model's classes).
    """

    row: Tensor
    label: Tensor
    valid: Tensor
    labels_in_range: Tensor

    @staticmethod
    def of_labels(labels: Tensor, num_classes: int) -> PositiveTargets:
        """From detectron2's per-row labels: a class in [0, K) for positives, K for background,
        -1 for ignored. One host synchronisation: the number of positives."""
        labels = labels.reshape(-1)
        row = torch.nonzero((labels >= 0) & (labels < num_classes)).squeeze(1)
        in_range = ((labels >= -1) & (labels <= num_classes)).all()
        return PositiveTargets(row, labels[row], (labels >= 0).unsqueeze(1), in_range)

    @staticmethod
    def of_objectness(labels: Tensor) -> PositiveTargets:
        """From detectron2's RPN labels (1 object, 0 background, -1 ignored) for one
        objectness logit per row."""
        labels = labels.reshape(-1)
        row = torch.nonzero(labels == 1).squeeze(1)
        in_range = ((labels >= -1) & (labels <= 1)).all()
        return PositiveTargets(row, torch.zeros_like(row), (labels >= 0).unsqueeze(1), in_range)

    def flat_index(self, num_classes: int) -> Tensor:
        """Index of each positive's (row, label) logit in the flattened (rows, K) logits."""
        return self.row * num_classes + self.label

    @staticmethod
    def of_rows(rows: RowLabels) -> PositiveTargets:
        """:meth:`of_labels`, or :meth:`of_objectness` without classes."""
        if rows.num_classes is None:
            return PositiveTargets.of_objectness(rows.labels)
        return PositiveTargets.of_labels(rows.labels, rows.num_classes)

    @property
    def box(self) -> PositiveTargets:
        """The positives of the localisation loss: the ranking's own (see :attr:`RankSortTargets.box`)."""
        return self

    @property
    def ranked(self) -> PositiveTargets:
        """The positives of the ranking: all of them (see :attr:`RankSortTargets.ranked`)."""
        return self


class RankSortTargets(NamedTuple):
    """A head's positives for Rank & Sort Loss, from the IoU of every row's predicted box with its
    ground truth (detached), as the official RS heads compute them.

    Attributes:
        box: every foreground row: the positives of the box (and mask) loss.
        ranked: the foreground rows whose predicted box overlaps its ground truth (IoU > 0), the
            positives of the ranking. The official heads give a positive of IoU 0 the target 0, which
            their ``RankSort`` treats as a negative; so does this selection (docs/paper_notes.md,
            "Rank & Sort Loss in the heads").
        overlaps: (P_ranked,) the IoU of each ranked positive, its sorting target.
    """

    box: PositiveTargets
    ranked: PositiveTargets
    overlaps: Tensor

    @staticmethod
    def of_labels(labels: Tensor, num_classes: int, overlaps: Tensor) -> RankSortTargets:
        """From detectron2's per-row labels (a class in [0, K) for positives, K for background, -1
        for ignored) and the (rows,) IoU of every row's predicted box with its matched box (any value
        for the other rows). One host synchronisation: the two numbers of positives."""
        labels = labels.reshape(-1)
        foreground = (labels >= 0) & (labels < num_classes)
        in_range = ((labels >= -1) & (labels <= num_classes)).all()
        return RankSortTargets._select(labels, labels >= 0, foreground, overlaps.reshape(-1), in_range)

    @staticmethod
    def of_objectness(labels: Tensor, overlaps: Tensor) -> RankSortTargets:
        """From detectron2's RPN labels (1 object, 0 background, -1 ignored), one objectness logit per row."""
        labels = labels.reshape(-1)
        in_range = ((labels >= -1) & (labels <= 1)).all()
        return RankSortTargets._select(
            torch.zeros_like(labels), labels >= 0, labels == 1, overlaps.reshape(-1), in_range
        )

    @staticmethod
    def of_rows(rows: RowLabels, overlaps: Tensor) -> RankSortTargets:
        """:meth:`of_labels`, or :meth:`of_objectness` without classes."""
        if rows.num_classes is None:
            return RankSortTargets.of_objectness(rows.labels, overlaps)
        return RankSortTargets.of_labels(rows.labels, rows.num_classes, overlaps)

    @staticmethod
    def _select(
        classes: Tensor, valid: Tensor, foreground: Tensor, overlaps: Tensor, in_range: Tensor
    ) -> RankSortTargets:
        """Positives of classes ``classes`` among the (rows,) ``foreground``; ``valid`` False for ignored rows."""
        valid = valid.unsqueeze(1)
        ranked = foreground & (overlaps > 0)
        num_box, num_ranked = torch.stack([foreground.sum(), ranked.sum()]).tolist()
        box_row = torch.nonzero_static(foreground, size=num_box).squeeze(1)
        ranked_row = torch.nonzero_static(ranked, size=num_ranked).squeeze(1)
        return RankSortTargets(
            PositiveTargets(box_row, classes[box_row], valid, in_range),
            PositiveTargets(ranked_row, classes[ranked_row], valid, in_range),
            overlaps[ranked_row],
        )


Targets = Union[PositiveTargets, RankSortTargets]
