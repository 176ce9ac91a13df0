"""tools/convert_official_checkpoint.py: the official aLRP Loss checkpoints (mmdetection 2.1) in this project's
models.

- Key sets: every one of the 14 published models (state-dict names and shapes of the official models built from
  their configs, tests/fixtures/official/keysets) is identified from its checkpoint's config text and converted
  into a state dict that loads strictly into the model of the mapped project config (built on the meta device).
- Numbers: tests/d2/test_official_equivalence.py converts the reduced-width official networks of
  tests/fixtures/official and compares every stage of the detectors with the official code.
- The command line converts a checkpoint file into one that detectron2's checkpointer loads, and stops naming the
  keys it cannot map.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Dict, List, Tuple

import numpy as np
import pytest
import torch
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.data.datasets.builtin_meta import COCO_CATEGORIES
from detectron2.modeling import META_ARCH_REGISTRY, build_model
from torch import Tensor

from alrp_d2.checkpoint import AlrpCheckpointer

from .official_fixtures import KEYSET_DIR, REPO_ROOT, load_converter, load_keyset, network, variant_project_cfg

converter = load_converter()

KEYSETS = sorted(KEYSET_DIR.glob("*.json.gz"))


def test_fourteen_key_sets():
    assert len(KEYSETS) == 14 == len(converter.OFFICIAL_MODELS)
    assert {k.name.replace(".json.gz", ".py") for k in KEYSETS} == {m.config for m in converter.OFFICIAL_MODELS}


def loc_weights(converted: Dict[str, Tensor]) -> List[str]:
    """The ranking losses' localisation weights, which the converter adds (the official checkpoints have none)."""
    return [key for key in converted if key.endswith("ranking_loss.loc_weight")]


@pytest.mark.parametrize("keyset", KEYSETS, ids=lambda p: p.name.split(".")[0])
def test_published_model_is_identified_from_its_config_text(keyset):
    record = load_keyset(keyset)
    parsed = converter.parse_config_text(record["meta_config"])
    assert converter.identify_official_model(parsed).config == record["official_config"]


@pytest.mark.parametrize("keyset", KEYSETS, ids=lambda p: p.name.split(".")[0])
def test_published_model_converts_and_loads_strictly(keyset):
    """The official key set as meta tensors (names and shapes only) through the converter, then a strict load into
    the project model on the meta device."""
    record = load_keyset(keyset)
    official = {k: torch.empty(shape, device="meta") for k, shape in record["state_dict_shapes"].items()}
    project_config, model_info = converter.resolve_project_config({"config": record["meta_config"]}, None)
    cfg = converter.setup_cfg(project_config)
    converted = converter.convert_state_dict(official, cfg)
    with torch.device("meta"):
        model = META_ARCH_REGISTRY.get(cfg.MODEL.META_ARCHITECTURE)(cfg)
    model.load_state_dict(converted, strict=True, assign=True)
    assert model_info.config == record["official_config"]
    assert len(converted) - len(loc_weights(converted)) == len(official)
    alrp = cfg.MODEL.ALRP
    initial = alrp.SB_INIT_WEIGHT if alrp.SB_ENABLED else alrp.LOC_WEIGHT
    assert all(converted[key].item() == initial for key in loc_weights(converted))


def test_retinanet_anchor_order_is_permuted():
    """Three ratios x two sizes: detectron2's anchor a = size * 3 + ratio is mmdetection's ratio * 2 + size."""
    assert converter.anchor_permutation(2, 3).tolist() == [0, 2, 4, 1, 3, 5]
    assert converter.anchor_permutation(3, 1).tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------------
# The command line and its errors.
# ---------------------------------------------------------------------------------------------------------------


def write_reduced_project_config(tmp_path, fixture) -> str:
    """A project .yaml with the widths of the reduced retinanet_iou network, for --config."""
    reduction = fixture["meta"]["reduction"]
    path = tmp_path / "reduced.yaml"
    path.write_text(
        f'_BASE_: "{REPO_ROOT / "configs" / "alrp_R50_500.yaml"}"\n'
        "MODEL:\n"
        '  WEIGHTS: ""\n'
        "  RESNETS:\n"
        f"    STEM_OUT_CHANNELS: {reduction['stem_channels']}\n"
        f"    RES2_OUT_CHANNELS: {reduction['base_channels'] * 4}\n"
        f"    WIDTH_PER_GROUP: {reduction['base_channels']}\n"
        "  FPN:\n"
        f"    OUT_CHANNELS: {reduction['fpn_channels']}\n"
        "  RETINANET:\n"
        f"    NUM_CONVS: {reduction['stacked_convs']}\n"
    )
    return str(path)


def test_command_line_writes_a_checkpoint_detectron2_loads(tmp_path, capsys):
    """The tool's main in this process (test_convert_then_eval_only_on_an_80_class_coco_set runs it as a command)."""
    fixture = network("retinanet_iou")
    official_path = tmp_path / "official.pth"
    meta = fixture["variants"]["alrp"]["checkpoint_meta"]
    torch.save({"state_dict": fixture["official_state_dict"], "meta": meta}, official_path)
    output = tmp_path / "converted.pth"
    config = write_reduced_project_config(tmp_path, fixture)

    # From its config text the tool takes the reduced network for the published one, whose widths differ: it
    # stops, naming the shapes, and asks for --config.
    with pytest.raises(SystemExit) as refused:
        converter.main([str(official_path), str(output)])
    message = str(refused.value)
    assert not output.exists() and "alrp_loss_retinanet_r50_fpn_100e_coco500.py" in message
    assert "head.cls_score.weight: (480, 8, 3, 3) converted, (480, 256, 3, 3) in the model" in message
    assert "pass --config" in message

    capsys.readouterr()
    converter.main([str(official_path), str(output), "--config", config])
    assert "--eval-only MODEL.WEIGHTS" in capsys.readouterr().out

    cfg = converter.setup_cfg(config)
    cfg.MODEL.DEVICE = "cpu"
    model = build_model(cfg)
    checkpoint = torch.load(output, weights_only=True)
    incompatible = DetectionCheckpointer(model)._load_model(checkpoint)  # what load() reports only in its log
    assert not incompatible.missing_keys and not incompatible.unexpected_keys and not incompatible.incorrect_shapes
    AlrpCheckpointer(model).load(str(output))  # the loader of train_net.py --eval-only and AlrpPredictor
    official_cls = fixture["official_state_dict"]["bbox_head.retina_cls.weight"]
    ours_cls = model.head.cls_score.weight.detach()
    # Our anchor 1 (size 32, ratio 1) is official anchor 2 (ratio 1, scale 1) of 80 classes each.
    assert torch.equal(ours_cls[80:160], official_cls[160:240])


def test_unmapped_official_keys_are_named():
    fixture = network("foveabox")
    official = dict(fixture["official_state_dict"])
    official["bbox_head.feature_adaption.conv_offset.weight"] = torch.zeros(72, 4, 1, 1)
    cfg = variant_project_cfg(fixture, "alrp")
    with pytest.raises(converter.ConversionError, match="feature_adaption.conv_offset.weight"):
        converter.convert_state_dict(official, cfg)


def test_unfilled_project_keys_are_named():
    fixture = network("foveabox")
    official = {k: v for k, v in fixture["official_state_dict"].items() if k != "bbox_head.fovea_cls.bias"}
    with pytest.raises(converter.ConversionError, match="head.cls_score.bias"):
        converter.convert_state_dict(official, variant_project_cfg(fixture, "alrp"))


def test_checkpoint_without_config_needs_one(tmp_path):
    path = tmp_path / "bare.pth"
    torch.save({"state_dict": {"backbone.conv1.weight": torch.zeros(1)}, "meta": {}}, path)
    with pytest.raises(converter.ConversionError, match="pass --config"):
        converter.convert_checkpoint(str(path), str(tmp_path / "out.pth"))


@pytest.mark.parametrize(
    "text, message",
    [
        ("x = range(1000000000)", r"range\(1000000000\) brings the numbers of the text's ranges to 1000000000 "),
        # many small ranges share one budget (76,921 ranges of 13 in 1 MB of text would build ~27 GB)
        (
            "x = [" + "range(13), " * 800 + "]",
            r"range\(13\) brings the numbers of the text's ranges to 10010 \(at most ",
        ),
        ("x = range(1.5)", r"range\(\) takes 1 to 3 integers"),
        ("x = [" * 200_000 + "]" * 200_000, r"not an mmdetection config text"),
        ("x = 1\n" + "#" * 1_000_001, r"has 1000007 characters: not an mmdetection config text"),
        ("x = 'a' * 10**9", r"cannot read the value of x: 'a' \* 10 \*\* 9 is not a literal"),
        ("model = dict(type=", r"not an mmdetection config text"),
    ],
)
def test_a_crafted_config_text_is_refused_naming_the_file(tmp_path, text, message):
    """The checkpoint's config makes the converter build nothing larger than its text."""
    path = tmp_path / "crafted.pth"
    torch.save({"state_dict": {"backbone.conv1.weight": torch.zeros(1)}, "meta": {"config": text}}, path)
    with pytest.raises(converter.ConversionError, match=rf"^{path}: (.|\n)*{message}"):
        converter.convert_checkpoint(str(path), str(tmp_path / "out.pth"))


@pytest.mark.parametrize(
    "content, message",
    [
        ({"state_dict": [1, 2], "meta": {}}, "its state_dict is not a mapping of parameter names to tensors"),
        ({"state_dict": {"a": 1}, "meta": {}}, "its state_dict is not a mapping of parameter names to tensors"),
        ({"state_dict": {"a": torch.zeros(1)}, "meta": [1]}, "its meta is a list, not a dict"),
        ([torch.zeros(1)], "has no state_dict: not an mmdetection checkpoint"),
        ({}, "has no state_dict: not an mmdetection checkpoint"),
    ],
)
def test_a_malformed_checkpoint_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "malformed.pth"
    torch.save(content, path)
    with pytest.raises(converter.ConversionError, match=rf"^{path}:? {message}"):
        converter.convert_checkpoint(str(path), str(tmp_path / "out.pth"))


def test_config_option_names_the_official_config_or_a_project_config(tmp_path):
    path, model = converter.resolve_project_config({}, "alrp_loss_retinanet_r50_fpn_ATSS_100e_coco500.py")
    assert path == str(REPO_ROOT / "configs" / "alrp_R50_ATSS_500.yaml") and model.config.startswith("alrp_loss")
    project = str(REPO_ROOT / "configs" / "alrp_R50_500.yaml")
    assert converter.resolve_project_config({"config": "model = dict(type='RetinaNet')"}, project) == (project, None)
    with pytest.raises(converter.ConversionError, match="not a published official config"):
        converter.resolve_project_config({}, "retinanet_r50_fpn_1x_coco.py")


# ---------------------------------------------------------------------------------------------------------------
# docs/reproducing.md "Evaluate the official models": convert, then train_net.py --eval-only.
# ---------------------------------------------------------------------------------------------------------------


def write_coco80_dataset(root) -> Tuple[str, str]:
    """Two 64 x 64 images with three boxes, annotated with the 80 COCO categories (their ids, with gaps)."""
    from PIL import Image

    (root / "images").mkdir()
    categories = [{"id": c["id"], "name": c["name"]} for c in COCO_CATEGORIES if c["isthing"]]
    rng = np.random.default_rng(0)
    images, annotations = [], []
    for image_id, boxes in ((1, [[6, 8, 30, 24], [40, 30, 20, 30]]), (2, [[10, 12, 44, 40]])):
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(root / "images" / f"{image_id}.png")
        images.append({"id": image_id, "file_name": f"{image_id}.png", "width": 64, "height": 64})
        for box in boxes:
            category = categories[(len(annotations) * 37) % len(categories)]["id"]
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": category, "bbox": box,
                 "area": box[2] * box[3], "iscrowd": 0}
            )  # fmt: skip
    json_file = root / "instances.json"
    json_file.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return str(json_file), str(root / "images")


def mmcv_checkpoint(fixture: Dict) -> Dict:
    """An official checkpoint as mmcv 0.6.2's save_checkpoint writes it at the end of a run of mmdetection 2.1's
    tools/train.py: the state dict, the meta (mmcv's and the run's, with the config text) and the optimizer."""
    meta = dict(fixture["variants"]["alrp"]["checkpoint_meta"])
    meta.update(
        mmcv_version="0.6.2",
        time="Sun Oct 11 10:00:00 2020",
        epoch=100,
        iter=366500,
        CLASSES=tuple(c["name"] for c in COCO_CATEGORIES if c["isthing"]),
    )
    state_dict = fixture["official_state_dict"]
    optimizer = {"state": {}, "param_groups": [{"lr": 8e-05, "momentum": 0.9, "params": list(range(len(state_dict)))}]}
    return {"meta": meta, "state_dict": state_dict, "optimizer": optimizer}


def test_convert_then_eval_only_on_an_80_class_coco_set(tmp_path):
    """docs/reproducing.md's two commands on an official-format checkpoint (random weights of the reduced aLRP
    RetinaNet) and a COCO-format set with the 80 COCO categories: train_net.py evaluates the converted weights."""
    fixture = network("retinanet_iou")
    official_path = tmp_path / "official.pth"
    torch.save(mmcv_checkpoint(fixture), official_path)
    converted = tmp_path / "converted.pth"
    config = write_reduced_project_config(tmp_path, fixture)
    tool = REPO_ROOT / "tools" / "convert_official_checkpoint.py"
    done = subprocess.run(
        [sys.executable, tool, official_path, converted, "--config", config], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "--eval-only MODEL.WEIGHTS" in done.stdout
    json_file, image_dir = write_coco80_dataset(tmp_path)
    output_dir = tmp_path / "eval"
    evaluated = subprocess.run(
        [sys.executable, REPO_ROOT / "train_net.py", "--config-file", config, "--dataset", "coco80", json_file,
         image_dir, "--eval-only", "MODEL.WEIGHTS", converted, "MODEL.DEVICE", "cpu", "DATASETS.TEST", '("coco80",)',
         "DATASETS.TRAIN", '("coco80",)', "INPUT.MIN_SIZE_TEST", "64", "INPUT.MAX_SIZE_TEST", "64",
         "OUTPUT_DIR", output_dir],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "Evaluation results for bbox" in evaluated.stdout + evaluated.stderr
    assert (output_dir / "inference" / "coco_instances_results.json").exists()
