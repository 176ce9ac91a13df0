"""The normaliser of a Hugging Face DETR's own box terms under DDP (``box_terms="model"``, docs/detr.md, "Under DDP
with box_terms="model"").

HF's RT-DETR, D-FINE and DEIMv2 losses divide each box term of a matched set by ``n_w = max(t_w, 1)``, ``t_w`` the
targets of the worker's own images, and of a denoising set by the worker's denoising pairs (``n_w`` times the
denoising groups), never all-reduced: DDP's average of the workers' gradients weighs a worker's boxes by
``1 / (W n_w)``. ``box_normaliser="global"`` multiplies each such term by ``n_w W / max(N, 1)``, ``N`` the targets
(denoising pairs) of all workers (one ``all_reduce`` of two numbers per step), so that DDP's average is the gradient of
the whole batch's term normalised by ``N``: ``(1 / W) sum_w W S_w / N = S / N`` for the per-pair sums ``S_w``.
Which terms each family divides so, and where the option is refused: ``LossFamily.box_normalisation``
(:mod:`.hf_families`).
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["BOX_NORMALISERS", "BoxNormalisation", "check_box_normaliser", "globally_normalised"]

#: What normalises the model's own box terms: the model's normaliser, or the targets of all workers.
BOX_NORMALISERS = ("model", "global")


class BoxNormalisation(NamedTuple):
    """How one family's own loss normalises its box terms.

    Attributes:
        worker_terms: the terms (keys without a set's suffix) divided by the worker's own target count: rescaled by
            ``box_normaliser="global"``; the others are left as they are (normalised by all workers already, or
            otherwise, e.g. as a mean over the worker's queries).
        unsupported: why ``box_normaliser="global"`` is refused for the family; empty: it is supported.
    """

    worker_terms: Tuple[str, ...] = ()
    unsupported: str = ""


#: The key suffix of HF's denoising sets, before the layer's position (``_dn_{i}``).
DENOISING_SUFFIX = "_dn_"


class RankedSet(Protocol):
    """What :func:`globally_normalised` reads of a set of predictions (:class:`~alrp_d2.detr.hf_families.SetPrediction`:
    its key suffix, :data:`DENOISING_SUFFIX` for a denoising set, and its indices)."""

    @property
    def suffix(self) -> str: ...

    @property
    def indices(self) -> Optional[List[Tuple[Tensor, Tensor]]]: ...


def check_box_normaliser(box_normaliser: str, box_terms: str) -> None:
    """A ValueError unless ``box_normaliser`` is one of :data:`BOX_NORMALISERS` and "model" with every
    ``box_terms`` but "model"."""
    if box_normaliser not in BOX_NORMALISERS:
        raise ValueError(f"box_normaliser must be one of {BOX_NORMALISERS}, got {box_normaliser!r}")
    if box_normaliser != "model" and box_terms != "model":
        raise ValueError(
            f"box_normaliser {box_normaliser!r} applies to box_terms='model' only (the model's own box terms); "
            f"box_terms {box_terms!r} normalises its box terms by the matched pairs of all workers already"
        )


RankedSetT = TypeVar("RankedSetT", bound=RankedSet)


def split_key(name: str, sets: Sequence[RankedSetT]) -> Tuple[str, RankedSetT]:
    """A loss key's term (the key without the set's suffix) and the set it belongs to: the one whose suffix is the
    longest that ends ``name``."""
    owner = max((s for s in sets if name.endswith(s.suffix)), key=lambda s: len(s.suffix))
    return (name[: len(name) - len(owner.suffix)] if owner.suffix else name), owner


def globally_normalised(
    terms: Dict[str, Tensor],
    sets: Sequence[RankedSet],
    num_targets: int,
    worker_terms: Tuple[str, ...],
    device: torch.device,
) -> Dict[str, Tensor]:
    """``terms`` with each of ``worker_terms`` of every set multiplied by ``max(n_w, 1) W / max(N, 1)`` (module
    docstring): ``n_w`` this worker's ``num_targets``, or for a denoising set its pairs; ``N``
    their sum over the workers. Unchanged without an initialised process group of more than one worker; otherwise
    every worker must call it equally often (one ``all_reduce``)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return terms
    denoising = [s.indices for s in sets if s.suffix.startswith(DENOISING_SUFFIX) and s.indices is not None]
    pairs = sum(len(queries) for queries, _ in denoising[0]) if denoising else 0
    local = torch.tensor([float(num_targets), float(pairs)], dtype=torch.float64, device=device)
    total = local.clone()
    dist.all_reduce(total)
    factors = local.clamp_min(1.0) * dist.get_world_size() / total.clamp_min(1.0)
    rescaled = {}
    for name, value in terms.items():
        term, owner = split_key(name, sets)
        factor = factors[int(owner.suffix.startswith(DENOISING_SUFFIX))].to(value.dtype)
        rescaled[name] = value * factor if term in worker_terms else value
    return rescaled
