"""A training loader whose batches are a function of (seed, iteration, rank), so that a resumed run
sees exactly the batches and augmentations of the uninterrupted one (docs/getting_started.md, "Resume").

detectron2's ``TrainingSampler`` restarts its seeded stream when a run is resumed, and the
augmentation RNG of its loader workers restarts with it. Here:

* :class:`ResumableBatchSampler` yields the batches of detectron2's default pipeline
  (``TrainingSampler`` followed by ``AspectRatioGroupedDataset``, in the order of one loader worker)
  from any iteration on, by replaying the seeded index stream and the aspect-ratio buckets.
* :class:`SeededSamples` maps each sample under RNGs (python, numpy, torch) seeded from
  (seed, position of the sample in the stream), so its augmentation does not depend on the loader
  worker or on what that worker mapped before; a skipped sample (mapper returned None) is replaced
  by a deterministic choice.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import torch
from detectron2.data.build import trivial_batch_collator
from detectron2.data.common import DatasetFromList
from detectron2.utils import comm
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["ResumableBatchSampler", "SeededSamples", "build_resumable_train_loader", "derived_seed", "seeded_rngs"]

logger = logging.getLogger(__name__)

Sample = Tuple[int, int, int]  # (dataset index, position in the global index stream, seed)
MAX_REPLACEMENTS = 100


def derived_seed(*keys: int) -> int:
    """A 31-bit seed that is a deterministic function of the integer ``keys`` (numpy SeedSequence)."""
    return int(np.random.SeedSequence([int(k) % 2**64 for k in keys]).generate_state(1)[0] >> 1)


@contextlib.contextmanager
def seeded_rngs(seed: int) -> Iterator[None]:
    """Seeds python's, numpy's and torch's (CPU) global RNGs with ``seed`` and restores their
    previous states on exit, so that mapping a sample in the training process leaves the RNG of
    the training step untouched."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


class ResumableBatchSampler(Sampler):
    """The per-rank batches of detectron2's ``TrainingSampler(size, seed=seed)`` +
    ``AspectRatioGroupedDataset`` (two buckets: width > height or not), as (dataset index,
    stream position, seed) triples, starting at batch ``start_iteration``.

    Global stream: ``randperm(size)`` epochs from one generator seeded with ``seed``; rank ``r`` of
    ``W`` takes positions ``r, r + W, ...``. Set ``start_iteration`` before iterating; reaching
    batch k replays the stream from the start (O(k * batch_size * W) integer work, no image).
    """

    def __init__(self, landscape: Sequence[bool], batch_size: int, seed: int, rank: int = 0, world_size: int = 1):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not len(landscape):
            raise ValueError("the training dataset is empty")
        self.landscape = list(landscape)
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.start_iteration = 0

    def _global_stream(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        while True:
            yield from torch.randperm(len(self.landscape), generator=generator).tolist()

    def _batches(self) -> Iterator[List[Sample]]:
        buckets: Tuple[List[Sample], List[Sample]] = ([], [])
        for position, index in enumerate(self._global_stream()):
            if position % self.world_size != self.rank:
                continue
            bucket = buckets[0 if self.landscape[index] else 1]
            bucket.append((index, position, self.seed))
            if len(bucket) == self.batch_size:
                yield bucket[:]
                del bucket[:]

    def __iter__(self) -> Iterator[List[Sample]]:
        batches = self._batches()
        for _ in range(self.start_iteration):
            next(batches)
        yield from batches


class SeededSamples(Dataset):
    """``mapper(dataset_dicts[index])`` of a (dataset index, stream position, seed) triple, under
    RNGs seeded from (seed, position). When the mapper returns None (a skipped sample), the sample
    of index ``derived_seed(seed, position, attempt, 1) % len(dataset_dicts)`` replaces it. The
    dicts are kept serialised (detectron2's ``DatasetFromList``), so loader workers do not copy them."""

    def __init__(self, dataset_dicts: Sequence[Dict[str, Any]], mapper: Callable[[Dict[str, Any]], Any]):
        self.dataset_dicts = DatasetFromList(list(dataset_dicts), copy=False)
        self.mapper = mapper

    def __len__(self) -> int:
        return len(self.dataset_dicts)

    def __getitem__(self, sample: Sample) -> Any:
        index, position, seed = sample
        for attempt in range(MAX_REPLACEMENTS):
            with seeded_rngs(derived_seed(seed, position, attempt)):
                mapped = self.mapper(self.dataset_dicts[index])
            if mapped is not None:
                return mapped
            index = derived_seed(seed, position, attempt, 1) % len(self.dataset_dicts)
        raise RuntimeError(f"the mapper returned None for {MAX_REPLACEMENTS} samples in a row (position {position})")


def build_resumable_train_loader(
    dataset_dicts: Sequence[Dict[str, Any]],
    mapper: Callable[[Dict[str, Any]], Any],
    total_batch_size: int,
    seed: int,
    aspect_ratio_grouping: bool = True,
    num_workers: int = 0,
) -> DataLoader:
    """The training loader of alrp-d2: batches of ``total_batch_size // world size`` mapped dicts
    from :class:`ResumableBatchSampler` (``loader.batch_sampler``). ``seed`` is cfg.SEED, as for
    detectron2's ``TrainingSampler`` (which also uses a negative SEED as it is)."""
    world_size = comm.get_world_size()
    if total_batch_size % world_size:
        raise ValueError(f"SOLVER.IMS_PER_BATCH ({total_batch_size}) must be divisible by the {world_size} workers")
    landscape = [bool(aspect_ratio_grouping and d["width"] > d["height"]) for d in dataset_dicts]
    sampler = ResumableBatchSampler(landscape, total_batch_size // world_size, seed, comm.get_rank(), world_size)
    return DataLoader(
        SeededSamples(dataset_dicts, mapper),
        batch_sampler=sampler,
        collate_fn=trivial_batch_collator,
        num_workers=num_workers,
    )
