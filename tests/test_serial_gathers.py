"""The losses gather their per-positive tensors with ``index_select`` (``alrp_d2.losses.serial_indexing``), never by
advanced indexing or ``gather``, which on the CPU wait for every intra-op thread even for a few thousand entries."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from alrp_d2.losses import LabelledSet, RankingSet, alrp_loss, ap_loss, rank_sort_loss
from alrp_d2.losses.serial_indexing import take_rows
from benchmarks.op_count import OperationCounter

from .ranking_cases import only_set

aten = torch.ops.aten
THREAD_SPLITTING_GATHERS = {aten.index.Tensor, aten.gather.default}


class RankingCase(NamedTuple):
    logits: torch.Tensor
    targets: torch.Tensor
    labels: torch.Tensor
    positive_index: torch.Tensor
    loc_errors: torch.Tensor


def ranking_case(seed: int) -> RankingCase:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3000, generator=gen) * 0.5 - 4.0
    targets = torch.zeros(3000)
    targets[torch.randperm(3000, generator=gen)[:100]] = -1.0
    positives = torch.randperm(3000, generator=gen)[:60]
    targets[positives] = 1.0 - torch.rand(60, generator=gen)
    logits[positives] += 0.5
    labels = torch.where(targets > 0, 1, torch.where(targets < 0, -1, 0))
    positive_index = torch.nonzero(labels == 1).squeeze(1)
    return RankingCase(logits, targets, labels, positive_index, targets[positive_index])


LOSSES = {
    "rank_sort": lambda case, path: only_set(
        rank_sort_loss([LabelledSet(case.logits, case.targets)], delta=0.5, path=path)
    )[0],
    "rank_sort_unit_step": lambda case, path: only_set(
        rank_sort_loss([LabelledSet(case.logits, case.targets)], delta=0.0, path=path)
    )[0],
    "alrp": lambda case, path: only_set(alrp_loss([LabelledSet(case.logits, case.labels, case.loc_errors)], path=path))[
        :2
    ][0],
    "alrp_indexed": lambda case, path: (
        only_set(
            alrp_loss([RankingSet(case.logits, case.positive_index, case.loc_errors, case.labels >= 0)], path=path)
        ).loss_cls
    ),
    "ap": lambda case, path: only_set(ap_loss([LabelledSet(case.logits, case.labels)], path=path)).loss,
    "ap_interpolated": lambda case, path: (
        only_set(ap_loss([LabelledSet(case.logits, case.labels)], interpolated=True, path=path)).loss
    ),
}


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_losses_make_no_thread_splitting_gather(loss, ranking_path):
    case = ranking_case(0)
    case.logits.requires_grad_(True)
    with OperationCounter() as counter:
        LOSSES[loss](case, ranking_path).backward()
    assert counter.counts[aten.index_select.default] > 0
    assert {str(op): counter.counts[op] for op in THREAD_SPLITTING_GATHERS if counter.counts[op]} == {}


@pytest.mark.parametrize(
    "table_shape, index_shape", [((7,), (5,)), ((7,), (3, 4)), ((7, 2), (5,)), ((7, 3), (2, 3)), ((7,), (0,))]
)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_take_rows_is_advanced_indexing(table_shape, index_shape, index_dtype):
    gen = torch.Generator().manual_seed(1)
    table = torch.randn(table_shape, generator=gen, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, table_shape[0], index_shape, generator=gen).to(index_dtype)
    rows = take_rows(table, index)
    expected = table[index.long()]
    assert rows.shape == expected.shape
    assert torch.equal(rows, expected)
    weights = torch.randn(expected.shape, generator=gen, dtype=torch.float64)
    (gradient,) = torch.autograd.grad((rows * weights).sum(), table)
    (expected_gradient,) = torch.autograd.grad((expected * weights).sum(), table)
    assert torch.equal(gradient, expected_gradient)
