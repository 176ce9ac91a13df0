"""The size of a config before detectron2 reads it: a YAML file (and its ``_BASE_`` files), a ``--opts`` value and a
LazyConfig override may hold at most :data:`MAX_CONFIG_NODES` nodes, counted with YAML aliases expanded. A file of a
few hundred bytes whose aliases nest (each list ten references to the previous one, nine levels) expands to 10**9
nodes: loading keeps the references shared, but detectron2's ``default_setup`` (its OmegaConf conversion) and any
copy expand them, for minutes or until memory runs out.

The count runs on the composed YAML graph (``yaml.compose``: nodes, no Python objects), each node counted once and
its expanded size reused wherever an alias refers to it, so counting takes the time of reading the file."""

from __future__ import annotations

import ast
import os
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Set

import yaml

from ..checks.errors import ConfigError

__all__ = [
    "MAX_CONFIG_NODES",
    "ConfigTooLargeError",
    "check_option_values",
    "check_value_size",
    "check_yaml_size",
    "value_node_count",
    "yaml_node_count",
]

#: The most nodes (mappings, sequences and scalars, aliases expanded) a config file, a ``--opts`` value or a
#: LazyConfig override may hold; a config of the project with detectron2's defaults has under 1,000.
MAX_CONFIG_NODES = 100_000


class ConfigTooLargeError(ConfigError):
    """A config (file, option or override) over :data:`MAX_CONFIG_NODES` nodes, or with a recursive alias."""


def _expanded_count(root: Any, children: Callable[[Any], Iterable[Any]]) -> int:
    """The number of nodes of the tree ``root`` unfolds to (a node reached through several references counted each
    time), computed once per distinct node. Raises :class:`ConfigTooLargeError` for a node that contains itself."""
    counts: Dict[int, int] = {}
    active: Set[int] = set()

    def visit(node: Any) -> int:
        key = id(node)
        if key in counts:
            return counts[key]
        if key in active:
            raise ConfigTooLargeError("a recursive alias (a node that contains itself) expands without end")
        active.add(key)
        total = 1 + sum(visit(child) for child in children(node))
        active.discard(key)
        counts[key] = total
        return total

    try:
        return visit(root)
    except RecursionError as error:
        raise ConfigTooLargeError("nested too deeply to be read") from error


def _yaml_children(node: yaml.Node) -> Iterable[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return ()


def yaml_node_count(node: yaml.Node) -> int:
    """The nodes of a composed YAML document, aliases expanded."""
    return _expanded_count(node, _yaml_children)


def _value_children(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        return [part for pair in value.items() for part in pair]
    if isinstance(value, (list, tuple, set, frozenset)):
        return value
    return ()


def value_node_count(value: Any) -> int:
    """The nodes of a Python value (containers and scalars), shared references expanded."""
    return _expanded_count(value, _value_children)


def _refuse(source: str, count: int, limit: Optional[int]) -> None:
    limit = MAX_CONFIG_NODES if limit is None else limit
    if count > limit:
        raise ConfigTooLargeError(
            f"{source} holds {count:,} nodes with its YAML aliases expanded, over the limit of {limit:,} "
            "(alrp_d2.config.yaml_bound.MAX_CONFIG_NODES): nested aliases expand to such sizes; write the values out"
        )


def _base_file(path: str, root: yaml.Node) -> str:
    """The ``_BASE_`` file of a composed config, resolved as detectron2's ``load_yaml_with_base``, or ""."""
    if not isinstance(root, yaml.MappingNode):
        return ""
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "_BASE_" and isinstance(value, yaml.ScalarNode):
            base = os.path.expanduser(value.value)
            return base if base.startswith(("/", "https://", "http://")) else os.path.join(os.path.dirname(path), base)
    return ""


def check_yaml_size(path: str, limit: Optional[int] = None) -> None:
    """Raises :class:`ConfigTooLargeError` naming the file when the YAML config ``path`` or one of its ``_BASE_``
    files holds more than ``limit`` nodes (None: :data:`MAX_CONFIG_NODES`), aliases expanded, or a recursive alias.
    A file that cannot be read or parsed is left to detectron2's loading, which names the problem."""
    seen: Set[str] = set()
    while path and path not in seen and os.path.isfile(path):
        seen.add(path)
        try:
            with open(path, encoding="utf-8") as f:
                root = yaml.compose(f, Loader=yaml.SafeLoader)
            count = 0 if root is None else yaml_node_count(root)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return
        except RecursionError as error:
            raise ConfigTooLargeError(f"the config file {path} is nested too deeply to be read") from error
        except ConfigTooLargeError as error:
            raise ConfigTooLargeError(f"the config file {path}: {error}") from error
        _refuse(f"the config file {path}", count, limit)
        path = _base_file(path, root)


def check_value_size(value: Any, source: str, limit: Optional[int] = None) -> None:
    """Raises :class:`ConfigTooLargeError` naming ``source`` when ``value`` holds more than ``limit`` nodes."""
    _refuse(source, value_node_count(value), limit)


def _literal(text: Any) -> Any:
    """A ``--opts`` value as yacs decodes it (a Python literal, or the string itself)."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def check_option_values(opts: Sequence[Any], limit: Optional[int] = None) -> None:
    """:func:`check_value_size` of every value of the ``KEY VALUE`` pairs of ``--opts``, naming the key."""
    for index in range(1, len(opts), 2):
        check_value_size(_literal(opts[index]), f"the --opts value of {opts[index - 1]}", limit)
