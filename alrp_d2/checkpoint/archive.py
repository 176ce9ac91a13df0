"""The sizes a checkpoint archive declares, checked before ``torch.load`` reads it: ``torch.save`` writes a
zip archive whose entries are stored uncompressed, but a crafted archive may deflate a storage of zeros (a
5.8 MB file that ``torch.load`` inflates to 6 GB). The storages' sizes in the archive's pickle must equal
their entries' sizes (``torch.load`` checks it), so bounding the entries bounds what loading allocates."""

from __future__ import annotations

import os
import zipfile

__all__ = ["ArchiveSizeError", "MAX_INFLATION", "check_archive_sizes"]

#: The entries of a checkpoint archive may declare at most this many times the file's size, plus
#: :data:`INFLATION_SLACK` bytes (a stored archive declares less than its size).
MAX_INFLATION = 2
INFLATION_SLACK = 16 << 20


class ArchiveSizeError(ValueError):
    """The archive declares much more content than its file holds (compressed entries: a decompression bomb?)."""


def check_archive_sizes(path: str) -> None:
    """Raises :class:`ArchiveSizeError` naming ``path`` when it is a zip archive whose entries declare more than
    :data:`MAX_INFLATION` times its size plus :data:`INFLATION_SLACK` bytes; other files (pickles, torch's
    legacy format, whose storages are read from the file as they are) pass."""
    if not zipfile.is_zipfile(path):
        return
    size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise ArchiveSizeError(f"{path} is a damaged zip archive: {error}") from error
    declared = sum(entry.file_size for entry in entries)
    if declared > MAX_INFLATION * size + INFLATION_SLACK:
        largest = max(entries, key=lambda entry: entry.file_size)
        raise ArchiveSizeError(
            f"{path} declares {declared} bytes of content in a file of {size} bytes (e.g. {largest.filename}: "
            f"{largest.file_size} bytes compressed to {largest.compress_size}); torch.save stores checkpoints "
            "uncompressed, so this is a decompression bomb or not a checkpoint: refusing to load it"
        )
