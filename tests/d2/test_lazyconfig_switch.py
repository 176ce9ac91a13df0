"""docs/lazyconfig.md, "Switch a detectron2 model": detectron2's own COCO-Detection/retinanet_R_50_FPN_1x.py and
COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.py from the installed model zoo, switched to aLRP Loss, Correlation
Loss and Rank & Sort Loss by at most six config lines and no class of the user's, train two iterations with
train_net.py (at test scale: ResNet-18, the shapes dataset, 2 images per iteration)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from alrp_d2.data.shapes import prepare_shapes_dataset, shapes_paths

from .lazy_runs import logged, run_train_net

HEADER = """from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import alrp_loss, correlation, ranked_rcnn
from alrp_d2.modeling import AlrpRetinaNet, CorrelationRetinaNet

recipe = get_config("{config}")
model, dataloader, optimizer, lr_multiplier, train = (
    recipe.model, recipe.dataloader, recipe.optimizer, recipe.lr_multiplier, recipe.train
)
"""
# The switches of docs/lazyconfig.md.
SWITCHES = {
    "alrp_retinanet": (
        "COCO-Detection/retinanet_R_50_FPN_1x.py",
        'model._target_ = AlrpRetinaNet\nmodel.ranking_loss = alrp_loss("retinanet")\n',
        ["loss_retinanet_cls", "loss_retinanet_loc", "sb/retinanet/weight"],
    ),
    "corr_retinanet": (
        "COCO-Detection/retinanet_R_50_FPN_1x.py",
        "model._target_ = CorrelationRetinaNet\nmodel.correlation = correlation()\n",
        ["loss_cls", "loss_box_reg", "loss_retinanet_corr"],
    ),
    "rs_mask_rcnn": (
        "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.py",
        "ranked_rcnn(model)\n",
        ["loss_rpn_cls", "loss_box_cls", "loss_box_loc", "loss_mask", "sb/box/mask_weight"],
    ),
}
TEST_SCALE = """
model.backbone.bottom_up.stages.depth = 18
del model.backbone.bottom_up.stages.stride_in_1x1
if "top_block" in model.backbone and "in_channels" in model.backbone.top_block:
    model.backbone.top_block.in_channels = 512
(model.roi_heads if "roi_heads" in model else model).num_classes = 5
dataloader.train.dataset.names = dataloader.test.dataset.names = "switch_train"
dataloader.train.total_batch_size = 2
dataloader.train.num_workers = 0
dataloader.train.mapper.augmentations[0].short_edge_length = (128,)
dataloader.train.mapper.augmentations[0].max_size = 128
dataloader.train.mapper.instance_mask_format = "bitmask"  # the shapes dataset's masks are RLE
del dataloader.evaluator
train.update(max_iter=2, device="cpu", init_checkpoint="", log_period=1, seed=3)
"""


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
    config, switch, losses = SWITCHES[name]
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER.format(config=config) + switch + TEST_SCALE)
    output_dir = tmp_path / "output"
    run_train_net(["--config-file", str(path), *dataset, f"train.output_dir={output_dir}"])
    records = logged(output_dir)
    assert sorted(records) == [0, 1]
    for iteration in records.values():
        assert set(losses) <= set(iteration), sorted(iteration)
        assert all(value == value for value in iteration.values())  # no NaN
    assert (Path(output_dir) / "model_final.pth").is_file()
