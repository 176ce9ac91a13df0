"""tools/show_dataset.py draws the ground truth of a registered dataset, e.g. one given with --dataset."""

from __future__ import annotations

import importlib.util

from matplotlib.image import imread

from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths

from .lazy_runs import REPO_ROOT

SPEC = importlib.util.spec_from_file_location("show_dataset", REPO_ROOT / "tools" / "show_dataset.py")
show_dataset = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(show_dataset)


def test_the_ground_truth_of_a_dataset_is_drawn(tmp_path, capsys):
    prepare_shapes_dataset(str(tmp_path), num_images={"train": 3, "val": 1})
    json_file, image_dir = shapes_paths(str(tmp_path), "train")
    output = tmp_path / "drawn"
    arguments = ["gt_train", "--dataset", "gt_train", json_file, image_dir, "--output", str(output), "--num", "2"]
    assert show_dataset.main([*arguments, "--scale", "2"]) == 0
    drawn = sorted(output.iterdir())
    assert len(drawn) == 2 and imread(drawn[0]).shape[:2] == (256, 256)
    assert show_dataset.main(["not_registered", "--output", str(output)]) == 2
    assert "--dataset not_registered" in capsys.readouterr().err
