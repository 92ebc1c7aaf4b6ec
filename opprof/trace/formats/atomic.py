"""Writing a file without losing the one that was there: write aside, then rename.

A save that fails half-way (a value JSON cannot store, a full disk, Ctrl-C) must leave the file the
user had intact, and a path that is not a regular file (a FIFO, a device) must be refused rather
than blocked on or replaced: :func:`written` writes to a temporary name in the same directory (so
the rename is atomic) that keeps the target's suffix (``.gz`` decides compression), and renames it
over the target only once the writer returned.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["not_a_regular_file", "special_kind", "written"]


def special_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` is when it is not a regular file (``a FIFO``), else None: a FIFO
    blocks a reader or writer, a device (``/dev/zero``) never ends, a directory is no file."""
    if stat.S_ISREG(mode):
        return None
    return "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or other special file"


def not_a_regular_file(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` must not be written to, or None: it exists and is not a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{os.fspath(path)}: {e.strerror}"
    kind = special_kind(mode)
    return None if kind is None else f"{os.fspath(path)} is {kind}: not written (name a regular file)"


@contextmanager
def written(path: str | os.PathLike[str]) -> Iterator[str]:
    """``with written(path) as tmp:`` write ``tmp``; on success it replaces ``path``, on any error
    it is removed and ``path`` stays as it was. Raises OSError for a ``path`` that exists and is
    not a regular file (:func:`not_a_regular_file`)."""
    problem = not_a_regular_file(path)
    if problem:
        raise OSError(problem)
    target = os.fspath(path)
    head, name = os.path.split(target)
    suffix = ".gz" if name.endswith(".gz") else ""
    tmp = os.path.join(head, f".{name}.{os.getpid()}.partial{suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
