#!/usr/bin/env python3
"""Plots of an aLRP training run from detectron2's ``metrics.json`` (paper Figs. 2-4), and of the ranking-loss
terms of a DETR run (``HuggingFaceDETR`` trained by a criterion of alrp_d2).

    python tools/plot_training.py output/quickstart_retinanet
    python tools/plot_training.py output/quickstart_faster_rcnn --out docs/figures
    python tools/plot_training.py output/quickstart_rtdetr

For every head found in the keys ("alrp" and "ap" for RetinaNet, "rpn_alrp" and "box_alrp" for
Faster R-CNN, ...) it writes into ``--out`` (default ``OUTPUT_DIR/plots``):

    loss_components.png      unweighted sb/<name>/cls, sb/<name>/loc and their sum L, one panel
                             per head (paper Fig. 2)
    self_balance_weight.png  sb/<name>/weight, the self-balance weight, a step per period
    grad_ratio.png           <name>/grad_ratio, summed |dL/ds| over negatives / over positives,
                             with a reference line at 1 (paper Figs. 3-4, Theorem 2)

and for a DETR run, whose set-prediction loss logs ``loss_rank``, ``loss_bbox``, ``loss_giou`` (``loss_loc``,
``loss_corr``; with ``box_terms="model"`` the model's own box terms, D-FINE's and DEIMv2's ``loss_fgl`` and
``loss_ddf`` too) per set of predictions (no suffix: the last decoder layer; ``_aux_<i>`` or ``_<i>``: decoder layer
i; ``_dn_<i>``: layer i's denoising queries; ``_enc``: the encoder's proposals, which RT-DETR's, D-FINE's and DEIMv2's
own loss, with ``box_terms="model"``, logs as the last ``_aux_<i>``: the one of index L - 1 with L denoising sets, or
the one without ``loss_fgl`` where the others have it):

    detr_loss_terms.png      one panel per term, one line per set of predictions (weighted, as trained)

A figure whose keys the run did not log (e.g. no weight with a constant localisation weight) is
not written. Lines without these keys (evaluation results) are ignored; the values are those of
detectron2's JSONWriter (every SOLVER.LOG_PERIOD iterations, default 20, cls/loc/grad_ratio smoothed
by a median over as many iterations). When a resumed run logged an iteration again, its last value is plotted.

A series of one record (a run shorter than the logging period) is drawn as a marker.

Exit status: 0 when the plots were written; 1 with a message when OUTPUT_DIR has no
metrics.json, metrics.json has none of these keys (e.g. a DETR trained by its own loss, ``criterion=None``, logs
no ``loss_rank``) or a line whose ``iteration`` is no integer (the message gives the line number).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "FIGSIZE",
    "METRICS_FILE",
    "encoder_suffix",
    "plot_training",
    "read_detr_series",
    "read_head_series",
]

FIGSIZE = (6.4, 4.0)  # inches; the PNGs are FIGSIZE x DPI pixels, wider with more than PANELS_PER_FIGSIZE panels
PANELS_PER_FIGSIZE = 3
DPI = 100
METRICS_FILE = "metrics.json"
DEFAULT_OUT_SUBDIR = "plots"
KINDS = ("cls", "loc", "weight", "grad_ratio")
#: The terms of alrp_d2's SetRankingLoss and of the models' own box terms (D-FINE's, DEIMv2's FGL and DDF), in panel
#: order.
DETR_TERMS = ("rank", "bbox", "giou", "loc", "corr", "fgl", "ddf")

_SB_KEY = re.compile(r"^sb/(?P<head>[^/]+)/(?P<kind>cls|loc|weight)$")
_RATIO_KEY = re.compile(r"^(?P<head>[^/]+)/(?P<kind>grad_ratio)$")
_DETR_KEY = re.compile(r"^loss_(?P<term>rank|bbox|giou|loc|corr|fgl|ddf)(?P<set>_aux_\d+|_dn_\d+|_\d+|_enc|)$")

Series = Tuple[List[int], List[float]]
HeadSeries = Dict[str, Dict[str, Series]]

logger = logging.getLogger(__name__)


def _kind_and_head(key: str) -> Optional[Tuple[str, str]]:
    match = _SB_KEY.match(key) or _RATIO_KEY.match(key)
    return (match["kind"], match["head"]) if match else None


def _records(path: str):
    """The JSON objects of metrics.json; an undecodable line (e.g. the last line of a run still
    writing) is skipped with a warning."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                logger.warning("%s:%d: skipped, not valid JSON (%s)", path, number, error)
                continue
            if isinstance(record, dict) and "iteration" in record:
                iteration = record["iteration"]
                if isinstance(iteration, bool) or not isinstance(iteration, int):
                    raise ValueError(f"{path}:{number}: 'iteration' must be an integer, got {iteration!r}")
                yield record


def _series(metrics_path: str, classify: Callable[[str], Optional[Tuple[str, str]]]) -> HeadSeries:
    """``{kind: {head: (iterations, values)}}`` of the keys that ``classify`` maps to (kind, head), sorted by
    iteration."""
    by_iteration: Dict[Tuple[str, str], Dict[int, float]] = defaultdict(dict)
    for record in _records(metrics_path):
        for key, value in record.items():
            kind_head = classify(key)
            if kind_head is not None:
                by_iteration[kind_head][int(record["iteration"])] = float(value)
    series: HeadSeries = defaultdict(dict)
    for (kind, head), values in by_iteration.items():
        iterations = sorted(values)
        series[kind][head] = (iterations, [values[i] for i in iterations])
    return series


def read_head_series(metrics_path: str) -> HeadSeries:
    """``{kind: {head: (iterations, values)}}`` for the kinds cls, loc, weight and grad_ratio
    found in ``metrics_path``, sorted by iteration."""
    found = _series(metrics_path, _kind_and_head)
    return {kind: found.get(kind, {}) for kind in KINDS}


def _detr_term_and_set(key: str) -> Optional[Tuple[str, str]]:
    match = _DETR_KEY.match(key)
    return (match["term"], match["set"]) if match else None


def read_detr_series(metrics_path: str) -> HeadSeries:
    """``{term: {set suffix: (iterations, values)}}`` of a DETR run's ranking-loss terms (``loss_<term><suffix>``,
    :data:`DETR_TERMS`); empty without a ``loss_rank`` key (e.g. a DETR trained by its own loss)."""
    found = _series(metrics_path, _detr_term_and_set)
    return {term: found[term] for term in DETR_TERMS if term in found} if "rank" in found else {}


def _marker(series: Series) -> Optional[str]:
    """A marker for a series of one point, which a line alone does not show."""
    return "o" if len(series[0]) == 1 else None


def _new_figure(title: str, panels: int = 1) -> Tuple[Figure, List[Axes]]:
    width = FIGSIZE[0] * max(1.0, panels / PANELS_PER_FIGSIZE)
    figure = Figure(figsize=(width, FIGSIZE[1]), dpi=DPI, layout="constrained")
    axes = list(figure.subplots(1, panels, squeeze=False)[0])
    figure.suptitle(title)
    for ax in axes:
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    return figure, axes


def _total(cls: Series, loc: Series) -> Series:
    loc_values = dict(zip(*loc))
    iterations = [i for i in cls[0] if i in loc_values]
    cls_values = dict(zip(*cls))
    return iterations, [cls_values[i] + loc_values[i] for i in iterations]


def _components_figure(cls: Dict[str, Series], loc: Dict[str, Series]) -> Figure:
    heads = sorted(set(cls) | set(loc))
    figure, axes = _new_figure("Loss and its components (unweighted)", len(heads))
    for ax, head in zip(axes, heads):
        if head in cls:
            ax.plot(*cls[head], marker=_marker(cls[head]), label=r"$\mathcal{L}_{cls}$")
        if head in loc:
            ax.plot(*loc[head], marker=_marker(loc[head]), label=r"$\mathcal{L}_{loc}$")
        if head in cls and head in loc:
            total = _total(cls[head], loc[head])
            ax.plot(*total, marker=_marker(total), label=r"$\mathcal{L}$", color="black")
        ax.set_title(head)
        ax.legend()
    axes[0].set_ylabel("loss")
    return figure


def _weight_figure(weights: Dict[str, Series]) -> Figure:
    figure, (ax,) = _new_figure("Self-balance weight of the localisation component")
    for head in sorted(weights):
        ax.step(*weights[head], where="post", marker=_marker(weights[head]), label=head)
    ax.set_ylabel(r"$w_r$")
    ax.legend()
    return figure


def _grad_ratio_figure(ratios: Dict[str, Series]) -> Figure:
    figure, (ax,) = _new_figure("Summed score-gradient magnitudes: negatives / positives")
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="1")
    for head in sorted(ratios):
        ax.plot(*ratios[head], marker=_marker(ratios[head]), label=head)
    finite = [v for _, values in ratios.values() for v in values if math.isfinite(v)]
    ax.set_ylim(0.0, max([2.0] + [1.1 * v for v in finite]))
    ax.set_ylabel(r"$\sum_{neg} |\partial\mathcal{L}/\partial s| \,/\, \sum_{pos} |\partial\mathcal{L}/\partial s|$")
    ax.legend()
    return figure


def encoder_suffix(terms: HeadSeries) -> str:
    """The suffix of the encoder's proposals among ``terms``' sets: ``_enc``, or with an RT-DETR-family model's own
    layout (no ``_enc``: its loss appends the encoder's set to the auxiliary ones) the ``_aux_<i>`` of i = L - 1, L
    the number of denoising sets, or else the only ``_aux_<i>`` without ``loss_fgl`` where others have it (D-FINE's,
    DEIMv2's encoder has no distribution); "" when none is found."""
    sets = {suffix for term_sets in terms.values() for suffix in term_sets}
    if "_enc" in sets:
        return "_enc"
    denoising = sum(suffix.startswith("_dn_") for suffix in sets)
    if denoising and f"_aux_{denoising - 1}" in sets:
        return f"_aux_{denoising - 1}"
    fgl = set(terms.get("fgl", {}))
    without_fgl = [suffix for suffix in sets if suffix.startswith("_aux_") and suffix not in fgl]
    return without_fgl[0] if fgl and len(without_fgl) == 1 else ""


def _set_label(suffix: str, encoder: str) -> str:
    """The set of predictions of a loss-key suffix (hf_loss_function's ``SetPrediction.suffix``, or the suffixes of
    a model's own loss); ``encoder``: the encoder's suffix (:func:`encoder_suffix`)."""
    if not suffix:
        return "last layer"
    if suffix == encoder:
        return "encoder proposals"
    kind, layer = ("aux", suffix[1:]) if suffix[1:].isdigit() else suffix[1:].rsplit("_", 1)
    return f"layer {layer}" if kind == "aux" else f"layer {layer}, denoising"


def _set_style(suffix: str, encoder: str) -> Dict[str, object]:
    if not suffix:
        return {"color": "black", "linewidth": 2}
    if suffix == encoder:
        return {"color": "tab:red", "linestyle": ":"}
    return {"alpha": 0.6, "linewidth": 1, "linestyle": "--" if suffix.startswith("_dn") else "-"}


def _detr_figure(terms: HeadSeries) -> Figure:
    figure, axes = _new_figure("Ranking-loss terms of the DETR's sets of predictions (weighted)", len(terms))
    encoder = encoder_suffix(terms)
    for ax, (term, sets) in zip(axes, terms.items()):
        for suffix in sorted(sets, key=lambda s: (s != "", s == encoder, s.startswith("_dn"), s)):
            style = _set_style(suffix, encoder)
            ax.plot(*sets[suffix], marker=_marker(sets[suffix]), label=_set_label(suffix, encoder), **style)
        ax.set_title(f"loss_{term}")
    axes[0].set_ylabel("loss")
    axes[0].legend(fontsize="x-small")
    return figure


def _figures(series: HeadSeries) -> Dict[str, Figure]:
    figures: Dict[str, Figure] = {}
    if series["cls"] or series["loc"]:
        figures["loss_components.png"] = _components_figure(series["cls"], series["loc"])
    if series["weight"]:
        figures["self_balance_weight.png"] = _weight_figure(series["weight"])
    if series["grad_ratio"]:
        figures["grad_ratio.png"] = _grad_ratio_figure(series["grad_ratio"])
    return figures


def plot_training(output_dir: str, out_dir: Optional[str] = None) -> List[str]:
    """Writes the plots of the run in ``output_dir`` into ``out_dir`` (default
    ``output_dir/plots``) and returns their paths.

    Raises:
        FileNotFoundError: ``output_dir`` has no metrics.json.
        ValueError: metrics.json has no sb/<name>/{cls,loc,weight}, <name>/grad_ratio or loss_rank* key, or a
            line whose ``iteration`` is no integer (named by its line number).
    """
    metrics_path = os.path.join(output_dir, METRICS_FILE)
    if not os.path.isfile(metrics_path):
        raise FileNotFoundError(
            f"{metrics_path} not found: OUTPUT_DIR must be the output directory of a detectron2 "
            "training run (its JSONWriter writes metrics.json every SOLVER.LOG_PERIOD iterations)"
        )
    figures = _figures(read_head_series(metrics_path))
    detr_terms = read_detr_series(metrics_path)
    if detr_terms:
        figures["detr_loss_terms.png"] = _detr_figure(detr_terms)
    if not figures:
        raise ValueError(
            f"{metrics_path} has none of the keys plotted: a detector head's ranking loss (sb/<name>/cls, "
            "sb/<name>/loc, sb/<name>/weight, <name>/grad_ratio) or a DETR's set-prediction ranking loss "
            "(loss_rank, loss_rank_aux_<i>, ...); a run trained by another loss (e.g. a DETR's own, criterion None) "
            "logs none of them"
        )
    out_dir = out_dir or os.path.join(output_dir, DEFAULT_OUT_SUBDIR)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, figure in figures.items():
        path = os.path.join(out_dir, name)
        figure.savefig(path, dpi=DPI)
        written.append(path)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", metavar="OUTPUT_DIR", help="detectron2 output directory with metrics.json")
    parser.add_argument("--out", metavar="DIR", help="directory of the PNGs (default: OUTPUT_DIR/plots)")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s: %(message)s")
    try:
        paths = plot_training(args.output_dir, args.out)
    except (FileNotFoundError, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
