"""MXNet's ``mx.test_utils`` for dense NDArrays: the helpers MXNet's own unit tests import.

MXNet's imperative tests (``test_ndarray``, ``test_operator``, ``test_autograd``...) compare
results with ``assert_almost_equal``, draw shapes with ``rand_shape_nd``, and set environment
variables with ``environment``. With this module they run against opprof changed only at their
imports. It is opprof's own code, written to MXNet 1.9's documented behaviour: dense storage and
the CPU only (a sparse ``stype`` is refused), and nothing that needs the symbolic API
(``check_numeric_gradient``, ``check_symbolic_forward``... are absent).

Tolerances, as in MXNet: where ``rtol``/``atol`` are not given, the comparison of two arrays uses
the loosest default of their two dtypes (float16 1e-2/1e-1, float32 1e-4/1e-3, float64
1e-5/1e-20, integers and bools exact); a tolerance may also be a ``{dtype: float}`` dict.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import numpy.random as rnd

from .context import Context, current_context
from .ndarray import NDArray, array, waitall
from .util import use_np

__all__ = [
    # What ``from mxnet.test_utils import *`` also hands its importers, and MXNet's tests use
    # (test_autograd's ``mx.nd...``, test_operator's ``logging``/``sys``/``npt``).
    "Context",
    "array",
    "current_context",
    "logging",
    "mx",  # noqa: F822 - given by __getattr__ below
    "np",
    "use_np",
    "npt",  # noqa: F822 - NumPy's testing module, loaded by __getattr__ on first use (it is slow to import)
    "os",
    "rnd",
    "sys",
    "time",
    # The helpers.
    "almost_equal",
    "assert_allclose",
    "assert_almost_equal",
    "assert_almost_equal_ignore_nan",
    "assert_almost_equal_with_err",
    "assert_exception",
    "collapse_sum_like",
    "default_atols",
    "default_context",
    "default_dtype",
    "default_numeric_eps",
    "default_rtols",
    "discard_stderr",
    "effective_dtype",
    "environment",
    "get_atol",
    "get_etol",
    "get_rtol",
    "get_tolerance",
    "get_tols",
    "np_reduce",
    "rand_coord_2d",
    "rand_ndarray",
    "rand_shape_2d",
    "rand_shape_3d",
    "rand_shape_nd",
    "random_arrays",
    "random_sample",
    "random_uniform_arrays",
    "retry",
    "same",
    "same_array",
    "set_default_context",
]

_F = TypeVar("_F", bound=Callable[..., Any])
Tol = float | dict[Any, float] | None


def __getattr__(name: str) -> Any:
    """``mx`` and ``npt``, names MXNet's tests get through ``from mxnet.test_utils import *``.

    ``mx`` is the root package, looked up (it is loaded, being this module's parent) rather than
    imported, so this layer still imports nothing above it. ``npt`` (``numpy.testing``) is
    imported on first use only: it would double the time this module takes to import.
    """
    if name == "mx":
        return sys.modules[__name__.partition(".")[0]]
    if name == "npt":
        import numpy.testing

        return numpy.testing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------- contexts, dtypes
_default_ctx: Context | None = None


def default_context() -> Context:
    """The context tests create arrays in: ``cpu()`` unless :func:`set_default_context` chose one."""
    return _default_ctx if _default_ctx is not None else current_context()


def set_default_context(ctx: Context) -> None:
    """Choose what :func:`default_context` returns (opprof makes only CPU contexts)."""
    global _default_ctx
    if not isinstance(ctx, Context):
        raise TypeError(f"set_default_context needs a Context such as cpu(), got {type(ctx).__name__}")
    _default_ctx = ctx


def default_dtype() -> type:
    """The dtype of arrays that tests draw at random."""
    return np.float32


def default_rtols() -> dict[np.dtype, float]:
    """Relative tolerance per dtype: floats by their precision, integers and bools exact."""
    return {**_EXACT, np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-5}


def default_atols() -> dict[np.dtype, float]:
    """Absolute tolerance per dtype: floats by their precision, integers and bools exact."""
    return {**_EXACT, np.dtype(np.float16): 1e-1, np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-20}


_EXACT = {np.dtype(t): 0.0 for t in (np.bool_, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64)}


def default_numeric_eps() -> dict[np.dtype, float]:
    """Finite-difference steps per float dtype (powers of two, so the step itself is exact)."""
    return {np.dtype(np.float16): 2.0**-6, np.dtype(np.float32): 2.0**-9, np.dtype(np.float64): 2.0**-14}


def effective_dtype(dat: Any) -> np.dtype:
    """The dtype whose tolerance applies to ``dat``: its own (on the CPU nothing computes narrower)."""
    return np.dtype(dat.dtype)


def _default_for(dtype: np.dtype, table: dict[np.dtype, float]) -> float:
    if dtype in table:
        return table[dtype]
    if dtype.kind in "biu":  # int16, uint16...: exact, like the other integers
        return 0.0
    return table[np.dtype(np.float64)] if dtype.itemsize >= 8 else table[np.dtype(np.float32)]


def get_tolerance(dat: Any, tol: Tol, default_tol: dict[np.dtype, float]) -> float:
    """``tol`` if it is a number; else its entry for ``dat``'s dtype, else the default's."""
    if isinstance(tol, dict):
        dtype = effective_dtype(dat)
        return float(tol[dtype]) if dtype in tol else _default_for(dtype, default_tol)
    if tol is None:
        return _default_for(effective_dtype(dat), default_tol)
    return float(tol)


def get_tols(x: Any, y: Any, rtol: Tol, atol: Tol) -> tuple[float, float]:
    """The (rtol, atol) for comparing ``x`` with ``y``: the looser of the two arrays' defaults."""
    x = x if hasattr(x, "dtype") else np.asarray(x)  # a number or a list: its NumPy dtype decides
    y = y if hasattr(y, "dtype") else np.asarray(y)
    r = max(get_tolerance(x, rtol, default_rtols()), get_tolerance(y, rtol, default_rtols()))
    a = max(get_tolerance(x, atol, default_atols()), get_tolerance(y, atol, default_atols()))
    return r, a


def get_atol(atol: float | None = None, dtype: Any = np.float64) -> float:
    """``atol``, or the default absolute tolerance of ``dtype`` (float64's unless told)."""
    return _default_for(np.dtype(dtype), default_atols()) if atol is None else atol


def get_rtol(rtol: float | None = None, dtype: Any = np.float64) -> float:
    """``rtol``, or the default relative tolerance of ``dtype`` (float64's unless told)."""
    return _default_for(np.dtype(dtype), default_rtols()) if rtol is None else rtol


def get_etol(etol: float | None = None) -> float:
    """``etol``, the share of elements allowed to differ; none unless told."""
    return 0.0 if etol is None else etol


# ---------------------------------------------------------------------------- random data
def random_arrays(*shapes: Sequence[int]) -> Any:
    """Standard-normal float32 NumPy arrays, one per shape; a lone shape gives the array itself."""
    arrays: list[np.ndarray] = [np.array(np.random.randn(*s), dtype=default_dtype()) for s in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def random_uniform_arrays(*shapes: Sequence[int], low: float = 0.0, high: float = 1.0, dtype: Any = None) -> list[np.ndarray]:
    """Uniform [low, high) NumPy arrays, one per shape (always a list)."""
    dt = default_dtype() if dtype is None else dtype
    return [np.random.uniform(low, high, size=s).astype(dt) for s in shapes]


def random_sample(population: Sequence[Any], k: int) -> list[Any]:
    """``k`` distinct elements of ``population`` in random order (drawn from NumPy's seeded RNG)."""
    if not 0 <= k <= len(population):
        raise ValueError(f"random_sample: k={k} is not between 0 and the population size {len(population)}")
    pool = list(population)
    np.random.shuffle(pool)
    return pool[:k]


def _check_dense(stype: str) -> None:
    if stype != "default":
        raise NotImplementedError(
            f"stype={stype!r}: opprof has dense NDArrays only; sparse storage ('csr', 'row_sparse') is not supported"
        )


def rand_ndarray(
    shape: int | Sequence[int],
    stype: str = "default",
    density: float | None = None,
    dtype: Any = None,
    modifier_func: Callable[..., Any] | None = None,
    shuffle_csr_indices: bool = False,
    distribution: str | None = None,
    ctx: Context | None = None,
) -> NDArray:
    """A dense NDArray of standard-normal values (cast to ``dtype``); sparse ``stype`` is refused."""
    _check_dense(stype)
    dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    return array(random_arrays(dims), ctx=ctx or default_context(), dtype=dtype)


def rand_shape_2d(dim0: int = 10, dim1: int = 10, allow_zero_size: bool = False) -> tuple[int, int]:
    """A random 2-d shape, each side in [1, dim] (in [0, dim] if ``allow_zero_size``)."""
    low = 0 if allow_zero_size else 1
    return int(rnd.randint(low, dim0 + 1)), int(rnd.randint(low, dim1 + 1))


def rand_shape_3d(dim0: int = 10, dim1: int = 10, dim2: int = 10, allow_zero_size: bool = False) -> tuple[int, int, int]:
    """A random 3-d shape, each side in [1, dim] (in [0, dim] if ``allow_zero_size``)."""
    low = 0 if allow_zero_size else 1
    return int(rnd.randint(low, dim0 + 1)), int(rnd.randint(low, dim1 + 1)), int(rnd.randint(low, dim2 + 1))


def rand_shape_nd(num_dim: int, dim: int = 10, allow_zero_size: bool = False) -> tuple[int, ...]:
    """A random shape of ``num_dim`` sides, each in [1, dim] (in [0, dim] if ``allow_zero_size``)."""
    low = 0 if allow_zero_size else 1
    return tuple(int(n) for n in rnd.randint(low, dim + 1, size=num_dim))


def rand_coord_2d(x_low: int, x_high: int, y_low: int, y_high: int) -> tuple[int, int]:
    """A random point with x in [x_low, x_high) and y in [y_low, y_high)."""
    return int(np.random.randint(x_low, x_high, dtype=np.int64)), int(np.random.randint(y_low, y_high, dtype=np.int64))


# ---------------------------------------------------------------------------- references
def np_reduce(dat: np.ndarray, axis: int | Sequence[int] | None, keepdims: bool, numpy_reduce_func: Callable[..., Any]) -> Any:
    """Reduce ``dat`` over ``axis`` one axis at a time with ``numpy_reduce_func`` (e.g. ``np.sum``).

    Tests use it as the reference for MXNet's reductions, whose ``axis`` may be a list and whose
    ``keepdims`` keeps every reduced axis as a 1.
    """
    axes = list(range(dat.ndim)) if axis is None else [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    axes = [int(a) % dat.ndim if dat.ndim else int(a) for a in axes]
    out = dat
    for a in sorted(axes, reverse=True):
        out = numpy_reduce_func(out, axis=a)
    if keepdims:
        out = np.reshape(out, [1 if i in axes else n for i, n in enumerate(dat.shape)])
    return out


def collapse_sum_like(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Sum ``a`` down to ``shape``, the shape it was broadcast from (the gradient of a broadcast)."""
    shape = tuple(shape)
    if len(a.shape) < len(shape):
        raise ValueError(f"collapse_sum_like: {a.shape} has fewer axes than {shape}")
    if a.size == 0 or int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype=a.dtype)
    lead = len(a.shape) - len(shape)
    axes = list(range(lead))
    for i, n in enumerate(shape):
        if n != a.shape[lead + i]:
            if n != 1:
                raise ValueError(f"collapse_sum_like: {shape} does not broadcast to {a.shape}")
            axes.append(lead + i)
    return np.sum(a, axis=tuple(axes)).reshape(shape)


# ---------------------------------------------------------------------------- comparisons
def _numpy(x: Any) -> np.ndarray:
    """A NumPy array of ``x`` (an NDArray waits for its value)."""
    return x.asnumpy() if isinstance(x, NDArray) else np.asarray(x)


def same(a: Any, b: Any) -> bool:
    """Whether two arrays have the same shape and exactly the same elements."""
    return bool(np.array_equal(_numpy(a), _numpy(b)))


def same_array(array1: NDArray, array2: NDArray) -> bool:
    """Whether two NDArrays share memory: a change written through one shows in the other."""
    array1[:] += 1
    shared = same(array1, array2)
    array1[:] -= 1
    return shared and same(array1, array2)


def _check_shapes(a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        raise AssertionError(f"shapes differ: a.shape = {a.shape}, b.shape = {b.shape}")


def almost_equal(
    a: Any, b: Any, rtol: float | None = None, atol: float | None = None, equal_nan: bool = False, use_broadcast: bool = True
) -> bool:
    """Whether ``|a - b| <= atol + rtol * |b|`` everywhere (float64's defaults where not given)."""
    a, b = _numpy(a), _numpy(b)
    if not use_broadcast:
        _check_shapes(a, b)
    return bool(np.allclose(a, b, rtol=get_rtol(rtol), atol=get_atol(atol), equal_nan=equal_nan))


def _violation(a: np.ndarray, b: np.ndarray, rtol: float, atol: float, equal_nan: bool) -> np.ndarray:
    """How many times over its tolerance each element is (0 where equal, inf where NaN meets non-NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(a == b, 0.0, np.abs(a.astype(np.float64) - b.astype(np.float64)))
        v = diff / (atol + rtol * np.abs(b.astype(np.float64)) + 1e-20)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    v = np.where(nan_a | nan_b, np.inf, v)
    if equal_nan:
        v = np.where(nan_a & nan_b, 0.0, v)
    return v


def assert_almost_equal(
    a: Any,
    b: Any,
    rtol: Tol = None,
    atol: Tol = None,
    names: tuple[str, str] = ("a", "b"),
    equal_nan: bool = False,
    use_broadcast: bool = True,
    mismatches: tuple[int, int] = (10, 10),
) -> None:
    """Raise AssertionError unless ``|a - b| <= atol + rtol * |b|`` everywhere.

    Tolerances default by dtype (see the module docstring). NaN equals NaN only with ``equal_nan``.
    Bool arrays must match exactly. The message names the worst element, the share of elements
    out of tolerance and up to ``mismatches[0]`` of the worst locations.
    """
    rtol_, atol_ = get_tols(a, b, rtol, atol)
    a, b = _numpy(a), _numpy(b)
    if not use_broadcast:
        _check_shapes(a, b)
    if a.dtype == np.bool_ and b.dtype == np.bool_:
        if a.shape != b.shape or not np.array_equal(a, b):
            differ = np.argwhere(a != b) if a.shape == b.shape else np.zeros((0, a.ndim), int)
            detail = f"; {len(differ)} of {a.size} differ, first at {tuple(int(i) for i in differ[0])}" if len(differ) else ""
            raise AssertionError(f"bool arrays are not equal (shapes {a.shape}, {b.shape}{detail})")
        return
    try:
        a, b = np.broadcast_arrays(a, b)
    except ValueError:
        raise AssertionError(f"shapes {a.shape} and {b.shape} do not broadcast together") from None
    if np.allclose(a, b, rtol=rtol_, atol=atol_, equal_nan=equal_nan):
        return
    v = _violation(a, b, rtol_, atol_, equal_nan)
    bad = int(np.count_nonzero(v > 1)) or 1
    order = np.argsort(-v, axis=None, kind="stable")[: max(mismatches[0], 1)]
    where = [tuple(int(i) for i in np.unravel_index(k, v.shape)) for k in order if v.flat[k] > 1]
    worst = where[0] if where else tuple(int(i) for i in np.unravel_index(int(order[0]), v.shape))
    n0, n1 = names
    lines = [
        f"Error {float(v[worst]):f} exceeds tolerance rtol={rtol_:e}, atol={atol_:e}"
        f" (mismatch {100.0 * bad / max(a.size, 1):f}%, {bad} of {a.size})."
        f" Location of maximum error: {worst}, {n0}={a[worst]}, {n1}={b[worst]}"
    ]
    lines += [f"  {idx}: {n0}={a[idx]}, {n1}={b[idx]}" for idx in where[1:]]
    with np.printoptions(threshold=20, suppress=True):
        lines += [f" {n0}: {a!r}", f" {n1}: {b!r}"]
    raise AssertionError("\n".join(lines))


def assert_allclose(a: Any, b: Any, rtol: Tol = 1e-07, atol: Tol = 0, equal_nan: bool = True) -> None:
    """:func:`assert_almost_equal` with NumPy's defaults (tight rtol, no atol, NaN equals NaN)."""
    assert_almost_equal(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def assert_almost_equal_with_err(
    a: Any,
    b: Any,
    rtol: Tol = None,
    atol: Tol = None,
    etol: float | None = None,
    names: tuple[str, str] = ("a", "b"),
    equal_nan: bool = False,
    mismatches: tuple[int, int] = (10, 10),
) -> None:
    """:func:`assert_almost_equal`, except that a share ``etol`` of elements may be out of tolerance."""
    share = get_etol(etol)
    if share <= 0:
        assert_almost_equal(a, b, rtol=rtol, atol=atol, names=names, equal_nan=equal_nan, mismatches=mismatches)
        return
    rtol_, atol_ = get_tols(a, b, rtol, atol)
    x, y = _numpy(a), _numpy(b)
    close = np.isclose(x, y, rtol=rtol_, atol=atol_, equal_nan=equal_nan)
    if 1 - np.count_nonzero(close) / max(close.size, 1) > share:
        assert_almost_equal(x, y, rtol=rtol_, atol=atol_, names=names, equal_nan=equal_nan, mismatches=mismatches)


def assert_almost_equal_ignore_nan(
    a: Any, b: Any, rtol: Tol = None, atol: Tol = None, names: tuple[str, str] = ("a", "b")
) -> None:
    """:func:`assert_almost_equal` on the elements where neither array is NaN."""
    x, y = np.array(_numpy(a)), np.array(_numpy(b))
    x, y = np.broadcast_arrays(x, y)
    x, y = x.copy(), y.copy()
    nan = np.isnan(x) | np.isnan(y)
    x[nan] = 0
    y[nan] = 0
    assert_almost_equal(x, y, rtol, atol, names)


def assert_exception(
    f: Callable[..., Any], exception_type: type[BaseException] | tuple[type[BaseException], ...], *args: Any, **kwargs: Any
) -> None:
    """Call ``f(*args, **kwargs)``; raise AssertionError unless it raises ``exception_type``.

    An array's error may surface only when its value is read, so ``f`` should read it
    (``asnumpy()``, ``wait_to_read()``).
    """
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    names = exception_type.__name__ if isinstance(exception_type, type) else " or ".join(t.__name__ for t in exception_type)
    raise AssertionError(f"{getattr(f, '__name__', f)!s} did not raise {names}")


def retry(n: int) -> Callable[[_F], _F]:
    """Decorate a stochastic test: run it up to ``n`` times, failing only if every run fails an assertion."""
    if n < 1:
        raise ValueError(f"retry needs n >= 1, got {n}")

    def decorate(f: _F) -> _F:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for i in range(n):
                try:
                    return f(*args, **kwargs)
                except AssertionError:
                    if i == n - 1:
                        raise
                    waitall()
            return None

        wrapper.__name__ = f.__name__
        wrapper.__doc__ = f.__doc__
        return wrapper  # type: ignore[return-value]

    return decorate


# ---------------------------------------------------------------------------- the process
@contextmanager
def discard_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (output of native code too) for the ``with`` body."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is not a file (pytest capture, a notebook)
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            sys.stderr.flush()
            os.dup2(null.fileno(), fd)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, fd)
    finally:
        os.close(saved)


@contextmanager
def environment(*args: Any) -> Iterator[None]:
    """Set environment variables for the ``with`` body, then restore them, even on an error.

    ``environment(name, value)`` or ``environment({name: value, ...})``; a value of ``None``
    unsets the variable. Pending operators are waited for before the old values return, since
    they may read the environment while they run.
    """
    if len(args) == 1 and isinstance(args[0], dict):
        changes: dict[str, str | None] = dict(args[0])
    elif len(args) == 2:
        changes = {args[0]: args[1]}
    else:
        raise TypeError("environment() takes one dict {name: value} or two arguments: name, value")
    saved = {name: os.environ.get(name) for name in changes}

    def apply(values: dict[str, str | None]) -> None:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    apply(changes)
    try:
        yield
    finally:
        try:
            waitall()
        finally:
            apply(saved)
