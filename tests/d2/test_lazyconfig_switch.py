"""docs/lazyconfig.md, "Switch a detectron2 model": detectron2's own COCO-Detection/retinanet_R_50_FPN_1x.py and
COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.py from the installed model zoo, switched to aLRP Loss, Correlation
Loss and Rank & Sort Loss by at most six config lines and no class of the user's, train two iterations with
train_net.py (at test scale: ResNet-18, the shapes dataset, 2 images per iteration)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths

from .lazy_runs import REPO_ROOT, logged, run_train_net
from .lazy_switches import SWITCHES, write_switched_config


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> List[str]:
    root = str(tmp_path_factory.mktemp("datasets"))
    prepare_shapes_dataset(root, num_images={"train": 4, "val": 1})
    return ["--dataset", "switch_train", *shapes_paths(root, "train")]


def test_a_switch_is_at_most_six_lines_without_a_class():
    for _, switch, _ in SWITCHES.values():
        assert len(switch.splitlines()) <= 6 and "class " not in switch


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_switched_detectron2_config_trains_two_iterations_with_train_net(name, dataset, tmp_path):
    path = write_switched_config(tmp_path / f"{name}.py", name)
    losses = SWITCHES[name][2]
    output_dir = tmp_path / "output"
    run_train_net(["--config-file", str(path), *dataset, f"train.output_dir={output_dir}"])
    records = logged(output_dir)
    assert sorted(records) == [0, 1]
    for iteration in records.values():
        assert set(losses) <= set(iteration), sorted(iteration)
        assert all(value == value for value in iteration.values())  # no NaN
    assert (Path(output_dir) / "model_final.pth").is_file()


def test_the_rs_mask_rcnn_switch_recipe_learns_from_scratch_on_the_cpu_machine(dataset, tmp_path):
    """configs/quickstart/rs_mask_rcnn_switch_shapes.py keeps detectron2's train.device "cuda": on this machine
    without CUDA it runs on the CPU; with normalisation, every loss of its first iterations is above 0."""
    output_dir = tmp_path / "output"
    config = str(REPO_ROOT / "configs" / "quickstart" / "rs_mask_rcnn_switch_shapes.py")
    output = run_train_net([
        "--config-file", config, *dataset, f"train.output_dir={output_dir}", "train.max_iter=3", "train.log_period=1",
        "dataloader.train.dataset.names=switch_train", "dataloader.train.total_batch_size=2",
        "dataloader.train.num_workers=0", "dataloader.evaluator=None",
    ])  # fmt: skip
    assert "no CUDA device: the model runs on the CPU" in output
    records = logged(output_dir)
    assert sorted(records) == [0, 1, 2]
    for iteration in records.values():
        losses = {key: value for key, value in iteration.items() if key.startswith("loss_")}
        assert {"loss_rpn_cls", "loss_box_cls", "loss_mask"} <= set(losses)
        assert all(value > 0 for value in losses.values()), losses
