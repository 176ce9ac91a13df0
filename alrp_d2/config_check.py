"""The error of an invalid config value, naming its key: raised where each rule is checked."""

from __future__ import annotations

from typing import Any, Optional

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


def require_argument(owner: str, name: str, value: Any, problem: Optional[str]) -> None:
    """Raises ValueError naming the argument ``name`` of ``owner`` (a class, e.g. "HeadRankingLoss('box')") when
    ``problem`` (what is wrong with ``value``) is not None: the name a LazyConfig sets it by."""
    if problem is not None:
        raise ValueError(f"Invalid argument {name}={value!r} of {owner}: {problem}")
