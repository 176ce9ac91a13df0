"""The published loss functions of other implementations, loaded at run time for side-by-side
benchmarks: the official aLRP Loss and AP Loss loops (kemaloksuz/aLRPLoss), the official Rank & Sort
Loss loop (kemaloksuz/RankSortLoss) and BRL's bucketed losses (blisgard/BucketedRankingBasedLosses);
and the losses of another checkout of this project (the previous implementation), called in the label or index form
whatever API that checkout has (:func:`label_form`, :func:`index_form`).

None of their code is part of this project: each file is loaded from the repository path given on
the command line, with ``Tensor.cuda()`` redirected to the benchmark's device (the official
functions allocate with ``.cuda()``) and mmdetection's ``LOSSES`` registry served by a stub (BRL's
file registers its losses). Each returned function takes what our labelled sets take (+1/0/-1
labels, or continuous targets for Rank & Sort Loss) and returns the outputs to backpropagate.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["REFERENCES", "index_form", "label_form", "load_previous", "load_reference"]

ALRP_REPO_FILES = {"alrp": "mmdet/models/losses/alrp_loss.py", "ap": "mmdet/models/losses/ap_loss.py"}
RANKING_LOSSES_FILE = "mmdet/models/losses/ranking_losses.py"

#: (loss, implementation) -> the repository it comes from, for the command-line help and reports.
REFERENCES: Dict[Tuple[str, str], str] = {
    ("alrp", "official"): "kemaloksuz/aLRPLoss",
    ("ap", "official"): "kemaloksuz/aLRPLoss",
    ("ap", "BRL"): "blisgard/BucketedRankingBasedLosses",
    ("rank_sort", "official"): "kemaloksuz/RankSortLoss",
    ("rank_sort", "BRL"): "blisgard/BucketedRankingBasedLosses",
}


def _redirect_cuda(device: str) -> None:
    """``Tensor.cuda()`` of the loaded code moves to ``device`` instead."""
    torch.Tensor.cuda = lambda self, *args, **kwargs: self.to(device)  # type: ignore[method-assign]


def _load_file(name: str, path: str, package: Optional[str] = None) -> types.ModuleType:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: is the repository path right?")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    if package is not None:
        module.__package__ = package
    spec.loader.exec_module(module)
    return module


def _load_registered(name: str, path: str) -> types.ModuleType:
    """A loss file of an mmdetection fork that imports ``LOSSES`` from ``..builder``: its package is a
    stub whose registry returns the classes unchanged."""
    package = f"reference_{name}"
    for part in (package, f"{package}.models", f"{package}.models.losses"):
        module = types.ModuleType(part)
        module.__path__ = []  # type: ignore[attr-defined]
        sys.modules[part] = module
    builder = types.ModuleType(f"{package}.models.builder")
    builder.LOSSES = types.SimpleNamespace(  # type: ignore[attr-defined]
        register_module=lambda *args, **kwargs: lambda cls: cls
    )
    sys.modules[f"{package}.models.builder"] = builder
    return _load_file(f"{package}.models.losses.{name}", path, f"{package}.models.losses")


def load_previous(repo: str) -> types.ModuleType:
    """The ``alrp_d2.losses`` package of another checkout of this project (e.g. ``git archive main | tar -x
    -C DIR``), imported under its own name so that it runs beside this checkout's."""
    path = os.path.join(repo, "alrp_d2", "losses")
    name = "previous_alrp_d2_losses"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(path, "__init__.py"), submodule_search_locations=[path]
    )
    if spec is None or spec.loader is None:
        raise FileNotFoundError(
            f"{path} holds no alrp_d2.losses package: is --previous-repo a checkout of this project?"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def label_form(losses: types.ModuleType, loss: str) -> Callable[..., Tuple[Tensor, ...]]:
    """``f(logits, labels, *errors, **options)``: the outputs of ``loss`` ("alrp", "ap", "rank_sort") of a checkout's
    ``alrp_d2.losses`` (this one's, or :func:`load_previous`'s) on one ranking given by (M,) labels (Rank & Sort
    Loss: its continuous targets), as scalars: one ``LabelledSet`` in a list of one, or, in a checkout without it,
    the label function of the same name."""
    function = getattr(losses, f"{loss}_loss")
    if not hasattr(losses, "LabelledSet"):
        return lambda logits, labels, *errors, **options: _outputs(function(logits, labels, *errors, **options))
    return lambda logits, labels, *errors, **options: tuple(
        field.squeeze(0) for field in function([losses.LabelledSet(logits, labels, *errors)], **options)
    )


def _outputs(result: Any) -> Tuple[Tensor, ...]:
    """A label function's result as a tuple (AP Loss's is one tensor)."""
    return (result,) if isinstance(result, Tensor) else tuple(result)


def index_form(losses: types.ModuleType, loss: str) -> Callable[..., Tuple[Tensor, ...]]:
    """``f(logits, positive_index, positive_values, valid, **options)``: the outputs of ``loss`` of a checkout's
    ``alrp_d2.losses`` on one ranking given as the detection heads give it, as scalars: one ``RankingSet`` in a list
    of one, or, in a checkout without ``LabelledSet``, the ``*_loss_indexed`` function (AP Loss takes no values)."""
    if not hasattr(losses, "LabelledSet"):
        indexed = getattr(losses, f"{loss}_loss_indexed")
        if loss == "ap":
            return lambda logits, index, values, valid, **options: tuple(indexed(logits, index, valid, **options))
        return lambda logits, index, values, valid, **options: tuple(indexed(logits, index, values, valid, **options))
    function = getattr(losses, f"{loss}_loss")
    return lambda logits, index, values, valid, **options: tuple(
        field.squeeze(0) for field in function([losses.RankingSet(logits, index, values, valid)], **options)
    )


def load_reference(loss: str, implementation: str, repo: str, device: str) -> Callable[..., Tuple[Tensor, ...]]:
    """The reference ``loss`` ("alrp", "ap", "rank_sort") of ``implementation`` ("official",
    "BRL") from the repository checkout ``repo``.

    Returns:
        "alrp": ``f(logits, labels, loc_errors, delta) -> (loss_cls, loss_loc)``, loss_loc as the
        official head computes it from the returned ranks and order (the cumulative sum of the
        sorted errors over the ranks); "ap": ``f(logits, labels, delta) -> (loss,)``;
        "rank_sort": ``f(logits, targets, delta) -> (ranking_loss, sorting_loss)``.
    """
    if (loss, implementation) not in REFERENCES:
        raise ValueError(f"no reference {implementation} {loss}: one of {sorted(REFERENCES)}")
    _redirect_cuda(device)
    if implementation == "official" and loss in ALRP_REPO_FILES:
        module = _load_file(f"official_{loss}_loss", os.path.join(repo, ALRP_REPO_FILES[loss]))
        if loss == "ap":
            return lambda logits, labels, delta: (module.APLoss.apply(logits, labels, delta),)

        def official_alrp(logits: Tensor, labels: Tensor, loc_errors: Tensor, delta: float) -> Tuple[Tensor, Tensor]:
            loss_cls, rank, order = module.aLRPLoss.apply(logits, labels, loc_errors.detach(), delta)
            ordered = loc_errors[order.detach()].flip(dims=[0])
            loss_loc = (torch.cumsum(ordered, dim=0) / rank[order.detach()].detach().flip(dims=[0])).mean()
            return loss_cls, loss_loc

        return official_alrp
    path = os.path.join(repo, RANKING_LOSSES_FILE)
    if implementation == "official":
        module = _load_file("official_ranking_losses", path)
        return lambda logits, targets, delta: module.RankSort.apply(logits, targets, delta, 1e-10)
    module = _load_registered("brl_ranking_losses", path)
    if loss == "ap":
        return lambda logits, labels, delta: (module.BucketedAPLoss.apply(logits, labels.float(), delta),)
    return lambda logits, targets, delta: module.BucketedRankSort.apply(logits, targets, delta)
