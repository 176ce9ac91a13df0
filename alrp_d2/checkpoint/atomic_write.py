"""Writing a file so that a process killed at any moment leaves either its old or its new content,
never a partial file: the bytes go to a temporary file in the same directory, which is flushed to
disk (fsync) and then renamed over the target (``os.replace``, atomic on POSIX and Windows)."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
from typing import IO, Callable

__all__ = ["write_atomically"]

TEMPORARY_SUFFIX = ".tmp"


def _temporary_prefix(path: str) -> str:
    """Temporary files of ``path`` are hidden and never end in the target's extension, so that a
    listing of ``*.pth`` files never sees one."""
    return f".{os.path.basename(path)}."


def _fsync_directory(directory: str) -> None:
    """Makes the rename durable; directories cannot be opened on Windows, where this is a no-op."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomically(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Calls ``write`` on a binary file that replaces ``path`` once ``write`` has returned and its
    bytes are on disk. A failure in ``write`` removes the temporary file and leaves ``path`` as it
    was; a kill leaves ``path`` as it was and at most a temporary file, which the next successful
    write of the same ``path`` removes."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _temporary_prefix(path)
    temporary = os.path.join(directory, prefix + secrets.token_hex(8) + TEMPORARY_SUFFIX)
    try:
        with open(temporary, "xb") as f:  # a fresh file, with the permissions of open(path, "wb")
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise
    _fsync_directory(directory)
    for stale in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*" + TEMPORARY_SUFFIX)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(stale)
