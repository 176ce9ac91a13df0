#!/usr/bin/env python3
# ruff: noqa: E402  (the warning filters below come before detectron2 is imported)
"""Draw the detections of a trained aLRP model on images (boxes, class names and scores).

    python demo.py --config-file configs/quickstart/alrp_retinanet_shapes.yaml \\
        --input ~/.cache/alrp_d2/datasets/shapes/val --output output/demo --scale 4 \\
        --lrp-thresholds output/quickstart_retinanet/inference/lrp_optimal_thresholds.json \\
        --opts MODEL.WEIGHTS output/quickstart_retinanet/model_final.pth

The config is built like train_net.py's (``alrp_d2.config.setup_cfg``: detectron2's defaults, the
aLRP keys, the file, then ``--opts``); ``--dataset NAME ANNOTATIONS_JSON IMAGE_DIR`` registers a
COCO-format dataset as train_net.py does, for its class names (``--opts DATASETS.TEST '("NAME",)'``).
A ``.py`` config is a LazyConfig, loaded as train_net.py loads it, its ``--opts`` ``key=value`` overrides (the
weights: ``train.init_checkpoint=model_final.pth``; the class names: ``dataloader.test.dataset.names=NAME``),
predicting with ``alrp_d2.evaluation.lazy_predictor.LazyPredictor``:

    python demo.py --config-file configs/quickstart/rtdetr_shapes.py --input ~/.cache/alrp_d2/datasets/shapes/val \
        --output output/demo_rtdetr --opts train.init_checkpoint=output/quickstart_rtdetr/model_final.pth

``--input`` takes image files, directories (their images, sorted) and glob patterns (the matching
files, sorted). Each input gets one image of the same file name in ``--output``. With
``--lrp-thresholds`` (the file COCOLRPEvaluator writes to OUTPUT_DIR/inference) a detection is
drawn when its score reaches the LRP-optimal threshold of its class (``LRPThresholdPredictor``);
otherwise when it reaches ``--confidence-threshold``. Detections below the config's
SCORE_THRESH_TEST are never produced.

An input that is missing, is not a regular file (a FIFO, a device), cannot be read (also a
decompression bomb: more than twice PIL's ``Image.MAX_IMAGE_PIXELS``), has so extreme an aspect
ratio that the test-time resize would make a side 0 pixels, or cannot be written is reported and
skipped; the model is not
loaded when no input names an image. Exit status: 0 when every input was drawn, 1 when some input
failed, 2 for a usage error (e.g. ``--scale`` outside (0, 16], ``--confidence-threshold`` outside
[0, 1] or NaN), an unusable config (one line naming the file and the key), threshold file or dataset,
or weights that cannot be read safely, do not fit the config, hold NaN or infinite values, or were
trained on other classes than the first dataset of DATASETS.TEST (nothing drawn). A threshold file must be the one the
evaluator wrote for these weights (it records the model, the task and the classes).
``--allow-unsafe-config`` loads a config whose YAML tags construct Python objects (detectron2's
behaviour; only for trusted files).
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from alrp_d2.known_warnings import ignore_third_party_deprecations

ignore_third_party_deprecations()  # before detectron2 is imported

import numpy as np
import torch
import tqdm
import yaml
from detectron2.config import CfgNode
from detectron2.data import Metadata, MetadataCatalog
from detectron2.data.detection_utils import read_image
from detectron2.structures import Instances
from detectron2.utils.logger import setup_logger
from detectron2.utils.visualizer import Visualizer
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException
from PIL import Image, UnidentifiedImageError

from alrp_d2.checkpoint import (
    IncompatibleWeightsError,
    NonFiniteWeightsError,
    UnreadableCheckpointError,
    weights_fingerprint,
)
from alrp_d2.checkpoint.safe_pickle import UnsafePickleError
from alrp_d2.checks.argument_types import drawing_scale, score_threshold
from alrp_d2.checks.errors import ArgumentError, ConfigError, one_line
from alrp_d2.config import setup_cfg
from alrp_d2.config.lazy_fields import lazy_dataset_names
from alrp_d2.data.dataset_classes import ClassesMismatchError, check_classes, check_dataset_classes, dataset_classes
from alrp_d2.data.image_errors import high_bit_depth_error
from alrp_d2.data.image_size import ImageSizeError
from alrp_d2.data.user_datasets import add_dataset_argument, register_user_datasets
from alrp_d2.engine.lazy_run import is_lazy_config, lazy_num_classes, load_lazy_config
from alrp_d2.evaluation import AlrpPredictor, LRPThresholdPredictor, filter_by_class_thresholds, load_lrp_thresholds
from alrp_d2.evaluation.lazy_predictor import LazyPredictor
from alrp_d2.user_modules import add_import_argument, import_user_modules

__all__ = [
    "CONFIG_ERRORS",
    "IMAGE_EXTENSIONS",
    "ThresholdError",
    "build_predictor",
    "config_error_line",
    "draw_detections",
    "expand_inputs",
    "load_config",
    "run_demo",
]

IMAGE_EXTENSIONS = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
GLOB_CHARACTERS = "*?["

Failure = Tuple[str, str]  # (input, reason)
Predict = Callable[[np.ndarray], Instances]
Config = Union[CfgNode, DictConfig]  # a YAML config's, or a LazyConfig

#: What loading and checking a config raises when it cannot be used: yacs' KeyError, AssertionError and ValueError, a
#: YAML or Python syntax error, a missing file or module, an error of a LazyConfig's code, hydra's override grammar,
#: omegaconf's errors, the class checks' ValueError.
CONFIG_ERRORS = (
    AssertionError,
    AttributeError,
    ImportError,
    KeyError,
    NameError,
    OSError,
    SyntaxError,
    TypeError,
    ValueError,
    yaml.YAMLError,
    HydraException,
    OmegaConfBaseException,
)

logger = logging.getLogger("alrp_d2.demo")  # under the "alrp_d2" logger that main() sets up


class ThresholdError(ValueError):
    """The LRP threshold file cannot be used with the config's test dataset."""


class _InputError(Exception):
    """One input cannot be drawn; the others go on."""


NOT_REGULAR = "not a regular file (a FIFO, socket or device is never read)"


def _directory_images(path: str) -> List[str]:
    try:
        names = os.listdir(path)
    except OSError as error:
        raise _InputError(f"cannot list the directory: {error.strerror}") from error
    images = sorted(os.path.join(path, name) for name in names if name.lower().endswith(IMAGE_EXTENSIONS))
    if not images:
        raise _InputError(f"no image ({', '.join(IMAGE_EXTENSIONS)}) in the directory")
    return images


def _expand(entry: str) -> List[str]:
    """The paths named by one ``--input`` entry (not yet checked to be regular files)."""
    path = os.path.expanduser(entry)
    if os.path.isdir(path):
        return _directory_images(path)
    if os.path.exists(path):
        return [path]
    if any(character in path for character in GLOB_CHARACTERS):
        matches = sorted(match for match in glob.glob(path) if not os.path.isdir(match))
        if not matches:
            raise _InputError("the pattern matches no file")
        return matches
    raise _InputError("no such file or directory")


def expand_inputs(inputs: Sequence[str]) -> Tuple[List[str], List[Failure]]:
    """The image paths of ``inputs`` in order, each once, and the entries naming no image; a path
    that is not a regular file (e.g. a FIFO named ``*.png``, whose reading would block) is a failure."""
    paths: Dict[str, str] = {}
    failed: List[Failure] = []
    for entry in inputs:
        try:
            found = _expand(entry)
        except _InputError as error:
            failed.append((entry, str(error)))
            continue
        for path in found:
            if not os.path.isfile(path):
                failed.append((path, NOT_REGULAR))
                continue
            paths.setdefault(os.path.abspath(path), path)
    return list(paths.values()), failed


def load_config(path: str, opts: Sequence[str], allow_unsafe: bool = False) -> Config:
    """The config of ``path`` with ``opts``: a LazyConfig (``.py``) with ``key=value`` overrides, as train_net.py loads
    it, or a YAML config with ``KEY VALUE`` pairs (``setup_cfg``, frozen)."""
    if is_lazy_config(path):
        return load_lazy_config(path, opts)
    cfg = setup_cfg(path, opts, allow_unsafe=allow_unsafe)
    cfg.freeze()
    return cfg


def config_error_line(path: str, error: BaseException) -> str:
    """One line naming the config file and what is wrong (the key, the line of a syntax error)."""
    message = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    cause = error.__cause__
    if isinstance(cause, SyntaxError) and f"line {cause.lineno}" not in message:
        message += f" ({cause.msg}, line {cause.lineno})"
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return line if path in line else f"{path}: {line}"


def check_test_classes(cfg: Config) -> None:
    """The classes of the config's first test dataset against the model's number of classes (the key of the model's
    own config system: e.g. MODEL.DETR.NUM_CLASSES, model.num_classes)."""
    options = "--opts (the number of classes of the weights)"
    if isinstance(cfg, DictConfig):
        key, expected = lazy_num_classes(cfg)
        check_classes({"dataloader.test": lazy_dataset_names(cfg, "test")}, key, expected, "=", options)
    else:
        check_dataset_classes(cfg, include_train=False, options=options)


def _test_dataset(cfg: Config) -> str:
    names = lazy_dataset_names(cfg, "test") if isinstance(cfg, DictConfig) else list(cfg.DATASETS.TEST)
    return names[0] if names else "__unused"


def _lazy_predictor(cfg: DictConfig, thresholds_path: Optional[str], confidence: float) -> Predict:
    """:func:`build_predictor` of a LazyConfig: the threshold file is checked against the classes of
    ``dataloader.test``'s first dataset before the model is built, and against the loaded model after."""
    classes = dataset_classes(_test_dataset(cfg)) if thresholds_path is not None else None
    if thresholds_path is not None:
        if classes is None:
            raise ThresholdError("dataloader.test names no dataset with classes: the thresholds cannot be matched")
        try:
            class_thresholds = load_lrp_thresholds(thresholds_path, classes.names, classes.category_ids())
        except (FileNotFoundError, ValueError) as error:
            raise ThresholdError(str(error)) from error
    predictor = LazyPredictor(cfg)
    if thresholds_path is None:
        return lambda image: _above(predictor(image)["instances"].to("cpu"), confidence)
    record = {"architecture": type(predictor.model).__name__, "weights_sha256": weights_fingerprint(predictor.model)}
    try:
        load_lrp_thresholds(thresholds_path, classes.names, classes.category_ids(), model_record=record)
    except ValueError as error:
        raise ThresholdError(str(error)) from error
    return lambda image: filter_by_class_thresholds(predictor(image)["instances"].to("cpu"), class_thresholds)


def _above(instances: Instances, confidence: float) -> Instances:
    return instances[instances.scores >= confidence]


def build_predictor(cfg: Config, thresholds_path: Optional[str] = None, confidence: float = 0.5) -> Predict:
    """A function from a BGR image to the detections to draw, on the CPU: those of
    :class:`LRPThresholdPredictor` with ``thresholds_path``, or else those at or above
    ``confidence``. Raises :class:`ThresholdError`, before building the model, for an unusable
    threshold file, and IncompatibleWeightsError for weights that do not fit the config (an empty
    MODEL.WEIGHTS draws the detections of a randomly initialised model, with a warning). A LazyConfig predicts with
    :class:`LazyPredictor` (its weights: ``train.init_checkpoint``)."""
    if isinstance(cfg, DictConfig):
        return _lazy_predictor(cfg, thresholds_path, confidence)
    if thresholds_path is None:
        predictor = AlrpPredictor(cfg)
        return lambda image: _above(predictor(image)["instances"].to("cpu"), confidence)
    try:
        lrp_predictor = LRPThresholdPredictor(cfg, thresholds_path)
    except IncompatibleWeightsError:
        raise
    except (FileNotFoundError, ValueError) as error:
        raise ThresholdError(str(error)) from error
    return lambda image: lrp_predictor(image)["instances"].to("cpu")


def top_class_per_box(instances: Instances) -> Instances:
    """The detection of the highest score of every box: a dense detector gives one detection per (box, class)
    above the threshold, the same box with several labels that would hide each other. Sorted by score."""
    if len(instances) == 0:
        return instances
    order = torch.argsort(instances.scores, descending=True, stable=True)
    _, box_of = torch.unique(instances.pred_boxes.tensor[order], dim=0, return_inverse=True)
    first = torch.full((int(box_of.max()) + 1,), len(order), dtype=torch.long)
    first.scatter_reduce_(0, box_of, torch.arange(len(order)), reduce="amin")
    return instances[order[first.sort().values]]


#: The smallest label, in pixels of the drawing.
MIN_LABEL_PX = 6.0
#: The largest label relative to the drawing: a label at most 1/25 of its size (sqrt(height * width)).
LABEL_FRACTION = 1 / 25


def label_font_scale(height: int, width: int, scale: float) -> float:
    """The factor on detectron2's label size (``Visualizer``'s ``font_size_scale``) that keeps a label within
    :data:`LABEL_FRACTION` of a ``scale``-times drawing of a ``height`` x ``width`` image, and at least
    :data:`MIN_LABEL_PX`: detectron2's size, ``max(sqrt(h * w) // 90, 10 // scale)`` pixels of the image, is at least
    10 pixels of a drawing at scale 1, a third of a 32 px image; on large images it is left as it is."""
    default_px = max(np.sqrt(height * width) // 90, 10 // scale) * scale
    largest_px = max(np.sqrt(height * width) * scale * LABEL_FRACTION, MIN_LABEL_PX)
    return float(min(1.0, largest_px / default_px))


def draw_detections(
    image_bgr: np.ndarray, instances: Instances, metadata: Metadata, scale: float = 1.0, all_classes: bool = False
) -> np.ndarray:
    """The RGB image with the boxes, class names and scores of ``instances`` drawn on it: the top class of every box
    (:func:`top_class_per_box`), or with ``all_classes`` every detection; labels scaled to the drawing
    (:func:`label_font_scale`)."""
    if not all_classes:
        instances = top_class_per_box(instances)
    height, width = image_bgr.shape[:2]
    font_scale = label_font_scale(height, width, scale)
    visualizer = Visualizer(image_bgr[:, :, ::-1], metadata, scale=scale, font_size_scale=font_scale)
    return visualizer.draw_instance_predictions(instances).get_image()


def _output_path(path: str, output_dir: str, written: Dict[str, str]) -> str:
    """Where the drawing of ``path`` goes, unless that would overwrite the input or the drawing
    of another input of the same file name."""
    target = os.path.join(output_dir, os.path.basename(path))
    if os.path.abspath(target) == os.path.abspath(path):
        raise _InputError(f"the output {target} would overwrite the input")
    if target in written:
        raise _InputError(f"the output {target} was already written for {written[target]}")
    return target


def _draw_one(
    path: str, target: str, predict: Predict, metadata: Metadata, scale: float, all_classes: bool = False
) -> None:
    bit_depth = high_bit_depth_error(path)
    if bit_depth is not None:
        raise _InputError(f"cannot read the image: {bit_depth}")
    try:
        image = read_image(path, format="BGR")
    except UnidentifiedImageError as error:
        raise _InputError("not an image file (or in a format PIL cannot read)") from error
    except Exception as error:  # PIL raises OSError, ValueError, SyntaxError, struct.error, ... on damaged files
        raise _InputError(f"cannot read the image ({type(error).__name__}: {error})") from error
    try:
        detections = predict(image)
    except ImageSizeError as error:
        raise _InputError(str(error)) from error
    drawing = draw_detections(image, detections, metadata, scale, all_classes)
    try:
        Image.fromarray(drawing).save(target)
    except (OSError, ValueError) as error:
        raise _InputError(f"cannot write {target}: {error}") from error


def run_demo(
    cfg: Config,
    inputs: Sequence[str],
    output_dir: str,
    thresholds_path: Optional[str] = None,
    confidence: float = 0.5,
    scale: float = 1.0,
    all_classes: bool = False,
) -> Tuple[List[str], List[Failure]]:
    """Draws the detections of ``cfg``'s model on every image of ``inputs`` (files, directories,
    glob patterns) into ``output_dir`` under the same file names.

    ``confidence`` is the score threshold when ``thresholds_path`` is None; every box is drawn with its top class
    unless ``all_classes``. Returns the written
    paths and the (input, reason) of every input that was missing or could not be read or written;
    those are logged and skipped. Raises :class:`ThresholdError`, before building the model, for an
    unusable threshold file. Without any input naming an image it returns before building the model.
    """
    paths, failed = expand_inputs(inputs)
    for entry, reason in failed:
        logger.error("%s: %s", entry, reason)
    if not paths:
        return [], failed
    predict = build_predictor(cfg, thresholds_path, confidence)
    metadata = MetadataCatalog.get(_test_dataset(cfg))
    os.makedirs(output_dir, exist_ok=True)
    written: Dict[str, str] = {}
    for path in tqdm.tqdm(paths, desc="demo", unit="image"):
        try:
            target = _output_path(path, output_dir, written)
            _draw_one(path, target, predict, metadata, scale, all_classes)
        except _InputError as error:
            logger.error("%s: %s", path, error)
            failed.append((path, str(error)))
            continue
        written[target] = path
    return list(written), failed


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-file", required=True, metavar="FILE", help="path to the config file")
    parser.add_argument(
        "--input", required=True, nargs="+", metavar="IMG_OR_DIR", help="image files, directories or glob patterns"
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="directory of the drawn images")
    parser.add_argument(
        "--lrp-thresholds", metavar="JSON", help="per-class LRP-optimal thresholds (replaces --confidence-threshold)"
    )
    parser.add_argument(
        "--confidence-threshold",
        type=score_threshold,
        help="minimum score of a drawn detection without --lrp-thresholds, in [0, 1] (default 0.5)",
    )
    parser.add_argument(
        "--scale", type=drawing_scale, default=1.0, help="size of the drawn images relative to the inputs, in (0, 16]"
    )
    parser.add_argument(
        "--all-classes",
        action="store_true",
        help="draw every detection; by default a box found for several classes is drawn once, with its top class",
    )
    add_dataset_argument(parser)
    add_import_argument(parser)
    parser.add_argument(
        "--allow-unsafe-config",
        action="store_true",
        help="load a config whose YAML tags construct Python objects (runs code from the file: trusted files only)",
    )
    parser.add_argument(
        "--opts",
        default=[],
        nargs=argparse.REMAINDER,
        help="config options: KEY VALUE pairs of a YAML config (e.g. MODEL.WEIGHTS ...), key=value overrides of a "
        "LazyConfig (e.g. train.init_checkpoint=...)",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.lrp_thresholds is not None and args.confidence_threshold is not None:
        parser.error("--lrp-thresholds and --confidence-threshold exclude each other")
    setup_logger(name="fvcore")
    setup_logger()
    setup_logger(name="alrp_d2")
    confidence = 0.5 if args.confidence_threshold is None else args.confidence_threshold
    try:  # a module or --dataset that cannot be used
        import_user_modules(args.imports)
        register_user_datasets(args.dataset)  # for the class names only: not evaluated
    except (FileNotFoundError, ImportError, ValueError) as error:
        logger.error("%s", error)
        return 2
    try:  # a config, or dataset classes, that cannot be used: one line naming the file and the key
        cfg = load_config(args.config_file, args.opts, allow_unsafe=args.allow_unsafe_config)
        check_test_classes(cfg)
    except CONFIG_ERRORS as error:
        logger.error("%s", config_error_line(args.config_file, error))
        return 2
    try:
        written, failed = run_demo(
            cfg, args.input, args.output, args.lrp_thresholds, confidence, args.scale, args.all_classes
        )
    except (
        ConfigError,  # a refused config: a model's argument (HuggingFaceDETR(pixel_std=...)) named by its key
        ArgumentError,
        ThresholdError,
        IncompatibleWeightsError,
        NonFiniteWeightsError,
        ClassesMismatchError,
        UnreadableCheckpointError,
        UnsafePickleError,
        FileNotFoundError,
    ) as error:
        logger.error("%s", one_line(error))
        return 2
    logger.info("Wrote %d image(s) to %s", len(written), args.output)
    if failed:
        logger.error("%d input(s) failed: %s", len(failed), ", ".join(entry for entry, _ in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
