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
from .ndarray import NDArray, _sync_batch_norm, check_nd, invoke, invoke_multi
from .ops import Attrs, OperatorError, Shape

__all__ = [
    "AdaptiveAvgPooling2D",
    "SyncBatchNorm",
    "allclose",
    "dequantize",
    "index_copy",
    "isfinite",
    "isinf",
    "isnan",
    "quantize",
]


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


SyncBatchNorm = _sync_batch_norm


# ---------------------------------------------------------------------------- AdaptiveAvgPooling2D
def _adaptive_windows(isize: int, osize: int) -> list[tuple[int, int]]:
    """Output position o averages inputs ``floor(o * isize / osize)`` to ``ceil((o + 1) * isize / osize)``."""
    return [((o * isize) // osize, -((-(o + 1) * isize) // osize)) for o in range(osize)]


def _adaptive_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    shape = shapes[0]
    if len(shape) != 4:
        raise OperatorError(f"AdaptiveAvgPooling2D: data must be 4-D (batch, channel, height, width), got shape {shape}")
    oh, ow = a["output_size"]
    if oh < 1 or ow < 1:
        raise OperatorError(f"AdaptiveAvgPooling2D: output_size must be positive, got {(oh, ow)} (data shape {shape})")
    return (*shape[:2], oh, ow), dtypes[0]


def _adaptive_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    x = ins[0]
    oh, ow = a["output_size"]
    for i, (h0, h1) in enumerate(_adaptive_windows(x.shape[2], oh)):
        for j, (w0, w1) in enumerate(_adaptive_windows(x.shape[3], ow)):
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3), dtype=np.float64)


def _adaptive_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    x = ins[0]
    oh, ow = a["output_size"]
    gx = np.zeros(x.shape, np.float64)
    for i, (h0, h1) in enumerate(_adaptive_windows(x.shape[2], oh)):
        for j, (w0, w1) in enumerate(_adaptive_windows(x.shape[3], ow)):
            gx[:, :, h0:h1, w0:w1] += g[:, :, i, j, None, None] / ((h1 - h0) * (w1 - w0))
    return [gx]


_ADAPTIVE = _ops.register("_contrib_AdaptiveAvgPooling2D", _adaptive_forward, _adaptive_backward, _adaptive_infer)


def AdaptiveAvgPooling2D(data: NDArray, output_size: Any = 1, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """Average pooling of a (batch, channel, height, width) array to ``output_size`` (an int: square).

    Output position ``(i, j)`` averages the input window from ``floor(i * H / oh)`` to
    ``ceil((i + 1) * H / oh)`` (and likewise along the width), so windows may overlap.
    """
    size: tuple[int, ...]
    if isinstance(output_size, (int, np.integer)):
        size = (int(output_size), int(output_size))
    else:
        size = tuple(int(n) for n in output_size)
        if len(size) == 1:
            size = (size[0], size[0])
    if len(size) != 2:
        raise OperatorError(f"AdaptiveAvgPooling2D: output_size must be an int or a pair, got {output_size!r}")
    return invoke(_ADAPTIVE, (check_nd("AdaptiveAvgPooling2D", data),), {"output_size": size}, out=out)


# ---------------------------------------------------------------------------- quantize, dequantize
_QUANTIZED = {"int8": np.dtype(np.int8), "uint8": np.dtype(np.uint8)}


def _range_check(name: str, shapes: Sequence[Shape]) -> None:
    if len(shapes) != 3 or any(int(np.prod(s)) != 1 for s in shapes[1:]):
        raise OperatorError(f"{name}: takes data, min_range and max_range (one value each), got shapes {list(shapes)}")


def _quantize_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> list[tuple[Shape, np.dtype]]:
    _range_check("quantize", shapes)
    f32 = np.dtype(np.float32)
    return [(shapes[0], _QUANTIZED[a["out_type"]]), ((1,), f32), ((1,), f32)]


def _quantize_forward(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], a: Attrs) -> None:
    x = ins[0].astype(np.float32)
    lo, hi = np.float32(ins[1].reshape(-1)[0]), np.float32(ins[2].reshape(-1)[0])
    q, omin, omax = outs
    if a["out_type"] == "uint8":
        scale = np.float32(255.0) / (hi - lo)
        np.copyto(q, np.clip(np.trunc((x - lo) * scale + np.float32(0.5)), 0, 255), casting="unsafe")
        omin[...], omax[...] = lo, hi
    else:  # int8, zero-centred: the range is symmetric about 0
        real = max(abs(lo), abs(hi))
        scale = np.float32(127.0) / real
        np.copyto(q, np.trunc(np.sign(x) * np.minimum(np.abs(x) * scale + np.float32(0.5), 127)), casting="unsafe")
        omin[...], omax[...] = -real, real


_QUANTIZE = _ops.register_multi("_contrib_quantize", _quantize_forward, None, _quantize_infer)


def quantize(data: NDArray, min_range: NDArray, max_range: NDArray, out_type: str = "uint8", **kwargs: Any) -> list[NDArray]:
    """``data`` (float32) quantized to ``out_type`` (int8 or uint8) over ``[min_range, max_range]``.

    Returns ``[quantized, min, max]``: for uint8 the range as given, for int8 the symmetric range
    ``±max(|min_range|, |max_range|)`` (zero stays exactly 0).
    """
    if out_type not in _QUANTIZED:
        raise OperatorError(f"quantize: out_type must be int8 or uint8, got {out_type!r}")
    ins = tuple(check_nd("quantize", x) for x in (data, min_range, max_range))
    return invoke_multi(_QUANTIZE, ins, {"out_type": out_type})


def _dequantize_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    _range_check("dequantize", shapes)
    if dtypes[0] not in _QUANTIZED.values():
        raise OperatorError(f"dequantize: data must be int8 or uint8, got {dtypes[0]} (shape {shapes[0]})")
    return shapes[0], np.dtype(np.float32)


def _dequantize_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    q = ins[0].astype(np.float32)
    lo, hi = np.float32(ins[1].reshape(-1)[0]), np.float32(ins[2].reshape(-1)[0])
    if ins[0].dtype == np.uint8:
        np.copyto(out, q * ((hi - lo) / np.float32(255.0)) + lo, casting="unsafe")
    else:
        np.copyto(out, q * (max(abs(lo), abs(hi)) / np.float32(127.0)), casting="unsafe")


_DEQUANTIZE = _ops.register("_contrib_dequantize", _dequantize_forward, None, _dequantize_infer)


def dequantize(
    data: NDArray,
    min_range: NDArray,
    max_range: NDArray,
    out_type: str = "float32",
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """The float32 values of ``data`` (int8 or uint8) quantized over ``[min_range, max_range]``."""
    if out_type != "float32":
        raise OperatorError(f"dequantize: out_type must be float32, got {out_type!r}")
    ins = tuple(check_nd("dequantize", x) for x in (data, min_range, max_range))
    return invoke(_DEQUANTIZE, ins, {}, out=out, allow_new_dtype=True)
