"""Checkpoints that a kill cannot destroy: atomic writes (a process SIGKILLed at any byte of a
checkpoint leaves a resumable run), resuming from the newest readable checkpoint when the latest is
damaged, last_checkpoint confined to OUTPUT_DIR, and the extension of a finished run with --resume
and a larger MAX_ITER killed while model_final.pth is rewritten (train_net.py, tiny model, CPU)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import pytest
import torch
from torch import nn

from alrp_d2.checkpoint import AlrpCheckpointer, UnreadableCheckpointError
from alrp_d2.checkpoint.atomic_write import write_atomically
from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths

from .tiny_configs import tiny_retinanet_cfg

REPO_ROOT = Path(__file__).resolve().parents[2]


class Counter:
    """A checkpointable with one number (the trainer's iteration, say)."""

    def __init__(self, value: int):
        self.value = value

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def checkpointer(directory: Path, weight: float, value: int) -> AlrpCheckpointer:
    model = nn.Linear(64, 64)
    with torch.no_grad():
        model.weight.fill_(weight)
    return AlrpCheckpointer(model, str(directory), counter=Counter(value))


def serialised_size(weight: float, value: int) -> int:
    probe = checkpointer(Path("."), weight, value)
    buffer = io.BytesIO()
    torch.save({"model": probe.model.state_dict(), "counter": probe.checkpointables["counter"].state_dict()}, buffer)
    return len(buffer.getvalue())


def _save_and_die(directory: str, kill_at: int, kill_on_replace: int) -> None:
    """In a forked child: saves model_final.pth (weight 2, value 7) and SIGKILLs itself after
    ``kill_at`` bytes of the checkpoint (-1: never), or at the ``kill_on_replace``-th rename."""
    real_save, real_replace, renames = torch.save, os.replace, []

    def save_and_die(obj, f):
        buffer = io.BytesIO()
        real_save(obj, buffer)
        f.write(buffer.getvalue()[:kill_at])
        f.flush()
        os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    def replace_and_die(source, target):
        renames.append(target)
        if len(renames) == kill_on_replace:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(source, target)

    if kill_at >= 0:
        torch.save = save_and_die
    os.replace = replace_and_die
    checkpointer(Path(directory), 2.0, 7).save("model_final")
    os._exit(0)


def killed_save(directory: Path, kill_at: int = -1, kill_on_replace: int = 0) -> int:
    child = multiprocessing.get_context("fork").Process(
        target=_save_and_die, args=(str(directory), kill_at, kill_on_replace)
    )
    child.start()
    child.join(60)
    return child.exitcode


def resumed(directory: Path):
    fresh = checkpointer(directory, 0.0, 0)
    fresh.resume_or_load("", resume=True)
    return float(fresh.model.weight[0, 0].detach()), fresh.checkpointables["counter"].value


SIZE = serialised_size(2.0, 7)


@pytest.mark.parametrize(
    "kill_at, kill_on_replace, expected",
    [
        (0, 0, (1.0, 3)),
        (1, 0, (1.0, 3)),
        (SIZE // 3, 0, (1.0, 3)),
        (SIZE - 1, 0, (1.0, 3)),
        (-1, 1, (1.0, 3)),  # the whole file written, killed before its rename
        (-1, 2, (2.0, 7)),  # renamed, killed before last_checkpoint's rename
    ],
    ids=["byte0", "byte1", "third", "last-byte", "before-rename", "before-tag"],
)
def test_a_save_killed_at_any_byte_leaves_a_resumable_run(tmp_path, kill_at, kill_on_replace, expected):
    """A finished run (model_final.pth with weight 1, value 3) rewrites model_final.pth, as when it is
    extended with --resume and a larger MAX_ITER, and is killed during the write."""
    checkpointer(tmp_path, 1.0, 3).save("model_final")
    assert killed_save(tmp_path, kill_at, kill_on_replace) == -signal.SIGKILL
    assert resumed(tmp_path) == expected
    assert (tmp_path / "last_checkpoint").read_text() == "model_final.pth"
    checkpointer(tmp_path, 4.0, 9).save("model_final")  # the next save removes the killed one's temporary file
    assert sorted(os.listdir(tmp_path)) == ["last_checkpoint", "model_final.pth"]


def test_an_uninterrupted_save_is_complete(tmp_path):
    checkpointer(tmp_path, 1.0, 3).save("model_final")
    assert killed_save(tmp_path) == 0
    assert resumed(tmp_path) == (2.0, 7)


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"old")

    def fail(f):
        f.write(b"new")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(str(path), fail)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["file"]


@contextlib.contextmanager
def warnings_of(name: str) -> Iterator[List[str]]:
    """The messages of the warnings logged by logger ``name`` in the block."""
    messages: List[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(name).addHandler(handler)
    try:
        yield messages
    finally:
        logging.getLogger(name).removeHandler(handler)


def test_resume_falls_back_to_the_newest_readable_checkpoint(tmp_path):
    """A finished run (model_final.pth at iteration 3) extended to model_0000005.pth and
    model_0000007.pth, the latter damaged (as a writer saving in place, fvcore's, leaves it): resuming
    warns naming it and loads the newest readable checkpoint, model_0000005.pth, not model_final.pth."""
    history = [("model_0000001", 0.5, 1), ("model_final", 1.0, 3), ("model_0000005", 1.5, 5), ("model_0000007", 2.0, 7)]
    for age, (name, weight, value) in enumerate(history):
        checkpointer(tmp_path, weight, value).save(name)
        os.utime(tmp_path / f"{name}.pth", (1e9 + age, 1e9 + age))
    damaged = tmp_path / "model_0000007.pth"
    damaged.write_bytes(damaged.read_bytes()[: SIZE // 2])
    with warnings_of("alrp_d2.checkpoint") as messages:
        assert resumed(tmp_path) == (1.5, 5)
    (message,) = messages
    assert str(damaged) in message and "model_0000005.pth" in message


def test_resume_without_any_readable_checkpoint_is_an_error(tmp_path):
    checkpointer(tmp_path, 2.0, 7).save("model_final")
    (tmp_path / "model_final.pth").write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(UnreadableCheckpointError, match="no checkpoint of .* can be read"):
        resumed(tmp_path)


@pytest.mark.parametrize("content", ["../elsewhere/model.pkl", "/tmp/model.pth", "link.pth"])
def test_last_checkpoint_may_only_name_a_file_of_the_output_directory(tmp_path, content):
    output = tmp_path / "output"
    output.mkdir()
    (tmp_path / "elsewhere").mkdir()
    checkpointer(tmp_path / "elsewhere", 1.0, 3).save("model")
    (output / "link.pth").symlink_to(tmp_path / "elsewhere" / "model.pth")
    (output / "last_checkpoint").write_text(content)
    with pytest.raises(ValueError, match="not a file of the output directory"):
        resumed(output)


def test_the_fallback_never_follows_a_link_out_of_the_output_directory(tmp_path):
    """last_checkpoint names a damaged checkpoint; the only other .pth of OUTPUT_DIR is a link to a
    readable checkpoint elsewhere: resuming refuses rather than load it."""
    output = tmp_path / "output"
    output.mkdir()
    (tmp_path / "elsewhere").mkdir()
    checkpointer(tmp_path / "elsewhere", 1.0, 3).save("model")
    checkpointer(output, 2.0, 7).save("model_final")
    (output / "model_final.pth").write_bytes(b"damaged")
    (output / "link.pth").symlink_to(tmp_path / "elsewhere" / "model.pth")
    with pytest.raises(UnreadableCheckpointError, match="no checkpoint of .* can be read") as error:
        resumed(output)
    assert "link.pth" not in str(error.value)


# ---- the command line: a finished run extended with --resume, killed while model_final.pth is rewritten ----

KILL_WHILE_WRITING_MODEL_FINAL = """
import os, runpy, signal, sys, torch
real_save = torch.save
def save(obj, f):
    if os.path.basename(getattr(f, "name", "")).startswith(".model_final.pth"):
        f.write(b"PK\\x03\\x04 half a checkpoint")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_save(obj, f)
torch.save = save
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def shapes_dataset(tmp_path_factory) -> List[str]:
    root = str(tmp_path_factory.mktemp("datasets"))
    prepare_shapes_dataset(root, num_images={"train": 4, "val": 2})
    return ["ckpt_train", *shapes_paths(root, "train")]


def train(config: Path, dataset: List[str], output: Path, max_iter: int, kill: bool = False):
    command = [str(REPO_ROOT / "train_net.py"), "--config-file", str(config), "--dataset", *dataset, "--resume"]
    command += ["OUTPUT_DIR", str(output), "SOLVER.MAX_ITER", str(max_iter)]
    prefix = [sys.executable, "-c", KILL_WHILE_WRITING_MODEL_FINAL] if kill else [sys.executable]
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(prefix + command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600)


def test_extending_a_finished_run_survives_a_kill_during_model_final(shapes_dataset, tmp_path):
    cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    cfg.MODEL.RETINANET.NUM_CLASSES, cfg.MODEL.RETINANET.NORM = 5, ""
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = ("ckpt_train",), ()
    cfg.DATALOADER.NUM_WORKERS, cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.WARMUP_ITERS = 0, 2, 0
    cfg.SOLVER.STEPS, cfg.SOLVER.CHECKPOINT_PERIOD, cfg.SOLVER.LOG_PERIOD, cfg.SEED = (), 100, 1, 3
    config = tmp_path / "config.yaml"
    config.write_text(cfg.dump())
    output = tmp_path / "output"

    finished = train(config, shapes_dataset, output, max_iter=2)
    assert finished.returncode == 0, finished.stderr[-3000:]
    killed = train(config, shapes_dataset, output, max_iter=4, kill=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert torch.load(output / "model_final.pth")["iteration"] == 1  # the finished run's, intact
    extended = train(config, shapes_dataset, output, max_iter=4)
    assert extended.returncode == 0, extended.stderr[-3000:]
    assert torch.load(output / "model_final.pth")["iteration"] == 3
    iterations = [json.loads(line)["iteration"] for line in (output / "metrics.json").read_text().splitlines()]
    assert iterations[-2:] == [2, 3]
