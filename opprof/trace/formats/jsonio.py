"""Trace files as bytes and JSON: reading (gzip by content), parsing, writing, and their errors.

The one place that knows how a trace file is opened and what a malformed one says: every reader
(:mod:`.chrome`, :mod:`.importer`) goes through it. orjson (a dependency) parses and serialises:
building 1M event dicts with the standard library costs as much again as the rest of a save.
"""

from __future__ import annotations

import enum
import gc
import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, cast

import orjson

from .atomic import not_a_regular_file, special_kind

__all__ = [
    "TraceFormatError",
    "TraceSaveError",
    "check_regular_file",
    "dumps",
    "loads",
    "no_gc",
    "open_maybe_gzip",
    "output_path_problem",
    "parse_json",
    "read_trace_file",
]


class TraceFormatError(ValueError):
    """A trace file that cannot be read; the message names the file, the problem and where."""


class TraceSaveError(TypeError, ValueError):
    """A trace that cannot be written in the format asked for (a value JSON cannot store, times
    farther apart than Chrome JSON's timestamps hold): nothing was written, the file that was there
    is as it was. (A TypeError and a ValueError: what the writers raised before.)"""


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic objects.

    Each collection walks every live object, so a load of 1M events otherwise pays ~1 s (a third of
    its time) for collections that find nothing. Nothing built here forms a cycle.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ---------------------------------------------------------------------------- reading the file
#: A gzipped file is refused when it inflates past ``max(GZIP_FLOOR, MAX_GZIP_INFLATION x its size)``
#: (trace JSON gzips ~10-20x; a stream of one repeated byte ~1,000x, so 1 MB could hold 1 GB): it is
#: inflated a chunk at a time and stops at the limit, never holding more.
MAX_GZIP_INFLATION = 100
GZIP_FLOOR = 64 << 20
_CHUNK = 1 << 20


def check_regular_file(path: str | os.PathLike[str]) -> None:
    """Refuse what is not a regular file: a FIFO blocks, a device (``/dev/zero``) never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    kind = special_kind(mode)
    if kind is not None:
        raise TraceFormatError(f"{path}: cannot read {kind}, not a trace file (only regular files are read)")


def read_trace_file(path: str | os.PathLike[str]) -> bytes:
    """The decompressed bytes of a trace file. ``.gz`` must be gzip; other names are sniffed."""
    check_regular_file(path)
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the check
                raise TraceFormatError(f"{path}: not a regular file (only regular files are read)")
            raw = f.read()
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    gz = str(path).endswith(".gz")
    if gz or raw[:2] == b"\x1f\x8b":
        if not raw:
            raise TraceFormatError(f"{path}: the file is empty")
        raw = _gunzip(raw, str(path))
    return raw


def _gunzip(raw: bytes, source: str) -> bytes:
    """``gzip.decompress`` (concatenated members too), a chunk at a time up to the limit."""
    limit = max(GZIP_FLOOR, MAX_GZIP_INFLATION * len(raw))
    parts: list[bytes] = []
    total = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as g:
            while chunk := g.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise TraceFormatError(
                        f"{source}: inflates past {limit:,} bytes, more than {MAX_GZIP_INFLATION}x its {len(raw):,} "
                        f"(at least {GZIP_FLOOR:,}): refused as a gzip bomb; gunzip it yourself if it is a real trace"
                    )
                parts.append(chunk)
    except (OSError, EOFError, zlib.error) as e:  # not gzip, or cut short
        raise TraceFormatError(f"{source}: cannot read: not a complete gzip stream ({e})") from None
    return b"".join(parts)


def loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # The standard library also reads NaN/Infinity (Python's own json.dump writes them).
        return json.loads(data)


def parse_json(raw: bytes, source: str) -> tuple[Any, bool]:
    """Parse trace bytes; returns ``(object, truncated)``. Raises :class:`TraceFormatError`."""
    head = raw[:4096]
    if not raw.strip():
        raise TraceFormatError(f"{source}: the file is empty")
    if b"\x00" in head or (head[:2] in (b"\xff\xfe", b"\xfe\xff")):
        raise TraceFormatError(f"{source}: a binary file, not Chrome trace JSON")
    try:
        return loads(raw), False
    except (ValueError, RecursionError) as e:  # JSONDecodeError (both libraries), UnicodeDecodeError
        first_error = e
    repaired = _repair_truncated_array(raw)
    if repaired is not None:
        return repaired, True
    raise TraceFormatError(f"{source}: not valid JSON ({_short(first_error)})") from None


def _short(e: BaseException) -> str:
    msg = str(e)
    return msg if len(msg) <= 200 else msg[:200] + "…"


def _repair_truncated_array(raw: bytes, attempts: int = 8) -> list[Any] | None:
    """A bare event array cut short, read up to its last complete event (bounded work)."""
    body = raw.rstrip()
    if not body.lstrip()[:1] == b"[":
        return None
    end = len(body)
    for _ in range(attempts):
        cut = body[:end].rstrip()
        while cut.endswith(b","):
            cut = cut[:-1].rstrip()
        try:
            obj = loads(cut + b"]")
        except (ValueError, RecursionError):
            end = body.rfind(b"}", 0, end - 1 if end == len(body) else end) + 1
            if end <= 0:
                return None
            continue
        return obj if isinstance(obj, list) else None
    return None


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; enums (a span's role) as their values.

    Whatever :func:`loads` reads, this writes: orjson refuses a str that is not valid UTF-8 (a lone
    surrogate, which JSON's ``\\ud800`` escape makes and :func:`loads` accepts) and nesting past 254
    levels; the standard library writes both (escaped, and to the interpreter's recursion limit),
    so a trace that loads can be saved, its bytes read back the same."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        pass
    try:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":"), default=_enum_value, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise TraceSaveError(f"a value JSON cannot store: {e}") from None


def _enum_value(o: Any) -> Any:
    if isinstance(o, enum.Enum):
        return o.value
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def open_maybe_gzip(path: str | os.PathLike[str], mode: str) -> IO[Any]:
    return cast(IO[Any], gzip.open(path, mode)) if str(path).endswith(".gz") else open(path, mode)


def output_path_problem(path: str, directory: bool = False) -> str | None:
    """Why ``path`` cannot be written (checked before any work runs, so none is lost), or ``None``.

    ``directory``: ``path`` is a directory to write files into (it may exist already, as one)."""
    parent = os.path.dirname(os.path.abspath(path))
    if directory:
        if os.path.isdir(path):
            return None if os.access(path, os.W_OK) else f"cannot write in {path}"
        if os.path.exists(path):
            return f"{path} is a file, not a directory"
    elif os.path.isdir(path):
        return f"{path} is a directory"
    elif (special := not_a_regular_file(path)) is not None:  # a FIFO would block the write
        return special
    if not os.path.isdir(parent):
        return f"no such directory: {parent}"
    if not os.access(parent, os.W_OK):
        return f"cannot write in {parent}"
    return None
