"""``nd.save`` / ``nd.load``: MXNet's binary ``.params`` format, so files move both ways with MXNet.

The one place that knows the format (MXNet 1.x ``NDArray::Save``), all little-endian:
a list header (uint64 magic ``0x112``, uint64 reserved), the arrays (uint64 count, then each:
uint32 magic ``0xF993FAC9``, int32 storage type 0 = dense, int32 ndim, ndim int64 dims, the
context as two int32, an int32 type flag, the raw data), then the names (uint64 count, each a
uint64 length and UTF-8 bytes). Reading is NumPy on bytes: a file is data, never code.
"""

from __future__ import annotations

import math
import os
import stat
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..engine import MXNetError
from .ndarray import NDArray, array

__all__ = ["load", "load_frombuffer", "save"]

_LIST_MAGIC = 0x112
_V2_MAGIC = 0xF993FAC9
_V3_MAGIC = 0xF993FACA  # written by MXNet's NumPy-shape mode; the same layout for dense arrays
_CPU = 1
#: MXNet's own limit on an array's dimensions (``TShape``'s ``kMaxNDim``).
_MAX_NDIM = 32
#: MXNet's (mshadow's) type flags.
_TYPE_FLAGS = {
    0: np.float32,
    1: np.float64,
    2: np.float16,
    3: np.uint8,
    4: np.int32,
    5: np.int8,
    6: np.int64,
    7: np.bool_,
    8: np.int16,
    9: np.uint16,
    10: np.uint32,
    11: np.uint64,
}
_FLAG_OF = {np.dtype(t): f for f, t in _TYPE_FLAGS.items()}


def save(fname: str | os.PathLike[str], data: NDArray | Sequence[NDArray] | Mapping[str, NDArray]) -> None:
    """Write one array, a list of arrays or a dict of named arrays (``mx.nd.save``)."""
    if isinstance(data, NDArray):
        names, arrays = [], [data]
    elif isinstance(data, Mapping):
        names, arrays = list(data), list(data.values())
        if not all(isinstance(k, str) for k in names):
            raise TypeError("nd.save: the keys of a dict must be strings")
    elif isinstance(data, (list, tuple)):
        names, arrays = [], list(data)
    else:
        raise TypeError(f"nd.save: data must be an NDArray, a list of NDArrays or a dict of them, got {type(data).__name__}")
    if not all(isinstance(a, NDArray) for a in arrays):
        raise TypeError("nd.save: every value must be an NDArray")
    parts = [struct.pack("<QQQ", _LIST_MAGIC, 0, len(arrays))]
    for a in arrays:
        value = a.asnumpy()  # waits for the array's pending writes (and raises their error)
        flag = _FLAG_OF.get(value.dtype)
        if flag is None:
            raise TypeError(f"nd.save: MXNet's format has no type for dtype {value.dtype}")
        parts.append(struct.pack(f"<IiI{value.ndim}q", _V2_MAGIC, 0, value.ndim, *value.shape))
        parts.append(struct.pack("<iii", _CPU, 0, flag))
        parts.append(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False).tobytes())
    parts.append(struct.pack("<Q", len(names)))
    for name in names:
        raw = name.encode()
        parts.append(struct.pack("<Q", len(raw)) + raw)
    with open(fname, "wb") as f:
        f.write(b"".join(parts))


def load(fname: str | os.PathLike[str]) -> list[NDArray] | dict[str, NDArray]:
    """Read a ``.params`` file: a dict when it names its arrays, else a list (``mx.nd.load``)."""
    try:
        mode = os.stat(fname).st_mode
    except OSError as e:
        raise MXNetError(f"{fname}: cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):  # a FIFO would block, /dev/zero never end
        raise MXNetError(f"{fname}: not a regular file, not an MXNet .params file")
    with open(fname, "rb") as f:
        return _read(f.read(), str(fname))


def load_frombuffer(buf: bytes | bytearray | memoryview) -> list[NDArray] | dict[str, NDArray]:
    """:func:`load` from the file's bytes (``mx.nd.load_frombuffer``)."""
    return _read(bytes(buf), "buffer")


class _Reader:
    def __init__(self, raw: bytes, source: str) -> None:
        self.raw, self.pos, self.source = raw, 0, source

    def take(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.raw):
            raise MXNetError(f"{self.source}: not an MXNet .params file, or cut short (at byte {self.pos} of {len(self.raw)})")
        values = struct.unpack_from(fmt, self.raw, self.pos)
        self.pos += size
        return values

    @property
    def left(self) -> int:
        return len(self.raw) - self.pos

    def count(self, what: str, per_item: int) -> int:
        """A uint64 count of items of at least ``per_item`` bytes, checked against the bytes left."""
        at = self.pos
        (n,) = self.take("<Q")
        if n * per_item > self.left:
            raise MXNetError(
                f"{self.source}: {what} {n} at byte {at} cannot fit in the {self.left} bytes left (a corrupt or hostile file)"
            )
        return int(n)

    def array(self, i: int) -> NDArray:
        at = self.pos
        magic, stype = self.take("<Ii")
        if magic not in (_V2_MAGIC, _V3_MAGIC):
            raise MXNetError(
                f"{self.source}: array {i} at byte {at} starts with {magic:#x}, not an MXNet array (legacy files are not read)"
            )
        if stype != 0:
            raise MXNetError(f"{self.source}: array {i} is sparse (storage type {stype}); opprof holds dense arrays only")
        (ndim,) = self.take("<i")
        if ndim > _MAX_NDIM or 8 * max(ndim, 0) > self.left:
            raise MXNetError(f"{self.source}: array {i} at byte {at} has {ndim} dimensions, which cannot be (a corrupt file)")
        dims_at = self.pos
        shape = self.take(f"<{ndim}q") if ndim > 0 else ()
        if any(d < 0 for d in shape):
            raise MXNetError(f"{self.source}: array {i} has a negative dimension in its shape {shape} (at byte {dims_at})")
        if ndim < 0 or (ndim == 0 and magic == _V2_MAGIC):  # (-1: MXNet's NumPy mode's unknown shape)
            return array(np.zeros((0,), dtype=np.float32))  # MXNet's "none" array: no context, no data
        _dev_type, _dev_id, flag = self.take("<iii")
        dtype = _TYPE_FLAGS.get(flag)
        if dtype is None:
            raise MXNetError(f"{self.source}: array {i} has type flag {flag}, which opprof does not know")
        dt = np.dtype(dtype).newbyteorder("<")
        n = math.prod(shape)  # Python ints: a product past int64 is not wrapped round
        if n * dt.itemsize > self.left:
            raise MXNetError(
                f"{self.source}: array {i} of shape {shape} is cut short (needs {n * dt.itemsize} bytes at byte {self.pos}, "
                f"{self.left} left)"
            )
        value: np.ndarray = np.frombuffer(self.raw, dtype=dt, count=n, offset=self.pos).reshape(shape).astype(dtype)
        self.pos += n * dt.itemsize
        return array(value, dtype=value.dtype)


def _read(raw: bytes, source: str) -> list[NDArray] | dict[str, NDArray]:
    r = _Reader(raw, source)
    magic, _reserved = r.take("<QQ")
    if magic != _LIST_MAGIC:
        raise MXNetError(f"{source}: not an MXNet .params file (magic {magic:#x}, expected {_LIST_MAGIC:#x})")
    count = r.count("an array count of", 12)  # an array is at least its magic, storage type and ndim
    arrays = [r.array(i) for i in range(count)]
    n_names = r.count("a name count of", 8)
    names = []
    for _ in range(n_names):
        at = r.pos
        (length,) = r.take("<Q")
        if length > r.left:
            raise MXNetError(f"{source}: a name at byte {at} is cut short ({length} bytes, {r.left} left)")
        names.append(raw[r.pos : r.pos + length].decode("utf-8", errors="replace"))
        r.pos += length
    if names and len(names) != len(arrays):
        raise MXNetError(f"{source}: {len(names)} names for {len(arrays)} arrays")
    return dict(zip(names, arrays, strict=True)) if names else arrays
