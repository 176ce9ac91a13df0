"""The inputs of a detectron2 DETR that trained silently wrong or failed deep inside, each refused in one line naming
the argument or the key: HuggingFaceDETR's arguments (and their yacs keys), a model reading its mappers' channels
reversed, a training set without objects; train_net.py and demo.py report a refused config in one line, exit 2."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from detectron2.config import CfgNode, get_cfg
from detectron2.data import get_detection_dataset_dicts

import demo as demo_module
from alrp_d2.checks.errors import ArgumentError, ConfigError
from alrp_d2.config import add_alrp_config, setup_cfg
from alrp_d2.config.lazy_fields import lazy_calls
from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths
from alrp_d2.data.training_filter import training_dataset_dicts
from alrp_d2.engine.lazy_run import build_lazy_train_loader, load_lazy_config, prepare_lazy_datasets
from alrp_d2.modeling import HuggingFaceDETR
from alrp_d2.modeling.huggingface_detr import plain

from .lazy_runs import REPO_ROOT, environment
from .tiny_detr_detectors import DEFORMABLE_DETR_TWO_STAGE, RT_DETR_V2

pytest.importorskip("transformers", reason="HuggingFaceDETR needs transformers: pip install -e '.[detr]'")

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "rtdetr_shapes.py")
ARGUMENTS: List[Any] = [
    ({"pixel_std": [0.0, 255.0, 255.0]}, r"pixel_std=\[0.0, 255.0, 255.0\]\): must be 3 finite numbers > 0"),
    ({"pixel_mean": [0.0, float("nan"), 0.0]}, r"pixel_mean=.*: must be 3 finite numbers"),
    ({"hf_config": {**RT_DETR_V2, "num_queries": 0}}, r"hf_config.num_queries=0\): must be an integer >= 1"),
    ({"hf_config": {**RT_DETR_V2, "num_queries": -1}}, r"hf_config.num_queries=-1\): must be an integer >= 1"),
    ({"size_divisibility": 7}, r"size_divisibility=7\): must be a positive multiple of 32 for rt_detr_v2"),
    ({"size_divisibility": 0}, r"size_divisibility=0\): must be a positive multiple of 32"),
    ({"num_classes": 0}, r"num_classes=0\): must be an integer >= 1"),
    ({"hf_config": {"model_type": "detr"}}, r"hf_config.model_type='detr'\): must be one of"),
]


@pytest.mark.parametrize("arguments, message", ARGUMENTS)
def test_an_unusable_argument_is_named(arguments, message):
    with pytest.raises(ArgumentError, match=r"^Invalid argument HuggingFaceDETR\(" + message):
        HuggingFaceDETR(**{"hf_config": RT_DETR_V2, "num_classes": 3, **arguments})


def test_a_model_with_a_pixel_mask_takes_any_size_divisibility():
    model = HuggingFaceDETR(hf_config=DEFORMABLE_DETR_TWO_STAGE, num_classes=3, size_divisibility=7)
    assert model.size_divisibility == 7


def yacs_detr(**keys: Any) -> CfgNode:
    cfg = get_cfg()
    add_alrp_config(cfg)
    cfg.MODEL.DETR.HF_CONFIG = CfgNode(plain(RT_DETR_V2))
    cfg.MODEL.DETR.NUM_CLASSES = 3
    cfg.MODEL.PIXEL_MEAN, cfg.MODEL.PIXEL_STD = [0.0, 0.0, 0.0], [255.0, 255.0, 255.0]
    cfg.merge_from_list([item for pair in keys.items() for item in pair])
    return cfg


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"MODEL.DETR.NUM_CLASSES": 0}, r"MODEL.DETR.NUM_CLASSES=0: must be an integer >= 1"),
        ({"MODEL.PIXEL_STD": [0.0, 1.0, 1.0]}, r"MODEL.PIXEL_STD=\[0.0, 1.0, 1.0\]: must be 3 finite numbers > 0"),
        ({"MODEL.DETR.SIZE_DIVISIBILITY": 7}, r"MODEL.DETR.SIZE_DIVISIBILITY=7: must be a positive multiple of 32"),
        ({"MODEL.DETR.HF_CONFIG.num_queries": 0}, r"MODEL.DETR.HF_CONFIG.num_queries=0: must be an integer >= 1"),
    ],
)
def test_a_yacs_config_names_the_key(keys, message):
    with pytest.raises(ConfigError, match="^Invalid config value " + message):
        HuggingFaceDETR(yacs_detr(**keys))


def test_a_model_reading_its_mappers_channels_reversed_is_refused_naming_both_keys():
    message = r"model.input_format='BGR' but dataloader.train.mapper.image_format='RGB'"
    with pytest.raises(ConfigError, match=message):
        load_lazy_config(QUICKSTART, ["model.input_format=BGR"])
    both = [
        "model.input_format=BGR",
        "dataloader.train.mapper.image_format=BGR",
        "dataloader.test.mapper.image_format=BGR",
    ]
    assert load_lazy_config(QUICKSTART, both).model.input_format == "BGR"  # converted by the model, as it says


@pytest.fixture(scope="module")
def shapes_files(tmp_path_factory) -> Path:
    """A small shapes set: 2 training images, 1 validation image."""
    root = tmp_path_factory.mktemp("datasets")
    prepare_shapes_dataset(str(root), num_images={"train": 2, "val": 1})
    return root


def without_objects(shapes_files: Path, target: Path) -> List[str]:
    """``--dataset`` spec of the shapes training split with every annotation removed, written to ``target``."""
    json_file, image_root = shapes_paths(str(shapes_files), "train")
    content: Dict[str, Any] = json.loads(Path(json_file).read_text())
    content["annotations"] = []
    target.write_text(json.dumps(content))
    return [target.stem, str(target), image_root]


def test_a_training_set_without_objects_stops_before_the_first_step_naming_it(shapes_files, tmp_path):
    spec = without_objects(shapes_files, tmp_path / "unannotated_train.json")
    cfg = load_lazy_config(QUICKSTART)
    for call in lazy_calls(cfg.dataloader, get_detection_dataset_dicts):
        call.names = "unannotated_train"
    cfg.dataloader.train.dataset.filter_empty = False
    prepare_lazy_datasets(cfg, argparse.Namespace(dataset=[spec], eval_only=False))
    message = r"dataloader.train \('unannotated_train',\): none of its 2 images holds an object"
    with pytest.raises(ConfigError, match=message):
        build_lazy_train_loader(cfg)
    yacs = get_cfg()
    add_alrp_config(yacs)
    yacs.DATASETS.TRAIN, yacs.DATALOADER.FILTER_EMPTY_ANNOTATIONS = ("unannotated_train",), False
    with pytest.raises(ConfigError, match=r"DATASETS.TRAIN \('unannotated_train',\): none of its 2 images"):
        training_dataset_dicts(yacs)


def test_the_refusals_of_a_config_file_or_option_are_config_errors(tmp_path):
    """What train_net.py reports in one line: every refusal of a config file or option is a ConfigError naming it."""
    broken = tmp_path / "broken.py"
    broken.write_text("model = (\n")
    yaml_config = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.yaml")
    cases = [
        (lambda: load_lazy_config(QUICKSTART, ["train.max_iter"]), r"rtdetr_shapes.py: an override is not key=value"),
        (lambda: load_lazy_config(QUICKSTART, ["model.no_such_key=1"]), r"model.no_such_key=\.\.\. names a key"),
        (lambda: load_lazy_config(str(tmp_path / "missing.py")), r"missing.py: .*No such file"),
        (lambda: load_lazy_config(str(broken)), r"broken.py: a syntax error \(.*line 1\)"),
        (lambda: setup_cfg(yaml_config, ["MODEL.NO_SUCH_KEY", "1"]), r"command-line options: .*MODEL.NO_SUCH_KEY"),
        (lambda: setup_cfg(yaml_config, ["SOLVER.MAX_ITER", "many"]), r"command-line options: .*SOLVER.MAX_ITER"),
        (lambda: setup_cfg(str(tmp_path / "missing.yaml")), r"missing.yaml"),
    ]
    for load, message in cases:
        with pytest.raises(ConfigError, match=message):
            load()


def test_train_net_reports_a_refused_config_in_one_line_with_exit_status_2(shapes_files, tmp_path):
    train, val = (shapes_paths(str(shapes_files), split) for split in ("train", "val"))
    command = [sys.executable, str(REPO_ROOT / "train_net.py"), "--config-file", QUICKSTART]
    command += ["--dataset", "refused_train", *train, "--dataset", "refused_val", *val]
    command += ["dataloader.train.dataset.names=refused_train", "dataloader.test.dataset.names=refused_val"]
    command += [f"train.output_dir={tmp_path}", "model.pixel_std=[0.0,255.0,255.0]"]
    result = subprocess.run(command, env=environment(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("train_net.py: ")]
    assert "HuggingFaceDETR(pixel_std=[0.0, 255.0, 255.0]): must be 3 finite numbers > 0" in line


def test_demo_reports_a_refused_model_argument_with_exit_status_2(tmp_path):
    from PIL import Image

    Image.new("RGB", (48, 64)).save(tmp_path / "image.png")
    arguments = ["--config-file", QUICKSTART, "--input", str(tmp_path / "image.png"), "--output", str(tmp_path / "out")]
    assert demo_module.main([*arguments, "--opts", "model.pixel_std=[0.0,255.0,255.0]"]) == 2
    assert not (tmp_path / "out").exists()
