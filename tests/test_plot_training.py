"""tools/plot_training.py on fabricated metrics.json files (no detectron2 needed) and demo.py on a
tiny randomly initialised aLRP RetinaNet (CPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import pytest
from matplotlib.image import imread

REPO_ROOT = Path(__file__).resolve().parents[1]
PLOT_TOOL = REPO_ROOT / "tools" / "plot_training.py"
RETINANET_HEADS = ("alrp",)
FASTER_RCNN_HEADS = ("rpn_alrp", "box_alrp")
ITERATIONS = list(range(19, 200, 20))
PERIOD = 100


def load_plot_tool():
    """tools/ is no package (and site-packages may hold an unrelated ``tools``): load by path."""
    spec = importlib.util.spec_from_file_location("plot_training", PLOT_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plot_tool = load_plot_tool()


def training_record(iteration: int, heads: Sequence[str], with_weight: bool = True) -> Dict[str, float]:
    """A metrics.json line of detectron2's JSONWriter with the keys the aLRP heads log."""
    record = {"iteration": iteration, "lr": 0.01, "total_loss": 1.5, "time": 0.2}
    for index, head in enumerate(heads):
        record[f"sb/{head}/cls"] = 1.0 / (1.0 + iteration / 100)
        record[f"sb/{head}/loc"] = 0.4 / (1.0 + iteration / 100) + 0.1 * index
        record[f"{head}/grad_ratio"] = 1.0
        record[f"loss_{head}_cls"] = record[f"sb/{head}/cls"]
        if with_weight:
            record[f"sb/{head}/weight"] = 50.0 if iteration < PERIOD else 3.0 + index
    return record


def write_metrics(directory: Path, records: List[dict], tail: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(record) for record in records]
    (directory / "metrics.json").write_text("\n".join(lines) + "\n" + tail)
    return directory


def run_records(heads: Sequence[str], with_weight: bool = True) -> List[dict]:
    """Training lines every 20 iterations and an evaluation line (NaN AP, as an empty evaluation logs)."""
    records = [training_record(i, heads, with_weight) for i in ITERATIONS]
    records.append({"iteration": ITERATIONS[-1], "bbox/AP": float("nan"), "bbox/oLRP": 0.8})
    return records


def png_size(path: str):
    height, width = imread(path).shape[:2]
    return width, height


# ---- tools/plot_training.py --------------------------------------------------------------------


@pytest.mark.parametrize("heads", [RETINANET_HEADS, FASTER_RCNN_HEADS], ids=["retinanet", "faster_rcnn"])
def test_plot_training_writes_pngs_of_the_figure_size(tmp_path, heads):
    run = write_metrics(tmp_path / "run", run_records(heads))
    paths = plot_tool.plot_training(str(run))
    names = ["loss_components.png", "self_balance_weight.png", "grad_ratio.png"]
    assert paths == [str(run / "plots" / name) for name in names]
    expected = (round(plot_tool.FIGSIZE[0] * plot_tool.DPI), round(plot_tool.FIGSIZE[1] * plot_tool.DPI))
    for path in paths:
        assert os.path.getsize(path) > 0
        assert png_size(path) == expected


def test_heads_are_discovered_from_the_keys(tmp_path):
    records = run_records(FASTER_RCNN_HEADS)
    resumed = training_record(ITERATIONS[-1], FASTER_RCNN_HEADS)
    resumed["sb/rpn_alrp/cls"] = 0.123  # a resumed run logs an iteration again: the last value counts
    run = write_metrics(tmp_path, records + [resumed], tail='{"iteration": 220, "sb/rp')  # a line being written
    series = plot_tool.read_head_series(str(run / "metrics.json"))
    for kind in ("cls", "loc", "weight", "grad_ratio"):
        assert set(series[kind]) == set(FASTER_RCNN_HEADS)
    iterations, values = series["cls"]["rpn_alrp"]
    assert iterations == ITERATIONS
    assert values[-1] == 0.123
    weights = dict(zip(*series["weight"]["box_alrp"]))
    assert weights[99] == 50.0 and weights[119] == 4.0


def test_run_without_weight_key_gets_no_weight_plot(tmp_path):
    run = write_metrics(tmp_path / "run", run_records(RETINANET_HEADS, with_weight=False))
    paths = plot_tool.plot_training(str(run), str(tmp_path / "figures"))
    assert [os.path.basename(p) for p in paths] == ["loss_components.png", "grad_ratio.png"]
    assert all(p.startswith(str(tmp_path / "figures")) for p in paths)


def test_cli_prints_the_written_paths(tmp_path, capsys):
    run = write_metrics(tmp_path / "run", run_records(RETINANET_HEADS))
    assert plot_tool.main([str(run), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(printed) == sorted(str(tmp_path / "out" / name) for name in os.listdir(tmp_path / "out"))
    assert len(printed) == 3


def test_cli_fails_clearly_without_metrics_json(tmp_path):
    result = subprocess.run(
        [sys.executable, str(PLOT_TOOL), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert f"{tmp_path / 'metrics.json'} not found" in result.stderr
    assert not (tmp_path / "plots").exists()


def test_cli_fails_clearly_without_alrp_keys(tmp_path, capsys):
    run = write_metrics(tmp_path, [{"iteration": 19, "total_loss": 1.0}, {"iteration": 19, "bbox/AP": 10.0}])
    assert plot_tool.main([str(run)]) == 1
    error = capsys.readouterr().err
    assert "has none of the keys plotted" in error and "sb/<name>/cls" in error and "loss_rank" in error
    assert len(error.strip().splitlines()) == 1


def detr_record(iteration: int, terms: Sequence[str] = ("rank", "bbox", "giou")) -> Dict[str, float]:
    """A metrics.json line of a HuggingFaceDETR run: every term of the last layer (no suffix), of 2 earlier layers,
    of 3 layers' denoising queries and of the encoder's proposals."""
    record = {"iteration": iteration, "total_loss": 20.0, "lr": 1e-3}
    for suffix in ["", "_aux_0", "_aux_1", "_dn_0", "_dn_1", "_dn_2", "_enc"]:
        for index, term in enumerate(terms):
            record[f"loss_{term}{suffix}"] = 1.0 + index + 0.1 * len(suffix) - iteration / 1000
    return record


def test_a_detr_run_gets_its_ranking_terms_plotted(tmp_path):
    records = [detr_record(i) for i in ITERATIONS] + [{"iteration": ITERATIONS[-1], "bbox/oLRP": 0.9}]
    run = write_metrics(tmp_path / "run", records)
    series = plot_tool.read_detr_series(str(run / "metrics.json"))
    assert list(series) == ["rank", "bbox", "giou"]
    assert set(series["rank"]) == {"", "_aux_0", "_aux_1", "_dn_0", "_dn_1", "_dn_2", "_enc"}
    assert series["giou"]["_enc"][0] == ITERATIONS
    (path,) = plot_tool.plot_training(str(run))
    assert path == str(run / "plots" / "detr_loss_terms.png") and os.path.getsize(path) > 0


def d_fine_record(iteration: int, denoising: bool = True) -> Dict[str, float]:
    """A metrics.json line of a D-FINE run with ``box_terms="model"`` (3 decoder layers): D-FINE's own loss lays out
    the encoder's proposals as ``_aux_2``, after the earlier layers ``_aux_0``, ``_aux_1``; FGL and DDF for the earlier
    layers and the denoising sets only."""
    record: Dict[str, float] = {"iteration": iteration, "total_loss": 20.0}
    layers = ["_aux_0", "_aux_1"] + (["_dn_0", "_dn_1", "_dn_2"] if denoising else [])
    for suffix in ["", *layers, "_aux_2"]:
        for term in ("rank", "bbox", "giou"):
            record[f"loss_{term}{suffix}"] = 1.0 - iteration / 1000
    for suffix in layers:
        for term in ("fgl", "ddf"):
            record[f"loss_{term}{suffix}"] = 0.5 - iteration / 2000
    return record


@pytest.mark.parametrize("denoising", [True, False])
def test_every_set_and_term_of_a_d_fine_run_is_named(tmp_path, denoising):
    run = write_metrics(tmp_path / "run", [d_fine_record(i, denoising) for i in ITERATIONS])
    series = plot_tool.read_detr_series(str(run / "metrics.json"))
    assert list(series) == ["rank", "bbox", "giou", "fgl", "ddf"]
    figure = plot_tool._detr_figure(series)
    panels = {ax.get_title(): [line.get_label() for line in ax.get_lines()] for ax in figure.axes}
    assert list(panels) == ["loss_rank", "loss_bbox", "loss_giou", "loss_fgl", "loss_ddf"]
    denoised = ["layer 0, denoising", "layer 1, denoising", "layer 2, denoising"] if denoising else []
    assert panels["loss_rank"] == ["last layer", "layer 0", "layer 1", *denoised, "encoder proposals"]
    assert panels["loss_fgl"] == ["layer 0", "layer 1", *denoised]
    assert len(plot_tool.plot_training(str(run))) == 1


def test_the_numbered_sets_of_a_models_own_loss_are_layers():
    """Deformable-DETR's own loss (``box_terms="model"``) suffixes its earlier layers ``_<i>``."""
    terms = {"rank": {"": ([0], [1.0]), "_0": ([0], [1.0]), "_1": ([0], [1.0])}}
    assert plot_tool.encoder_suffix(terms) == ""
    labels = [line.get_label() for line in plot_tool._detr_figure(terms).axes[0].get_lines()]
    assert labels == ["last layer", "layer 0", "layer 1"]


def test_a_detr_trained_by_its_own_loss_says_why_nothing_is_plotted(tmp_path, capsys):
    """RT-DETR's varifocal loss (criterion None) logs loss_vfl, loss_bbox, loss_giou: no ranking loss to plot."""
    run = write_metrics(tmp_path, [detr_record(i, ("vfl", "bbox", "giou")) for i in ITERATIONS])
    assert plot_tool.read_detr_series(str(run / "metrics.json")) == {}
    assert plot_tool.main([str(run)]) == 1
    assert "criterion None" in capsys.readouterr().err


def test_a_single_record_is_drawn_as_a_marker(tmp_path):
    """A run shorter than the logging period has one record: a line through one point is invisible."""
    run = write_metrics(tmp_path / "run", [training_record(0, RETINANET_HEADS)])
    assert len(plot_tool.plot_training(str(run))) == 3
    figures = plot_tool._figures(plot_tool.read_head_series(str(run / "metrics.json")))
    for name, figure in figures.items():
        data_lines = [line for line in figure.axes[0].get_lines() if len(line.get_xdata()) == 1]
        assert data_lines and all(line.get_marker() not in (None, "None", "") for line in data_lines), name


@pytest.mark.parametrize("iteration", ['"19"', "19.5", "null", "true"])
def test_non_integer_iteration_names_the_line(tmp_path, iteration, capsys):
    record = json.dumps(training_record(39, RETINANET_HEADS))
    bad = json.dumps(training_record(19, RETINANET_HEADS)).replace('"iteration": 19', f'"iteration": {iteration}')
    run = write_metrics(tmp_path, [training_record(0, RETINANET_HEADS)], tail=bad + "\n" + record + "\n")
    assert plot_tool.main([str(run)]) == 1
    assert "metrics.json:2: 'iteration' must be an integer, got" in capsys.readouterr().err


# ---- demo.py -----------------------------------------------------------------------------------
