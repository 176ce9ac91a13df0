"""demo.py: input expansion, drawing, LRP-threshold filtering and exit status (tiny model, CPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.image import imread

import demo as demo_module

from .tiny_configs import tiny_retinanet_cfg

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo():

    return demo_module


@pytest.fixture
def tiny_cfg(demo):
    """The quickstart RetinaNet made tiny; every anchor scored, at about PRIOR_PROB, so random
    init gives detections to draw."""

    cfg = tiny_retinanet_cfg("quickstart/alrp_retinanet_shapes.yaml")
    cfg.MODEL.RETINANET.NUM_CLASSES = 5
    cfg.MODEL.RETINANET.NORM = ""
    cfg.MODEL.RETINANET.SCORE_THRESH_TEST = 0.0
    cfg.MODEL.RETINANET.PRIOR_PROB = 0.3
    cfg.TEST.DETECTIONS_PER_IMAGE = 5
    cfg.DATASETS.TEST = ("shapes_val",)
    return cfg


@pytest.fixture
def inputs(tmp_path):
    """A directory of two images (and a text file, skipped), a non-image file and a missing path."""
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for name in ("b.jpg", "a.png"):
        Image.fromarray(rng.integers(0, 255, size=(64, 48, 3), dtype=np.uint8)).save(images / name)
    (images / "notes.txt").write_text("not an image")
    not_image = tmp_path / "not_an_image.png"
    not_image.write_text("not an image")
    return {"dir": str(images), "not_image": str(not_image), "missing": str(tmp_path / "missing.png")}


def write_thresholds(path: Path, value) -> str:
    path.write_text(json.dumps({name: value for name in ("circle", "square", "triangle", "ring", "cross")}))
    return str(path)


def test_expand_inputs(demo, inputs, tmp_path):
    pattern = os.path.join(inputs["dir"], "*.png")
    paths, failed = demo.expand_inputs([inputs["dir"], pattern, inputs["missing"], str(tmp_path / "*.bmp")])
    assert paths == [os.path.join(inputs["dir"], name) for name in ("a.png", "b.jpg")]
    assert failed == [
        (inputs["missing"], "no such file or directory"),
        (str(tmp_path / "*.bmp"), "the pattern matches no file"),
    ]


def test_demo_draws_every_image_and_reports_bad_inputs(demo, tiny_cfg, inputs, tmp_path):
    out = tmp_path / "out"
    written, failed = demo.run_demo(tiny_cfg, list(inputs.values()), str(out), confidence=0.0)
    assert written == [str(out / "a.png"), str(out / "b.jpg")]
    assert sorted(os.listdir(out)) == ["a.png", "b.jpg"]
    assert imread(written[0]).shape[:2] == (64, 48)
    assert [entry for entry, _ in failed] == [inputs["missing"], inputs["not_image"]]
    assert failed[0][1] == "no such file or directory"
    assert failed[1][1].startswith("not an image file")


def test_demo_filters_by_lrp_thresholds(demo, tiny_cfg, inputs, tmp_path):
    image = [os.path.join(inputs["dir"], "a.png")]
    runs = {
        "nothing": dict(confidence=1.01),
        "all_null": dict(thresholds_path=write_thresholds(tmp_path / "null.json", None)),
        "all_zero": dict(thresholds_path=write_thresholds(tmp_path / "zero.json", 0.0)),
    }
    drawn = {}
    for name, options in runs.items():
        written, failed = demo.run_demo(tiny_cfg, image, str(tmp_path / name), **options)
        assert len(written) == 1 and not failed
        drawn[name] = imread(written[0])
    np.testing.assert_array_equal(drawn["all_null"], drawn["nothing"])
    assert not np.array_equal(drawn["all_zero"], drawn["nothing"])


def test_demo_rejects_thresholds_of_other_classes(demo, tiny_cfg, inputs, tmp_path):
    thresholds = tmp_path / "other.json"
    thresholds.write_text(json.dumps({"cat": 0.5}))
    with pytest.raises(demo.ThresholdError, match="do not match"):
        demo.run_demo(tiny_cfg, [inputs["dir"]], str(tmp_path / "out"), thresholds_path=str(thresholds))
    assert not (tmp_path / "out").exists()


def test_demo_cli_exit_status(demo, inputs, tmp_path):
    config = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.yaml")
    arguments = ["--config-file", config, "--output", str(tmp_path / "out"), "--input", inputs["dir"]]
    assert demo.main(arguments + ["--lrp-thresholds", str(tmp_path / "absent.json")]) == 2
    assert not (tmp_path / "out").exists()
    assert demo.main(arguments + [inputs["missing"], "--opts", "MODEL.RETINANET.NUM_CONVS", "1"]) == 1
    assert sorted(os.listdir(tmp_path / "out")) == ["a.png", "b.jpg"]


def decompression_bomb_png(path: Path) -> str:
    """A 100-byte PNG header declaring 20000 x 20000 pixels, over twice PIL's MAX_IMAGE_PIXELS."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )
    return str(path)


def test_a_fifo_is_never_read_and_a_bad_image_never_aborts_the_run(demo, tiny_cfg, inputs, tmp_path):
    """A FIFO named *.png (reading it would block) and a decompression bomb are reported; the
    other images are drawn."""
    fifo = os.path.join(inputs["dir"], "c.png")
    os.mkfifo(fifo)
    bomb = decompression_bomb_png(Path(inputs["dir"]) / "bomb.png")
    paths, failed = demo.expand_inputs([inputs["dir"], fifo])
    assert fifo not in paths and failed == [(fifo, demo.NOT_REGULAR)] * 2
    out = tmp_path / "out"
    written, failed = demo.run_demo(tiny_cfg, [inputs["dir"]], str(out), confidence=0.0)
    assert written == [str(out / "a.png"), str(out / "b.jpg")]
    assert [entry for entry, _ in failed] == [fifo, bomb]
    assert failed[1][1].startswith("cannot read the image (DecompressionBombError: Image size (400000000 pixels)")


def test_a_box_found_for_several_classes_is_drawn_once_with_its_top_class():
    from detectron2.structures import Boxes, Instances

    boxes = [[0, 0, 10, 10], [0, 0, 10, 10], [5, 5, 20, 20], [0, 0, 10, 10]]
    detections = Instances((32, 32), pred_boxes=Boxes(torch.tensor(boxes, dtype=torch.float32)))
    detections.scores = torch.tensor([0.3, 0.9, 0.5, 0.2])
    detections.pred_classes = torch.tensor([0, 1, 2, 3])
    top = demo_module.top_class_per_box(detections)
    assert top.pred_classes.tolist() == [1, 2] and top.scores.tolist() == pytest.approx([0.9, 0.5])
    assert len(demo_module.top_class_per_box(detections[:0])) == 0


def test_labels_are_scaled_to_the_drawing():
    """On a 128 px image drawn at scale 1, detectron2's 10 px label would be 1/13 of the image: it is 6 px, and the
    drawing covers fewer pixels; a large image or a scaled-up drawing keeps detectron2's size."""
    from detectron2.data import MetadataCatalog
    from detectron2.structures import Boxes, Instances
    from detectron2.utils.visualizer import Visualizer

    assert demo_module.label_font_scale(128, 128, 1.0) == pytest.approx(0.6)  # 6 px instead of 10
    assert demo_module.label_font_scale(800, 1333, 1.0) == demo_module.label_font_scale(128, 128, 4.0) == 1.0
    image = np.full((128, 128, 3), 128, dtype=np.uint8)
    detections = Instances((128, 128), pred_boxes=Boxes(torch.tensor([[20.0, 30.0, 90.0, 100.0]])))
    detections.scores, detections.pred_classes = torch.tensor([0.87]), torch.tensor([0])
    metadata = MetadataCatalog.get("__docs_demo_labels__").set(thing_classes=["circle"])
    drawn = demo_module.draw_detections(image, detections, metadata)
    default = Visualizer(image[:, :, ::-1], metadata).draw_instance_predictions(detections).get_image()
    assert drawn.shape == default.shape == (128, 128, 3)
    changed, changed_by_default = ((d != image).any(axis=2).sum() for d in (drawn, default))
    assert 0 < changed < 0.8 * changed_by_default


def test_every_config_error_is_one_line_naming_the_file_and_the_key(demo, inputs, tmp_path):
    """demo.py exits 2 on a config it cannot use, LazyConfig or YAML, with one line naming the file and the key (or
    the line of a syntax error)."""
    lazy = str(REPO_ROOT / "configs" / "quickstart" / "rtdetr_shapes.py")
    yaml_config = str(REPO_ROOT / "configs" / "quickstart" / "alrp_retinanet_shapes.yaml")
    broken_yaml, broken_py = tmp_path / "broken.yaml", tmp_path / "broken.py"
    broken_yaml.write_text("MODEL: [\n")
    broken_py.write_text("model = (\n")
    cases = [
        (lazy, ["train.max_itr=3"], "train.max_itr"),
        (lazy, ["model.num_classes=3"], "model.num_classes"),
        (lazy, ["train.max_iter"], "train.max_iter"),
        (str(broken_py), [], "line 1"),
        (yaml_config, ["MODEL.NO_SUCH_KEY", "1"], "MODEL.NO_SUCH_KEY"),
        (yaml_config, ["MODEL.RETINANET.NUM_CLASSES", "3"], "MODEL.RETINANET.NUM_CLASSES"),
        (str(broken_yaml), [], "line 2"),
        (str(tmp_path / "missing.yaml"), [], "missing.yaml"),
    ]
    for path, options, key in cases:
        with pytest.raises(demo.CONFIG_ERRORS) as error:
            demo.check_test_classes(demo.load_config(path, options))
        line = demo.config_error_line(path, error.value)
        assert "\n" not in line and path in line and key in line, (path, options, line)
        arguments = ["--config-file", path, "--input", inputs["dir"], "--output", str(tmp_path / "out")]
        assert demo.main([*arguments, "--opts", *options]) == 2
    assert not (tmp_path / "out").exists()
