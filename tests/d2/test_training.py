"""The trainer end to end on a small synthetic dataset: self-balance through checkpoints and
distributed workers, --eval-only, DefaultPredictor; the Rank & Sort detectors from their configs.
Tiny models, a few iterations, CPU."""

import itertools
import json
import os
import shutil

import numpy as np
import pytest
import torch
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.engine import DefaultPredictor, default_argument_parser, launch
from detectron2.structures import Instances

import train_net
from alrp_d2.config import setup_cfg
from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths
from alrp_d2.engine import AlrpTrainer, SelfBalanceHook, find_ranking_losses, self_balance_period

from .tiny_configs import tiny_faster_rcnn_cfg, tiny_rank_sort_cfg, tiny_retinanet_cfg

SMALL = {"train": 16, "val": 8}
TRAIN, VAL = "test_shapes_train", "test_shapes_val"
SB_NAMES = {"retinanet": ["retinanet"], "faster_rcnn": ["box", "rpn"]}
# The Rank & Sort detectors: their config and the heads of their ranking losses.
RANK_SORT = {
    "rs_faster_rcnn": ("rs_faster_rcnn_R50_FPN_1x.yaml", ["box", "rpn"]),
    "rs_mask_rcnn": ("quickstart/rs_mask_rcnn_shapes.yaml", ["box", "rpn"]),
    "rs_atss": ("rs_atss_R50_FPN_1x.yaml", ["atss"]),
}


def register_small_shapes(root: str) -> None:
    prepare_shapes_dataset(root, num_images=SMALL)
    for name, split in ((TRAIN, "train"), (VAL, "val")):
        if name not in DatasetCatalog:
            register_coco_instances(name, {}, *shapes_paths(root, split))


@pytest.fixture(scope="module")
def shapes_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("datasets"))
    register_small_shapes(root)
    return root


def training_cfg(kind: str, output_dir: str):
    if kind == "retinanet":
        cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    elif kind == "faster_rcnn":
        cfg = tiny_faster_rcnn_cfg("quickstart/alrp_faster_rcnn_shapes.yaml")
    else:
        cfg = tiny_rank_sort_cfg(RANK_SORT[kind][0])
        cfg.INPUT.MIN_SIZE_TRAIN, cfg.INPUT.MAX_SIZE_TRAIN = (128,), 128
        cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = 128, 128
        cfg.INPUT.MASK_FORMAT = "bitmask"  # the shapes dataset's RLE masks
        cfg.MODEL.RETINANET.SCORE_THRESH_TEST = 0.0  # a random RS-ATSS scores about the prior, 0.01
    cfg.MODEL.RETINANET.NUM_CLASSES = cfg.MODEL.ROI_HEADS.NUM_CLASSES = 5
    cfg.MODEL.RETINANET.NORM = cfg.MODEL.FPN.NORM = ""  # GroupNorm(32) needs more than 16 channels
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (TRAIN,), (VAL,)
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.SOLVER.IMS_PER_BATCH = 2
    cfg.SOLVER.BASE_LR = 0.002
    cfg.SOLVER.WARMUP_ITERS = 0
    cfg.SOLVER.MAX_ITER = 6
    cfg.SOLVER.STEPS = ()
    cfg.SOLVER.CHECKPOINT_PERIOD = 3
    cfg.MODEL.ALRP.SB_PERIOD = 2
    cfg.SEED = 7
    cfg.OUTPUT_DIR = output_dir
    return cfg


def self_balance_hook(trainer) -> SelfBalanceHook:
    (hook,) = [h for h in trainer._hooks if isinstance(h, SelfBalanceHook)]
    return hook


def loc_weights(trainer):
    return {name: loss.loc_weight.item() for name, loss in find_ranking_losses(trainer.model).items()}


def fixed_batch_trainer(batch):
    """AlrpTrainer fed the same batch every iteration, so that two runs are comparable step by step."""

    class FixedBatchTrainer(AlrpTrainer):
        @classmethod
        def build_train_loader(cls, cfg):
            return itertools.repeat(batch)

    return FixedBatchTrainer


def first_batch(cfg):
    return next(iter(AlrpTrainer.build_train_loader(cfg)))


@pytest.mark.parametrize("kind", ["retinanet", "faster_rcnn"])
def test_resume_restores_and_reproduces_self_balance(kind, shapes_root, tmp_path):
    uninterrupted_dir, resumed_dir = str(tmp_path / "a"), str(tmp_path / "b")
    cfg = training_cfg(kind, uninterrupted_dir)
    trainer_class = fixed_batch_trainer(first_batch(cfg))

    torch.manual_seed(0)
    uninterrupted = trainer_class(cfg)
    uninterrupted.resume_or_load(resume=False)
    uninterrupted.train()
    final_state = self_balance_hook(uninterrupted).state_dict()
    final_weights = loc_weights(uninterrupted)
    assert sorted(final_state["sums"]) == sorted(final_weights) == SB_NAMES[kind]
    assert all(weight != 50.0 for weight in final_weights.values())

    # Resume a second run from the checkpoint written after iteration 2 (mid-period: period 2
    # closes after iterations 1, 3, 5, so the checkpoint holds the partial sums of iteration 2).
    os.makedirs(resumed_dir)
    shutil.copy(os.path.join(uninterrupted_dir, "model_0000002.pth"), resumed_dir)
    with open(os.path.join(resumed_dir, "last_checkpoint"), "w") as f:
        f.write("model_0000002.pth")
    saved = torch.load(os.path.join(resumed_dir, "model_0000002.pth"), weights_only=False)["trainer"]
    saved_state = saved["hooks"]["SelfBalanceHook"]
    assert all(sums[1] > 0 for sums in saved_state["sums"].values())

    resumed = trainer_class(training_cfg(kind, resumed_dir))
    resumed.resume_or_load(resume=True)
    assert resumed.start_iter == 3
    assert self_balance_hook(resumed).state_dict() == saved_state
    resumed.train()
    # The same kernels in the same order in one process: bit for bit.
    assert loc_weights(resumed) == final_weights
    for name, sums in self_balance_hook(resumed).state_dict()["sums"].items():
        assert sums == final_state["sums"][name]

    with open(os.path.join(uninterrupted_dir, "metrics.json")) as f:
        logged = [json.loads(line) for line in f]
    assert any(f"sb/{SB_NAMES[kind][0]}/weight" in entry for entry in logged)


def test_self_balance_period_defaults_to_one_epoch(shapes_root, tmp_path):
    cfg = training_cfg("retinanet", str(tmp_path))
    cfg.MODEL.ALRP.SB_PERIOD = 0
    assert self_balance_period(cfg) == SMALL["train"] // cfg.SOLVER.IMS_PER_BATCH


def _gloo_worker(config_file: str, shapes_root: str, report_dir: str) -> None:
    from detectron2.utils import comm

    register_small_shapes(shapes_root)
    cfg = setup_cfg(config_file)
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()
    with open(os.path.join(report_dir, f"rank{comm.get_rank()}.json"), "w") as f:
        json.dump({"hook": self_balance_hook(trainer).state_dict(), "weights": loc_weights(trainer)}, f)


def test_two_gloo_workers_agree_on_the_self_balance_weight(shapes_root, tmp_path):
    cfg = training_cfg("retinanet", str(tmp_path / "output"))
    cfg.SOLVER.MAX_ITER = 4
    cfg.SOLVER.IMS_PER_BATCH = 4  # two images per worker
    config_file = tmp_path / "config.yaml"
    config_file.write_text(cfg.dump())
    launch(_gloo_worker, 2, dist_url="auto", args=(str(config_file), shapes_root, str(tmp_path)))
    states = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert states[0] == states[1]
    assert states[0]["weights"]["retinanet"] != 50.0


@pytest.mark.parametrize("kind", list(RANK_SORT))
def test_rank_sort_detectors_train_and_log_their_components(kind, shapes_root, tmp_path):
    cfg = training_cfg(kind, str(tmp_path))
    cfg.SOLVER.MAX_ITER, cfg.SOLVER.LOG_PERIOD = 2, 1
    cfg.DATASETS.TEST = ()
    trainer = AlrpTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()
    with open(tmp_path / "metrics.json") as f:
        logged = [json.loads(line) for line in f]
    assert [entry["iteration"] for entry in logged] == [0, 1]
    heads = RANK_SORT[kind][1]
    components = {head: ["cls", "loc", "rank", "sort", "weight"] for head in heads}
    if kind == "rs_mask_rcnn":
        components["box"] += ["mask", "mask_weight"]  # the box head's RS Loss balances the mask loss
    for entry in logged:
        assert np.isfinite(entry["total_loss"])
        for head in heads:
            assert all(np.isfinite(entry[f"sb/{head}/{name}"]) for name in components[head]), entry
    assert all(not loss.self_balanced for loss in find_ranking_losses(trainer.model).values())


@pytest.mark.parametrize("kind", ["retinanet", "faster_rcnn", *RANK_SORT])
def test_eval_only_reports_ap_and_lrp(kind, shapes_root, tmp_path):
    cfg = training_cfg(kind, str(tmp_path))
    cfg.MODEL.WEIGHTS = str(tmp_path / "random_init.pth")  # --eval-only needs weights
    torch.save({"model": AlrpTrainer.build_model(cfg).state_dict()}, cfg.MODEL.WEIGHTS)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(cfg.dump())
    args = default_argument_parser().parse_args(["--config-file", str(config_file), "--eval-only"])
    all_results = train_net.main(args)
    assert set(all_results) == ({"bbox", "segm"} if cfg.MODEL.MASK_ON else {"bbox"})
    for results in all_results.values():
        for key in ("AP", "AP50", "AP75", "oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "AP90", "rho", "oLRP-circle"):
            assert key in results
        assert 0 <= results["oLRP"] <= 100
    with open(tmp_path / "inference" / "lrp_optimal_thresholds.json") as f:
        names = {entry["name"] for entry in json.load(f)["thresholds"].values()}
    assert names == {"circle", "square", "triangle", "ring", "cross"}


@pytest.mark.parametrize("kind", ["retinanet", "faster_rcnn", *RANK_SORT])
def test_default_predictor_returns_instances(kind, tmp_path):
    predictor = DefaultPredictor(training_cfg(kind, str(tmp_path)))
    image = np.random.default_rng(0).integers(0, 255, (96, 160, 3), dtype=np.uint8)
    result = predictor(image)["instances"]
    assert isinstance(result, Instances)
    assert result.image_size == (96, 160)
    assert len(result) <= 100 and torch.all((result.scores >= 0) & (result.scores <= 1))
    if kind == "rs_mask_rcnn":
        assert result.pred_masks.shape == (len(result), 96, 160)
