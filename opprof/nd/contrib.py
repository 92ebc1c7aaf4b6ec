"""MXNet's ``mx.nd.contrib``: the contributed operators ported code uses most.

``isnan``/``isinf``/``isfinite`` are compositions of element-wise comparisons, as in MXNet's own
Python; ``index_copy`` and ``allclose`` are operators (one engine push each, traced under MXNet's
names ``_contrib_index_copy`` and ``_contrib_allclose``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import ops as _ops
from .ndarray import NDArray, check_nd, invoke
from .ops import Attrs, OperatorError, Shape

__all__ = ["allclose", "index_copy", "isfinite", "isinf", "isnan"]


def isnan(data: NDArray) -> NDArray:
    """1 where ``data`` is NaN, else 0 (NaN is the one value unequal to itself)."""
    return data != data


def isinf(data: NDArray) -> NDArray:
    """1 where ``data`` is +inf or -inf, else 0."""
    return data.abs() == np.inf


def isfinite(data: NDArray) -> NDArray:
    """1 where ``data`` is neither infinite nor NaN, else 0."""
    return (data.abs() != np.inf) * (data == data)


# ---------------------------------------------------------------------------- index_copy
def _index_copy_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    old, index, new = shapes
    if len(index) != 1 or len(new) != len(old) or new[1:] != old[1:] or new[0] != index[0]:
        raise OperatorError(
            f"index_copy: old {old}, index {index} and new {new} do not fit: index must be 1-D, new must be "
            "(len(index),) + old.shape[1:]"
        )
    return old, dtypes[0]


def _index_copy_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    old, index, new = ins
    np.copyto(out, old)
    out[index.astype(np.int64)] = new


def _index_copy_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    index = ins[1].astype(np.int64)
    g_old = g.copy()
    g_old[index] = 0  # those rows were overwritten: the old values there had no effect
    return [g_old, None, g[index]]


_INDEX_COPY = _ops.register("_contrib_index_copy", _index_copy_forward, _index_copy_backward, _index_copy_infer)


def index_copy(
    old_tensor: NDArray, index_vector: NDArray, new_tensor: NDArray, out: NDArray | None = None, **kwargs: Any
) -> NDArray:
    """``old_tensor`` with the rows ``index_vector`` replaced by the rows of ``new_tensor``."""
    ins = tuple(check_nd("index_copy", x) for x in (old_tensor, index_vector, new_tensor))
    return invoke(_INDEX_COPY, ins, {}, out=out)


# ---------------------------------------------------------------------------- allclose
def _allclose_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    out[...] = np.allclose(ins[0], ins[1], rtol=a["rtol"], atol=a["atol"], equal_nan=a["equal_nan"])


def _allclose_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    _ops.broadcast_shape(name, shapes, dtypes, a)  # a and b must broadcast together
    return (), np.dtype(np.float32)  # 0-d, as MXNet's: code formats it as one value


_ALLCLOSE = _ops.register("_contrib_allclose", _allclose_forward, None, _allclose_infer)


def allclose(
    a: NDArray,
    b: NDArray,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    equal_nan: bool = True,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """An array of shape (1,): 1 if every ``|a - b| <= atol + rtol * |b|``, else 0 (as ``numpy.allclose``)."""
    attrs = {"rtol": float(rtol), "atol": float(atol), "equal_nan": bool(equal_nan)}
    return invoke(_ALLCLOSE, (check_nd("allclose", a), check_nd("allclose", b)), attrs, out=out)
