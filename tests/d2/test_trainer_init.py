"""AlrpTrainer builds the trainer exactly as detectron2's DefaultTrainer does, except for DDP on
CPU workers: these tests fail when a detectron2 upgrade changes DefaultTrainer.__init__'s steps."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import List

import pytest
from detectron2.engine import DefaultTrainer
from detectron2.utils import comm

from alrp_d2.engine import AlrpTrainer
from alrp_d2.engine.trainer import runs_cpu_workers

from .tiny_configs import tiny_retinanet_cfg


def _steps(function_source: str) -> List[str]:
    """The calls and ``self.<attribute> =`` assignments of a function body, in source order
    (logging set-up and the constructor's own branch on the CPU case are left out)."""
    tree = ast.parse(textwrap.dedent(function_source))
    steps = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            steps.extend(
                f"{node.lineno:04d} self.{target.attr} ="
                for target in node.targets
                if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self"
            )
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name.startswith(("self.build", "self.register", "create_ddp_model", "DefaultTrainer.")) or name in (
                "SimpleTrainer",
                "AMPTrainer",
                "DetectionCheckpointer",
            ):
                steps.append(f"{node.lineno:04d} {name}()")
    return [step.split(" ", 1)[1] for step in sorted(steps)]


def _cpu_branch_source() -> str:
    """AlrpTrainer.__init__ after its early return for GPUs and single processes."""
    source = textwrap.dedent(inspect.getsource(AlrpTrainer.__init__))
    return textwrap.dedent(source[source.index("return\n") + len("return\n") :])


def test_cpu_worker_init_has_the_steps_of_default_trainer():
    detectron2_steps = _steps(inspect.getsource(DefaultTrainer.__init__))
    assert "create_ddp_model()" in detectron2_steps
    assert _steps(_cpu_branch_source()) == detectron2_steps


def test_cpu_worker_branch_only_for_several_cpu_processes(monkeypatch):
    cfg = tiny_retinanet_cfg()
    assert not runs_cpu_workers(cfg)  # one process: DefaultTrainer.__init__ itself
    monkeypatch.setattr(comm, "get_world_size", lambda: 2)
    assert runs_cpu_workers(cfg)
    cfg.MODEL.DEVICE = "cuda"
    assert not runs_cpu_workers(cfg)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_single_process_uses_default_trainer_init(device, monkeypatch, tmp_path):
    """With one process DefaultTrainer.__init__ runs unchanged, whatever the device."""
    called = []

    def record(self, cfg):
        called.append(cfg.MODEL.DEVICE)

    monkeypatch.setattr(DefaultTrainer, "__init__", record)
    cfg = tiny_retinanet_cfg()
    cfg.MODEL.DEVICE = device
    cfg.DATASETS.TRAIN = cfg.DATASETS.TEST = ()  # the tiny model has 3 classes, detectron2's COCO default 80
    AlrpTrainer(cfg)
    assert called == [device]
