"""File-system primitives the log relies on for durability."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# The suffix of atomic_write's temp file: a leftover of an interrupted write, safe to delete.
TMP_SUFFIX = ".tmp"


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so that creations, renames and deletions in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a mix.

    Writes a sibling temp file, fsyncs it, renames it over ``path`` and fsyncs the directory
    (the last two only when ``durable``). The temp file is removed if anything fails.

    Raises:
        OSError: the write, fsync or rename failed; ``path`` is then unchanged.
    """
    target = Path(path)
    tmp = target.with_name(target.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(target.parent)
