"""Reading JSON files that users give (COCO annotation files, LRP threshold files): a file that is
not JSON, is binary (not UTF-8, -16 or -32) or nests deeper than Python's recursion limit is an error
saying "<file> is not valid JSON", never a bare ``UnicodeDecodeError`` or ``RecursionError``."""

from __future__ import annotations

import gc
import json
from typing import IO, Any

__all__ = ["InvalidJsonError", "load_json"]


class InvalidJsonError(ValueError):
    """The file is not valid JSON (or nests too deep to be read); the message names it."""


def load_json(file: IO[bytes], path: str) -> Any:
    """The JSON value of the binary stream ``file`` (read from ``path``, named in errors); raises
    :class:`InvalidJsonError` when it is not UTF-8/16/32 JSON or nests deeper than the recursion limit."""
    data = file.read()
    collecting = gc.isenabled()
    gc.disable()  # a JSON value holds no cycles: the collector's passes over its new objects would cost a quarter
    try:
        return json.loads(data)
    except json.JSONDecodeError as error:
        raise InvalidJsonError(f"{path} is not valid JSON: {error}") from error
    except UnicodeDecodeError as error:
        reason = f"it is not UTF-8 text ({error.reason} at byte {error.start})"
        raise InvalidJsonError(f"{path} is not valid JSON: {reason}") from error
    except RecursionError as error:
        raise InvalidJsonError(f"{path} is not valid JSON: it nests deeper than Python's recursion limit") from error
    finally:
        if collecting:
            gc.enable()
