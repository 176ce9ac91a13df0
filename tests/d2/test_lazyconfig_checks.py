"""LazyConfig runs have the YAML path's start-up checks: an override of a key the config does not have is refused
naming the nearest keys, a value of another kind naming the key, the constructors of the losses check their arguments
naming them, checkpoints record the classes and ``--eval-only`` compares them with the test set's, and a mask model's
datasets need segmentations. The losses' config keys are numbers in ranges that train (None, 1e-320, 0.999999999,
1e300 name the key), and a criterion's output is checked, naming its class."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, List

import pytest
import torch
from detectron2.config import instantiate
from detectron2.data import get_detection_dataset_dicts
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from alrp_d2.config import setup_cfg
from alrp_d2.config.lazy_fields import lazy_calls
from alrp_d2.criteria import AlrpCriterion, CriterionOutput
from alrp_d2.criteria.output_check import CriterionOutputError
from alrp_d2.data.coco_json_check import CocoJsonError
from alrp_d2.data.dataset_classes import ClassesMismatchError
from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths
from alrp_d2.engine import find_ranking_losses
from alrp_d2.engine.lazy_overrides import UnknownConfigKeyError
from alrp_d2.engine.lazy_run import load_lazy_config, prepare_lazy_datasets, run_lazy_config

from .lazy_configs import load_lazy, tiny_lazy
from .lazy_runs import REPO_ROOT, run_machines
from .tiny_configs import tiny_batch, tiny_retinanet_cfg

QUICKSTART = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.py")


@pytest.fixture(scope="module")
def shapes_files(tmp_path_factory) -> Path:
    """A small shapes set: 2 training images, 1 validation image."""
    root = tmp_path_factory.mktemp("datasets")
    prepare_shapes_dataset(str(root), num_images={"train": 2, "val": 1})
    return root


def dataset_argument(name: str, json_file: Path, image_root: str) -> List[str]:
    return [name, str(json_file), image_root]


def edited_json(shapes_files: Path, split: str, target: Path, edit) -> List[str]:
    """``--dataset`` spec of the shapes split's annotations after ``edit(content)``, written to ``target``."""
    json_file, image_root = shapes_paths(str(shapes_files), split)
    content = json.loads(Path(json_file).read_text())
    edit(content)
    target.write_text(json.dumps(content))
    return dataset_argument(target.stem, target, image_root)


# ---- overrides -------------------------------------------------------------------------------------


def test_a_mistyped_key_is_refused_naming_the_nearest_key():
    with pytest.raises(UnknownConfigKeyError, match=r"override train\.max_itr=.*did you mean train\.max_iter"):
        load_lazy_config(QUICKSTART, ["train.max_itr=3"])
    with pytest.raises(UnknownConfigKeyError, match=r"did you mean model\.ranking_loss\.loss_weight"):
        load_lazy_config(QUICKSTART, ["model.ranking_loss.los_weight=0.5"])
    with pytest.raises(UnknownConfigKeyError, match=r"did you mean model\.num_classes"):  # AlrpRetinaNet(**kwargs)
        load_lazy_config(QUICKSTART, ["model.num_clases=3"])
    # an argument of a LazyCall that the config does not set, and +key (added on purpose), are accepted
    cfg = load_lazy_config(QUICKSTART, ["model.ranking_loss.loss_weight=0.5", "+train.note=1"])
    assert cfg.model.ranking_loss.loss_weight == 0.5 and cfg.train.note == 1


@pytest.mark.parametrize(
    "override, message",
    [
        ("optimizer.lr=abc", r"optimizer\.lr='abc': must be a number, as its value 0\.04 is"),
        ("train.seed=abc", r"train\.seed='abc': must be a number, as its value 42 is"),
        ("model.ranking_loss.criterion.delta=null", r"criterion\.delta=None: must be a number, as its value 1\.0 is"),
        ("train.amp.enabled=yes", r"train\.amp\.enabled='yes': must be True or False"),
        ("model.ranking_loss.loss_weight=abc", r"loss_weight='abc': must be a number, as its value 1\.0 is"),
    ],
)
def test_a_value_of_another_kind_is_refused_at_load_naming_the_key(override, message):
    with pytest.raises(ValueError, match=message):
        load_lazy_config(QUICKSTART, [override])


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.ranking_loss.loc_weight=-1.0", r"HeadRankingLoss\['retinanet'\]\(loc_weight=-1\.0\): must be a number"),
        ("model.ranking_loss.loss_weight=-0.5", r"HeadRankingLoss\['retinanet'\]\(loss_weight=-0\.5\): must be a"),
        ("model.ranking_loss.loc_weight=1e300", r"HeadRankingLoss\[.*\]\(loc_weight=1e\+300\): .* in \[1e-06, 10000\]"),
        ("model.ranking_loss.criterion.delta=1e-320", r"AlrpCriterion\(delta=1e-320\): must be a number >= 1e-06"),
        ("model.ranking_loss.criterion.tau=0.999999999", r"AlrpCriterion\(tau=0\.999999999\): must be a number in"),
    ],
)
def test_the_loss_constructors_refuse_their_arguments_naming_them(override, message):
    cfg = load_lazy_config(QUICKSTART, [override])
    with pytest.raises(ValueError, match=r"Invalid argument " + message):
        instantiate(cfg.model.ranking_loss)


# ---- the YAML keys of the losses -------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "TAU",
        "SB_INIT_WEIGHT",
        "LOC_WEIGHT",
        "CORR_WEIGHT",
        "RPN_WEIGHT",
        "RPN_TAU",
        "RPN_LOW_QUALITY_MIN_IOU",
        "RPN_PRIOR_PROB",
    ],
)
def test_none_for_a_float_key_names_the_key(key):
    with pytest.raises(ValueError, match=rf"Invalid config value MODEL\.ALRP\.{key}=None: must be a number"):
        setup_cfg(None, [f"MODEL.ALRP.{key}", "None"])


@pytest.mark.parametrize(
    "key, value, rule",
    [
        ("DELTA", 1e-320, r"must be a number >= 1e-06 \(argument delta=1e-320 of AlrpCriterion\)"),
        ("TAU", 0.999999999, r"must be a number in \[0, 0\.99\]"),
        ("SB_INIT_WEIGHT", 1e300, r"must be a number in \[1e-06, 10000\]"),
        ("LOC_WEIGHT", 1e-300, r"must be a number in \[1e-06, 10000\]"),
    ],
)
def test_values_that_cannot_train_name_the_key(key, value, rule):
    """The localisation weight read is SB_INIT_WEIGHT with self-balance, LOC_WEIGHT without."""
    self_balance = {"SB_ENABLED": key != "LOC_WEIGHT"}
    with pytest.raises(ValueError, match=rf"MODEL\.ALRP\.{key}={value!r}: {rule}".replace("+", r"\+")):
        build_model(tiny_retinanet_cfg(**{key: value, **self_balance}))


# ---- the criterion's output ------------------------------------------------------------------------


def _vector(output: CriterionOutput) -> Any:
    return output._replace(loss_cls=output.loss_cls.expand(3))


CRITERION_OUTPUTS = {
    "vector": (_vector, r"returned loss_cls as a tensor of shape \(3,\)"),
    "tuple": (tuple, r"returned a tuple, not a CriterionOutput whose loss_cls"),
    "statistics": (lambda output: output._replace(statistics=None), r"returned statistics as a NoneType"),
    "float": (lambda output: output._replace(loss_loc=output.loss_loc.item()), r"returned loss_loc as a float"),
    "detached": (lambda output: output._replace(loss_cls=output.loss_cls.detach()), r"returned loss_cls without a"),
}


@pytest.mark.parametrize("case", list(CRITERION_OUTPUTS))
def test_a_criterion_output_that_cannot_train_names_the_criterion(case):
    edit, message = CRITERION_OUTPUTS[case]

    class EditedCriterion(AlrpCriterion):
        def __call__(self, sets: Any, group: Any) -> Any:
            return [edit(output) for output in super().__call__(sets, group)]

    torch.manual_seed(0)
    model = build_model(tiny_retinanet_cfg()).train()
    (loss,) = find_ranking_losses(model).values()
    loss.criterion = EditedCriterion(delta=1.0, loc_error_kind="giou", tau=0.5)
    with EventStorage(), pytest.raises(CriterionOutputError, match=rf"EditedCriterion {message}"):
        model(tiny_batch())


# ---- datasets, classes and checkpoints -------------------------------------------------------------


def test_a_mask_model_on_a_dataset_without_masks_names_the_dataset_and_the_annotation(shapes_files, tmp_path):
    def drop_segmentations(content):
        for annotation in content["annotations"]:
            annotation.pop("segmentation", None)

    spec = edited_json(shapes_files, "train", tmp_path / "nomasks_train.json", drop_segmentations)
    cfg = tiny_lazy(load_lazy("COCO-InstanceSegmentation/rs_mask_rcnn_R_50_FPN_1x.py"))
    cfg.model.roi_heads.num_classes = 5
    for call in lazy_calls(cfg.dataloader, get_detection_dataset_dicts):
        call.names = "nomasks_train"
    args = argparse.Namespace(dataset=[spec], eval_only=False)
    message = r"nomasks_train\.json has 8 problem.*\n  annotation id 1 \(image id 1\): no segmentation \(a mask model "
    message += r"\(MODEL\.MASK_ON, a LazyConfig's model\.roi_heads\.mask_head\) needs a mask for every annotation"
    with pytest.raises(CocoJsonError, match=message):
        prepare_lazy_datasets(cfg, args)


def test_checkpoints_record_the_classes_and_eval_only_refuses_a_permuted_test_set(shapes_files, tmp_path):
    json_file, image_root = shapes_paths(str(shapes_files), "train")
    val_json, val_root = shapes_paths(str(shapes_files), "val")

    def swap_two_classes(content):
        first, second = content["categories"][:2]
        first["name"], second["name"] = second["name"], first["name"]

    permuted = edited_json(shapes_files, "val", tmp_path / "classes_permuted_val.json", swap_two_classes)
    datasets = [["classes_train", json_file, image_root], ["classes_val", val_json, val_root], permuted]
    output = tmp_path / "run"
    common = [f"train.output_dir={output}", "dataloader.train.dataset.names=classes_train", "dataloader.evaluator=null"]
    train = common + ["train.max_iter=1", "dataloader.train.total_batch_size=1", "dataloader.train.num_workers=0"]
    train += ["dataloader.test.dataset.names=classes_val"]
    args = argparse.Namespace(dataset=datasets, eval_only=False, resume=False)
    run_lazy_config(args, load_lazy_config(QUICKSTART, train))

    record = torch.load(output / "model_final.pth", map_location="cpu", weights_only=True)["classes"]
    names = [category["name"] for category in json.loads(Path(json_file).read_text())["categories"]]
    assert record["dataset"] == "classes_train" and record["names"] == names

    evaluation = common + [f"train.init_checkpoint={output / 'model_final.pth'}"]
    evaluation += ["dataloader.test.dataset.names=classes_permuted_val"]
    args = argparse.Namespace(dataset=datasets, eval_only=True, resume=False)
    with pytest.raises(ClassesMismatchError, match=r"model_final\.pth was made for other classes than dataset"):
        run_lazy_config(args, load_lazy_config(QUICKSTART, evaluation))


# ---- machines ----------------------------------------------------------------------------------------


def test_machines_with_different_overrides_stop_at_start_up_naming_the_keys(shapes_files, tmp_path):
    """Two loopback machines (one gloo worker each) started with different learning rates: without the check they
    train silently, each with its own rate."""
    json_file, image_root = shapes_paths(str(shapes_files), "train")
    arguments = ["--config-file", QUICKSTART, "--dataset", "machines_train", json_file, image_root]
    arguments += ["--dist-timeout", "60", f"train.output_dir={tmp_path}", "train.max_iter=1"]
    arguments += ["dataloader.evaluator=null", "dataloader.train.total_batch_size=2", "dataloader.train.num_workers=0"]
    arguments += ["dataloader.train.dataset.names=machines_train", "dataloader.test.dataset.names=machines_train"]
    results = run_machines([arguments + ["optimizer.lr=0.01"], arguments + ["optimizer.lr=0.02"]], timeout_s=600)
    for status, output in results:
        assert status != 0, output[-3000:]
        assert "MachinesDisagreeError: the processes of this distributed run were started with different" in output
        assert "1 key(s) differ:\n  optimizer.lr: 0.01 on ranks [0]; 0.02 on ranks [1]" in output, output[-3000:]
