"""The two paths of the ranking losses (``alrp_d2.losses.ranking_path``): which one a device takes, how to choose one,
and the accelerator path's bound on the operations of one forward and backward (each a kernel launch on a GPU),
counted by the dispatch-mode counter of ``benchmarks/op_count.py``."""

from __future__ import annotations

import pytest
import torch

from alrp_d2.losses import LabelledSet, ap_loss
from alrp_d2.losses.ranking_path import DensePath, ScanPath, choose_path
from benchmarks.op_count import count_detr_step, count_operations

#: The most operations the dense path may dispatch for one forward and backward at 32,768 logits (one chunk).
BOUNDS = {"alrp": 100, "ap": 100, "rank_sort": 150}


@pytest.mark.parametrize("num_positives", [500, 4096])
@pytest.mark.parametrize("loss", sorted(BOUNDS))
def test_dense_path_dispatches_few_operations(loss, num_positives):
    counter = count_operations(loss, 32768, num_positives, "dense")
    assert counter.total <= BOUNDS[loss], {str(op): count for op, count in counter.counts.most_common()}


def test_dense_path_operations_do_not_grow_with_the_positives():
    """No operation per positive: the same count at 50 and 4,096 positives."""
    assert (
        count_operations("rank_sort", 32768, 50, "dense").total
        == count_operations("rank_sort", 32768, 4096, "dense").total
    )


def test_the_device_chooses_the_path_and_the_argument_wins():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert isinstance(choose_path("auto", cpu), ScanPath) and isinstance(choose_path("auto", cuda), DensePath)
    assert isinstance(choose_path("dense", cpu), DensePath) and isinstance(choose_path("scan", cuda), ScanPath)
    assert (choose_path("scan", cpu).name, choose_path("dense", cpu).name) == ("scan", "dense")


def test_an_unknown_path_is_named():
    with pytest.raises(ValueError, match=r"path must be one of \('auto', 'scan', 'dense'\), got 'fast'"):
        choose_path("fast", torch.device("cpu"))
    with pytest.raises(ValueError, match=r"path must be one of .*got 'gpu'"):
        ap_loss([LabelledSet(torch.zeros(3), torch.tensor([1, 0, 0]))], path="gpu")


def test_a_detr_step_of_13_sets_dispatches_as_few_operations_as_two_sets():
    """The segmented ranking (one call for all sets of a step): at most 150 operations for Rank & Sort Loss at 13
    sets, as many as for two; a list of one set takes the single ranking's fewer."""
    thirteen = count_detr_step("rank_sort", 13)
    assert thirteen.total <= 150, {str(op): count for op, count in thirteen.counts.most_common()}
    assert thirteen.total == count_detr_step("rank_sort", 2).total
    assert count_detr_step("rank_sort", 1).total < thirteen.total
