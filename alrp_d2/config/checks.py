"""The error of an invalid config value, naming its key, and of an invalid constructor argument, naming the argument:
raised where each rule is checked."""

from __future__ import annotations

from typing import Any

__all__ = ["require_argument", "require_config", "require_integer"]


def require_config(condition: bool, key: str, value: Any, expectation: str) -> None:
    """Raises ValueError naming the config key when ``condition`` does not hold."""
    if not condition:
        raise ValueError(f"Invalid config value {key}={value!r}: {expectation}")


def require_integer(key: str, value: Any, minimum: int, note: str = "") -> None:
    """Raises ValueError naming the config key unless ``value`` is an integer >= ``minimum``."""
    require_config(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        key,
        value,
        f"must be an integer >= {minimum}{note}",
    )


def require_argument(condition: bool, owner: str, name: str, value: Any, expectation: str) -> None:
    """Raises ValueError naming ``owner``'s argument ``name`` when ``condition`` does not hold (the constructors'
    check: a LazyConfig or a Python caller sees its own names)."""
    if not condition:
        raise ValueError(f"Invalid argument {owner}({name}={value!r}): {expectation}")
