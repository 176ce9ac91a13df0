"""The statistics of one step of a ranking loss, as the self-balance hook logs them: one record, made by the ranking
losses, completed by the criterion and the head, and read by name."""

from __future__ import annotations

from typing import Dict, NamedTuple

from torch import Tensor

__all__ = ["RankingStatistics"]


class RankingStatistics(NamedTuple):
    """One step of a ranking loss, detached device tensors (reading them on the host is the reader's).

    Attributes:
        positive_gradient_magnitude, negative_gradient_magnitude: the summed magnitudes of the positives' and the
            negatives' score gradients (equal by aLRP paper Theorem 2 for an error-driven loss; their ratio is its
            Fig. 3).
        values: named 0-d values of the step: ``cls`` and ``loc`` (a head's unweighted components, which self-balance
            averages, Sec. 4.2) and further ones (Rank & Sort Loss's ``rank``, ``sort`` and balancing ``weight``),
            logged as ``sb/<head>/<name>``.
    """

    positive_gradient_magnitude: Tensor
    negative_gradient_magnitude: Tensor
    values: Dict[str, Tensor]

    @staticmethod
    def of(positive_gradient_magnitude: Tensor, negative_gradient_magnitude: Tensor, **values: Tensor):
        """The record of the given magnitudes and named values, detached."""
        return RankingStatistics(
            positive_gradient_magnitude.detach(), negative_gradient_magnitude.detach(), {}
        ).with_values(**values)

    def with_values(self, **values: Tensor) -> RankingStatistics:
        """This record with ``values`` (detached) added, or replacing those of the same names."""
        return self._replace(values={**self.values, **{name: value.detach() for name, value in values.items()}})
