"""detectron2's ``key=value`` overrides of a LazyConfig, checked as yacs checks ``KEY VALUE`` options: a key the
config does not have is refused, naming the nearest existing keys (``train.max_itr=3`` would otherwise be added and
never read), and a value of another kind than the one it replaces (a number, a boolean) is refused, naming the key
(``optimizer.lr=abc``, ``model.ranking_loss.criterion.delta=null``).

A key a config does not hold is still known when it is an argument of the ``LazyCall`` it would be added to (e.g.
``model.ranking_loss.loss_weight``, an argument of ``HeadRankingLoss``) or one of the project's ``train`` keys
(:data:`~alrp_d2.config.lazy_fields.TRAIN_DEFAULTS`); ``+key=value`` (hydra's syntax) adds a key on purpose."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Collection, Dict, Iterator, List, Optional, Sequence, Tuple

from detectron2.config import LazyConfig
from detectron2.utils.registry import locate
from fvcore.common.checkpoint import PeriodicCheckpointer
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf

from ..checks.errors import ConfigError, ConfigKeyError, one_line
from ..config.yaml_bound import check_value_size

__all__ = ["UnknownConfigKeyError", "apply_checked_overrides"]

#: Plain dicts of detectron2's LazyConfigs that are the arguments of a callable (``train.checkpointer``).
PLAIN_NODE_TARGETS: Dict[str, Any] = {"train.checkpointer": PeriodicCheckpointer}
_ABSENT = object()


class UnknownConfigKeyError(ConfigKeyError):
    """A ``key=value`` override of a key the LazyConfig does not have."""


def _target(path: str, node: Any) -> Any:
    """The callable a config node is the arguments of (its ``_target_``, or :data:`PLAIN_NODE_TARGETS`), or None."""
    if not isinstance(node, DictConfig):
        return None
    target = node.get("_target_", PLAIN_NODE_TARGETS.get(path))
    return locate(target) if isinstance(target, str) else target


def _parameters(target: Any) -> Optional[Dict[str, inspect.Parameter]]:
    """The keyword parameters of the callable ``target``; a class whose ``__init__`` takes ``**kwargs`` adds those of
    its bases' (up to the first without them), as the project's detectors pass them on. None: any keyword."""
    functions = [target]
    if inspect.isclass(target):
        functions = [vars(klass)["__init__"] for klass in target.__mro__[:-1] if "__init__" in vars(klass)]
    found: Dict[str, inspect.Parameter] = {}
    for function in functions:
        try:
            parameters = inspect.signature(function).parameters
        except (TypeError, ValueError):
            return None
        for name, parameter in parameters.items():
            if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD) and name != "self":
                found.setdefault(name, parameter)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return found
    return None


def _split(key: str) -> Tuple[str, str]:
    parent, _, name = key.rpartition(".")
    return parent, name


def _select(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, default=_ABSENT, throw_on_resolution_failure=False) if key else cfg


def _known_keys(node: Any, prefix: str) -> Iterator[str]:
    """Every key of the config and every argument of its ``LazyCall`` nodes, dotted."""
    if isinstance(node, DictConfig):
        target = _target(prefix, node)
        parameters = {} if target is None else _parameters(target) or {}
        for name in dict.fromkeys([*map(str, node.keys()), *parameters]):
            key = f"{prefix}.{name}" if prefix else name
            yield key
            if name in node:
                yield from _known_keys(node._get_node(name), key)
    elif isinstance(node, ListConfig):
        for index in range(len(node)):
            key = f"{prefix}.{index}"
            yield key
            yield from _known_keys(node._get_node(index), key)


def _argument(cfg: DictConfig, key: str) -> Optional[inspect.Parameter]:
    """The parameter of the ``LazyCall`` (or :data:`PLAIN_NODE_TARGETS` callable) ``key`` is an argument of."""
    parent, name = _split(key)
    target = _target(parent, _select(cfg, parent))
    parameters = None if target is None else _parameters(target)
    return None if parameters is None else parameters.get(name)


def _known(cfg: DictConfig, key: str, extra_train_keys: Collection[str]) -> bool:
    if _select(cfg, key) is not _ABSENT:
        return True
    parent, name = _split(key)
    if parent == "train" and name in extra_train_keys:
        return True
    target = _target(parent, _select(cfg, parent))
    if target is None:
        return False
    parameters = _parameters(target)
    return parameters is None or name in parameters


def _unknown_key_message(cfg: DictConfig, key: str, path: str, extra_train_keys: Collection[str]) -> str:
    candidates = list(dict.fromkeys([*_known_keys(cfg, ""), *(f"train.{k}" for k in extra_train_keys)]))
    nearest = difflib.get_close_matches(key, candidates, n=3, cutoff=0.8)
    if nearest:
        hint = "did you mean " + " or ".join(nearest) + "?"
    else:
        parent, _ = _split(key)
        siblings = [k for k in candidates if _split(k)[0] == parent]
        hint = f"the keys of {parent or 'the config'}: {', '.join(siblings)}" if siblings else "no key is close"
    return (
        f"{path}: the override {key}=... names a key the config does not have (it would be added and never read): "
        f"{hint} (write +{key}=... to add a key on purpose)"
    )


def _kind(value: Any) -> Optional[str]:
    """The kind an override must keep: "True or False", "a number", or None (any value)."""
    if isinstance(value, bool):
        return "True or False"
    if isinstance(value, (int, float)):
        return "a number"
    return None


def _allows_none(parameter: Optional[inspect.Parameter]) -> bool:
    if parameter is None:
        return False
    return parameter.default is None or "Optional" in str(parameter.annotation) or "None" in str(parameter.annotation)


def _check_kind(cfg: DictConfig, key: str, before: Any, after: Any, path: str) -> None:
    """Raises ValueError naming ``key`` when the override replaced a number (or a boolean) by another kind."""
    parameter = _argument(cfg, key)
    if before is _ABSENT and parameter is not None and parameter.default is not inspect.Parameter.empty:
        before = parameter.default  # an argument the config does not set: its default's kind
    kind = _kind(before)
    if kind is None or after is None and _allows_none(parameter):
        return
    fits = isinstance(after, bool) if kind == "True or False" else _kind(after) == "a number"
    if not fits:
        raise ConfigError(f"{path}: invalid override {key}={after!r}: must be {kind}, as its value {before!r} is")


def apply_checked_overrides(
    cfg: DictConfig, overrides: Sequence[str], path: str, extra_train_keys: Collection[str] = ()
) -> DictConfig:
    """detectron2's ``LazyConfig.apply_overrides`` of ``overrides`` (in place; ``cfg`` returned), one at a time,
    each checked (module docstring): raises :class:`UnknownConfigKeyError` naming the nearest keys, or
    :class:`ConfigError` for an override that does not parse or a key whose value changes kind.
    ``path``: the config file, in the messages; ``extra_train_keys``: keys ``train`` may hold without the config
    setting them."""
    texts: List[str] = list(overrides)
    try:
        parsed_overrides = OverridesParser.create().parse_overrides(texts)
    except OverrideParseException as error:
        raise ConfigError(f"{path}: an override is not key=value ({one_line(error)})") from error
    for text, parsed in zip(texts, parsed_overrides):
        key = parsed.key_or_group
        check_value_size(parsed.value(), f"{path}: the override {key}=...")
        if not parsed.is_add() and not _known(cfg, key, extra_train_keys):
            raise UnknownConfigKeyError(_unknown_key_message(cfg, key, path, extra_train_keys))
        before = _select(cfg, key)
        LazyConfig.apply_overrides(cfg, [text])
        _check_kind(cfg, key, before, _select(cfg, key), path)
    return cfg
