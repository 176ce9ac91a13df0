"""The error of an invalid config value, naming its key (:class:`ConfigError`), and of an invalid constructor argument,
naming the argument (:class:`ArgumentError`): raised where each rule is checked; the commands (``train_net.py``,
``demo.py``) report them in one line with exit status 2. A rule on a constructor's argument is checked once, by the
constructor; a ``from_config`` that builds it names the config key the argument came from
(:func:`naming_config_keys`)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Mapping, Tuple, TypeVar

__all__ = [
    "ArgumentError",
    "ConfigError",
    "ConfigKeyError",
    "built_naming_config_keys",
    "naming_config_keys",
    "one_line",
    "require_argument",
    "require_config",
    "require_integer",
]

Init = TypeVar("Init", bound=Callable[..., None])


class ConfigError(ValueError):
    """A config the project refuses: a key's value, a file or an override, named in the message."""


class ConfigKeyError(ConfigError, KeyError):
    """A key the config does not have (or that was renamed), named in the message."""

    def __str__(self) -> str:  # KeyError's str() is the repr of its message
        return str(self.args[0])


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (a command's report of a refused config)."""
    return " ".join(part.strip() for part in str(error).splitlines() if part.strip())


def require_config(condition: bool, key: str, value: Any, expectation: str) -> None:
    """Raises :class:`ConfigError` naming the config key when ``condition`` does not hold."""
    if not condition:
        raise ConfigError(f"Invalid config value {key}={value!r}: {expectation}")


def require_integer(key: str, value: Any, minimum: int, note: str = "") -> None:
    """Raises :class:`ConfigError` naming the config key unless ``value`` is an integer >= ``minimum``."""
    require_config(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        key,
        value,
        f"must be an integer >= {minimum}{note}",
    )


class ArgumentError(ValueError):
    """``owner``'s argument ``name`` has ``value``, against ``expectation``."""

    def __init__(self, owner: str, name: str, value: Any, expectation: str):
        super().__init__(f"Invalid argument {owner}({name}={value!r}): {expectation}")
        self.owner, self.name, self.value, self.expectation = owner, name, value, expectation

    def __reduce__(self) -> Tuple[Any, ...]:
        return type(self), (self.owner, self.name, self.value, self.expectation)


def require_argument(condition: bool, owner: str, name: str, value: Any, expectation: str) -> None:
    """Raises :class:`ArgumentError` naming ``owner``'s argument ``name`` when ``condition`` does not hold (the
    constructors' check: a LazyConfig or a Python caller sees its own names)."""
    if not condition:
        raise ArgumentError(owner, name, value, expectation)


_ABSENT = object()


def _config_value(cfg: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in ``cfg``; :data:`_ABSENT` where the config does not hold it."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node


@contextlib.contextmanager
def naming_config_keys(cfg: Mapping[str, Any], keys: Mapping[str, str]) -> Iterator[None]:
    """The block (a ``from_config`` building an object from ``cfg``) raises the :class:`ArgumentError` of an
    argument that ``keys`` maps to a config key (argument name -> key) as the error of that key and its value in
    ``cfg`` (when ``cfg`` holds it), with the constructor's expectation: a YAML run is told which key to change."""
    try:
        yield
    except ArgumentError as error:
        value = _config_value(cfg, keys[error.name]) if error.name in keys else _ABSENT
        if value is _ABSENT:
            raise
        expectation = f"{error.expectation} (argument {error.name}={error.value!r} of {error.owner})"
        raise ConfigError(f"Invalid config value {keys[error.name]}={value!r}: {expectation}") from error


def built_naming_config_keys(keys: Mapping[str, str]) -> Callable[[Init], Init]:
    """Decorates a detectron2 ``@configurable`` ``__init__`` (above ``@configurable``): built from a config (its
    first argument, as detectron2's registries build), its arguments' errors name their config keys
    (:func:`naming_config_keys`); built from arguments, their names."""

    def decorate(init: Init) -> Init:
        @functools.wraps(init)
        def built(self: Any, *args: Any, **kwargs: Any) -> None:
            cfg = args[0] if args else kwargs.get("cfg")
            if not isinstance(cfg, Mapping):
                return init(self, *args, **kwargs)
            with naming_config_keys(cfg, keys):
                return init(self, *args, **kwargs)

        return built  # type: ignore[return-value]

    return decorate
