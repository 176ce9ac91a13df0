"""Exact resume: a train_net.py run killed (SIGKILL) after a checkpoint and resumed with --resume
logs the same losses and self-balance weights at every iteration as an uninterrupted run,
for aLRP RetinaNet on two gloo workers (--num-gpus 2) and for RS Mask R-CNN in one process (Rank & Sort Loss's
weights of every step, the mask head's random resampling), with one intra-op thread (bit for bit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
from detectron2.data.build import build_batch_data_loader
from detectron2.data.common import DatasetFromList, MapDataset
from detectron2.data.samplers import TrainingSampler

from alrp_d2.data.samplers import ResumableBatchSampler
from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths

from .lazy_runs import logged
from .tiny_configs import tiny_rank_sort_cfg, tiny_retinanet_cfg

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_ITER, CHECKPOINT_PERIOD = 12, 4
FIRST_CHECKPOINT = f"model_{CHECKPOINT_PERIOD - 1:07d}.pth"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> List[str]:
    root = str(tmp_path_factory.mktemp("datasets"))
    prepare_shapes_dataset(root, num_images={"train": 12, "val": 2})
    return ["resume_train", *shapes_paths(root, "train")]


def write_config(path: Path, model: str) -> str:
    """The quickstart config at tiny scale: 16-channel FPN (RS Mask R-CNN: 32 channels, GroupNorm), 2 images per
    iteration, SB period 2, a worker process for the data, random flips, metrics.json written at every iteration.
    RS Mask R-CNN trains its mask head on at most 3 positives per iteration (a random subset)."""
    if model == "retinanet":
        cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    else:
        cfg = tiny_rank_sort_cfg("quickstart/rs_mask_rcnn_shapes.yaml", MASK_MAX_POSITIVES=3)
        # From scratch without normalisation in the FPN it collapses after 8 iterations (every loss exactly 0,
        # stopped by CollapseCheckHook); GroupNorm(32) needs 32 channels.
        cfg.MODEL.FPN.NORM, cfg.MODEL.FPN.OUT_CHANNELS = "GN", 32
    cfg.MODEL.RETINANET.NUM_CLASSES = cfg.MODEL.ROI_HEADS.NUM_CLASSES = 5
    cfg.MODEL.RETINANET.NORM = ""
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = ("resume_train",), ()
    cfg.DATALOADER.NUM_WORKERS = 1
    cfg.SOLVER.IMS_PER_BATCH = 2
    cfg.SOLVER.BASE_LR = 0.01
    cfg.SOLVER.WARMUP_ITERS = 2
    cfg.SOLVER.MAX_ITER = MAX_ITER
    cfg.SOLVER.STEPS = (8,)
    cfg.SOLVER.CHECKPOINT_PERIOD = CHECKPOINT_PERIOD
    cfg.SOLVER.LOG_PERIOD = 1
    cfg.MODEL.ALRP.SB_PERIOD = 2
    cfg.SEED = 5
    path.write_text(cfg.dump())
    return str(path)


def train_command(config: str, dataset: List[str], output_dir: Path, num_gpus: int, resume: bool) -> List[str]:
    command = [sys.executable, str(REPO_ROOT / "train_net.py"), "--config-file", config, "--dataset", *dataset]
    command += ["--num-gpus", str(num_gpus)] + (["--resume"] if resume else [])
    if num_gpus > 1:
        command += ["--dist-url", "auto"]
    return command + ["OUTPUT_DIR", str(output_dir), "SOLVER.IMS_PER_BATCH", str(2 * num_gpus)]


def environment() -> Dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))


def run(command: List[str]) -> None:
    result = subprocess.run(command, env=environment(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def run_and_kill_after_first_checkpoint(command: List[str], output_dir: Path) -> None:
    """Starts the run in its own process group and SIGKILLs it (and its workers) as soon as the
    first checkpoint is complete (named in last_checkpoint)."""
    process = subprocess.Popen(
        command, env=environment(), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    marker = output_dir / "last_checkpoint"
    deadline = time.monotonic() + 600
    while not (marker.exists() and marker.read_text().strip() == FIRST_CHECKPOINT):
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()
    assert not (output_dir / "model_final.pth").exists(), "the run ended before it was killed"


# The step's value of the localisation weight that varies along the run: self-balanced, or RS Loss's.
VARYING_WEIGHT = {"retinanet": "sb/retinanet/weight", "rs_mask_rcnn": "sb/box/mask_weight"}


# Each model and each process count once (the four pairings took 4.6 minutes): the quickstart's documented CPU run
# (RetinaNet, --num-gpus 2) and RS Mask R-CNN, whose mask head resamples at random, in one process.
@pytest.mark.parametrize("num_gpus, model", [(2, "retinanet"), (1, "rs_mask_rcnn")])
def test_killed_and_resumed_run_logs_the_uninterrupted_run(model, num_gpus, dataset, tmp_path):
    config = write_config(tmp_path / "config.yaml", model)
    uninterrupted, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    run(train_command(config, dataset, uninterrupted, num_gpus, resume=False))
    run_and_kill_after_first_checkpoint(train_command(config, dataset, resumed, num_gpus, resume=False), resumed)
    run(train_command(config, dataset, resumed, num_gpus, resume=True))

    expected, got = logged(uninterrupted), logged(resumed)
    assert sorted(expected) == list(range(MAX_ITER))
    # detectron2 writes metrics after the checkpoint of the same iteration: a kill between the two
    # loses that one record (the resumed run starts at the next iteration).
    assert set(expected) - set(got) <= {CHECKPOINT_PERIOD - 1}
    assert min(got) == 0 and max(got) == MAX_ITER - 1
    weights = {record[VARYING_WEIGHT[model]] for record in expected.values()}
    assert len(weights) > 2  # the localisation weight changed several times
    for iteration in sorted(got):
        assert got[iteration] == expected[iteration], f"iteration {iteration}"


def test_batches_are_those_of_detectron2s_sampler_and_grouping():
    """One process, one loader worker: the same images in the same batches as detectron2's
    TrainingSampler + AspectRatioGroupedDataset."""
    dicts = [{"index": i, "width": 40 if i % 3 else 30, "height": 30 if i % 3 else 40} for i in range(11)]
    loader = build_batch_data_loader(
        MapDataset(DatasetFromList(dicts, copy=False), lambda d: d),
        TrainingSampler(len(dicts), seed=9),
        total_batch_size=3,
        aspect_ratio_grouping=True,
    )
    expected = [[d["index"] for d in batch] for _, batch in zip(range(15), loader)]
    sampler = ResumableBatchSampler([d["width"] > d["height"] for d in dicts], batch_size=3, seed=9)
    got = [[index for index, _, _ in batch] for _, batch in zip(range(15), sampler)]
    assert got == expected


def test_batches_from_any_iteration_continue_the_stream():
    """Starting the sampler at iteration k gives batches k, k+1, ... of a sampler started at 0, for
    mixed aspect ratios (two buckets) and for each of two ranks."""
    landscape = [i % 3 == 0 for i in range(11)]
    for rank in range(2):
        full = ResumableBatchSampler(landscape, batch_size=3, seed=9, rank=rank, world_size=2)
        stream = iter(full)
        batches = [next(stream) for _ in range(12)]
        resumed = ResumableBatchSampler(landscape, batch_size=3, seed=9, rank=rank, world_size=2)
        resumed.start_iteration = 7
        stream = iter(resumed)
        assert [next(stream) for _ in range(5)] == batches[7:]
        for batch in batches:
            assert len({landscape[index] for index, _, _ in batch}) == 1
            assert all(position % 2 == rank for _, position, _ in batch)
