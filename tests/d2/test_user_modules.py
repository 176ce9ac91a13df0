"""``train_net.py --import MODULE``: a criterion registered by the user's own module (docs/criteria.md's example,
saved as my_criterion.py) trains with ``--num-gpus 2`` (two gloo CPU workers), imported in every process; an unknown
criterion's error names the option."""

from __future__ import annotations

import subprocess
import sys

import pytest

from alrp_d2.user_modules import import_user_modules

from .docs_criterion import docs_criterion_code
from .lazy_runs import REPO_ROOT, environment, logged, shapes_dataset_arguments
from .tiny_configs import tiny_retinanet_cfg

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.yaml")


def test_a_criterion_of_the_users_module_trains_with_two_workers_by_import(tmp_path):
    (tmp_path / "my_criterion.py").write_text(docs_criterion_code())
    datasets = shapes_dataset_arguments(str(tmp_path / "datasets"), "imp", num_val=1)
    output_dir = tmp_path / "output"
    command = [
        *(sys.executable, str(REPO_ROOT / "train_net.py"), "--config-file", QUICKSTART),
        *("--import", "my_criterion", "--num-gpus", "2", "--dist-url", "auto", *datasets),
        *("MODEL.ALRP.CRITERION", "CrossEntropyCriterion", "DATASETS.TRAIN", '("imp_train",)', "DATASETS.TEST", "()"),
        *("SOLVER.IMS_PER_BATCH", "4", "SOLVER.MAX_ITER", "2", "SOLVER.STEPS", "()", "SOLVER.LOG_PERIOD", "1"),
        *("MODEL.RESNETS.DEPTH", "18", "MODEL.FPN.OUT_CHANNELS", "32", "OUTPUT_DIR", str(output_dir)),
    ]
    # From the user's directory, as the page says: the module is found there, in the launcher and in both workers.
    result = subprocess.run(command, cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = logged(output_dir)
    assert sorted(records) == [0, 1]
    assert all(record["loss_retinanet_cls"] > 0 for record in records.values())


def test_an_unknown_criterion_names_the_import_option():
    from detectron2.modeling import build_model

    with pytest.raises(ValueError, match="train_net.py --import MODULE"):
        build_model(tiny_retinanet_cfg(CRITERION="Nope"))


def test_a_missing_module_or_file_is_named(tmp_path):
    with pytest.raises(ModuleNotFoundError, match="--import no_such_user_module"):
        import_user_modules(["no_such_user_module"])
    with pytest.raises(FileNotFoundError, match="--import .*missing.py"):
        import_user_modules([str(tmp_path / "missing.py")])
