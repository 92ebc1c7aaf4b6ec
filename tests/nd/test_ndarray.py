"""NDArray behaviour through the public API, checked against NumPy on both engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opprof as mx
from tests.helpers import record_pushes

# Every test on both engines (the ``engine`` fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("engine")

# ---------------------------------------------------------------------------- fixtures and helpers


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def assert_nd(actual: Any, expected: Any, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    """``actual`` is an NDArray equal to ``expected`` in shape and (approximately) in value."""
    assert isinstance(actual, mx.nd.NDArray)
    expected = np.asarray(expected)
    got = actual.asnumpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------- creation


def test_array_from_list_is_float32() -> None:
    x = mx.nd.array([[1, 2, 3], [4, 5, 6]])
    assert x.dtype == np.float32
    assert x.shape == (2, 3)
    np.testing.assert_array_equal(x.asnumpy(), [[1, 2, 3], [4, 5, 6]])
    assert x.asnumpy().dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64, np.uint8])
def test_array_from_numpy_keeps_dtype(dtype: type) -> None:
    src = np.arange(6).reshape(2, 3).astype(dtype)
    x = mx.nd.array(src)
    assert x.dtype == dtype
    assert x.asnumpy().dtype == dtype
    np.testing.assert_array_equal(x.asnumpy(), src)


def test_array_copies_its_source() -> None:
    src = np.ones(3)
    x = mx.nd.array(src)
    src[:] = 7
    np.testing.assert_array_equal(x.asnumpy(), [1, 1, 1])


def test_array_explicit_dtype_and_from_ndarray() -> None:
    x = mx.nd.array([1.5, 2.5], dtype=np.float64)
    assert x.dtype == np.float64
    y = mx.nd.array(x)
    assert y.dtype == np.float64
    x[:] = 0
    np.testing.assert_array_equal(y.asnumpy(), [1.5, 2.5])
    z = mx.nd.array(x, dtype="int32")
    assert z.dtype == np.int32


def test_ones_zeros_full() -> None:
    o = mx.nd.ones((2, 3))
    assert o.dtype == np.float32
    assert_nd(o, np.ones((2, 3)))
    z = mx.nd.zeros(4, dtype="int32")
    assert z.shape == (4,)
    assert z.dtype == np.int32
    np.testing.assert_array_equal(z.asnumpy(), np.zeros(4, np.int32))
    f = mx.nd.full((3, 2), 7.5)
    assert f.dtype == np.float32
    assert_nd(f, np.full((3, 2), 7.5))
    f64 = mx.nd.full((2,), -1, dtype=np.float64)
    assert f64.dtype == np.float64
    assert_nd(f64, [-1.0, -1.0])
    assert mx.nd.zeros((0, 3)).shape == (0, 3)
    assert_nd(mx.nd.zeros_like(f64), np.zeros(2))
    assert_nd(mx.nd.ones_like(f), np.ones((3, 2)))


def test_negative_shape_is_rejected() -> None:
    with pytest.raises(ValueError):
        mx.nd.zeros((2, -1))


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((5,), {}, np.arange(5)),
        ((2, 7), {}, np.arange(2, 7)),
        ((1, 2, 0.25), {}, np.arange(1, 2, 0.25)),
        ((10,), {"step": 3}, np.arange(0, 10, 3)),
        ((5, 0, -1), {}, np.arange(5, 0, -1)),
        ((0, 0.3, 0.1), {}, np.arange(0, 0.3, 0.1)),
        ((3, 3), {}, np.arange(3, 3)),
    ],
)
def test_arange(args: tuple[Any, ...], kwargs: dict[str, Any], expected: np.ndarray) -> None:
    x = mx.nd.arange(*args, **kwargs)
    assert x.dtype == np.float32
    assert_nd(x, expected.astype(np.float32))


def test_arange_dtype_and_zero_step() -> None:
    x = mx.nd.arange(4, dtype="int64")
    assert x.dtype == np.int64
    np.testing.assert_array_equal(x.asnumpy(), [0, 1, 2, 3])
    with pytest.raises(ValueError):
        mx.nd.arange(0, 3, 0)


def test_random_uniform_in_range() -> None:
    mx.random.seed(1)
    x = mx.random.uniform(-2, 3, (50, 40))
    assert x.shape == (50, 40)
    assert x.dtype == np.float32
    a = x.asnumpy()
    assert a.min() >= -2 and a.max() <= 3
    assert abs(a.mean() - 0.5) < 0.1
    assert a.std() > 1.0  # not constant
    y = mx.nd.random.uniform(low=0, high=1, shape=(1000,), dtype=np.float64)
    assert y.dtype == np.float64
    b = y.asnumpy()
    assert 0 <= b.min() and b.max() <= 1
    assert abs(b.mean() - 0.5) < 0.05


def test_random_normal_plausible() -> None:
    mx.random.seed(2)
    x = mx.random.normal(3.0, 2.0, (100, 50))
    assert x.shape == (100, 50)
    a = x.asnumpy()
    assert abs(a.mean() - 3.0) < 0.1
    assert abs(a.std() - 2.0) < 0.1
    y = mx.nd.random.normal(shape=(2000,))
    assert abs(y.asnumpy().mean()) < 0.15


def test_random_draws_differ_and_reseed_repeats() -> None:
    mx.random.seed(5)
    a = mx.random.uniform(shape=(20,)).asnumpy()
    b = mx.random.uniform(shape=(20,)).asnumpy()
    assert not np.array_equal(a, b)
    mx.random.seed(5)
    np.testing.assert_array_equal(mx.random.uniform(shape=(20,)).asnumpy(), a)
    np.testing.assert_array_equal(mx.random.uniform(shape=(20,)).asnumpy(), b)
    mx.random.seed(6)
    assert not np.array_equal(mx.random.uniform(shape=(20,)).asnumpy(), a)


def _random_batch(seed: int) -> list[np.ndarray]:
    mx.random.seed(seed)
    arrays = [
        mx.random.uniform(0, 1, (30, 7)),
        mx.random.normal(0, 1, (64,)),
        mx.nd.random.uniform(-5, 5, (4, 4, 4), dtype=np.float64),
        mx.random.normal(10, 0.5, (3, 11)),
        mx.random.uniform(shape=(100,)) * 2 + 1,
    ]
    return [a.asnumpy() for a in arrays]


def test_random_identical_across_engines() -> None:
    mx.set_engine("naive")
    naive = _random_batch(42)
    mx.set_engine("threaded", workers=2)
    threaded = _random_batch(42)
    mx.set_engine("threaded", workers=1)
    threaded1 = _random_batch(42)
    for a, b, c in zip(naive, threaded, threaded1, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert not np.array_equal(_random_batch(43)[0], naive[0])


# ---------------------------------------------------------------------------- NDArray basics


def test_metadata() -> None:
    src = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    x = mx.nd.array(src)
    assert x.shape == (2, 3, 4)
    assert x.dtype == np.float64
    assert x.size == 24
    assert x.ndim == 3
    assert len(x) == 2
    assert x.context == mx.cpu()
    assert_nd(x.T, src.T)
    assert x.T.shape == (4, 3, 2)
    with pytest.raises(TypeError):
        len(mx.nd.array(np.float64(1.0)))


def test_asnumpy_is_a_copy() -> None:
    x = mx.nd.ones((2, 2))
    a = x.asnumpy()
    a[:] = 5
    np.testing.assert_array_equal(x.asnumpy(), np.ones((2, 2)))
    np.testing.assert_array_equal(np.asarray(x), np.ones((2, 2)))


def test_asscalar() -> None:
    assert mx.nd.array([3.5]).asscalar() == 3.5
    assert mx.nd.full((1, 1), 2, dtype="int32").asscalar() == 2
    s = mx.nd.array(np.arange(6.0)).sum()
    assert s.asscalar() == 15.0
    assert float(s) == 15.0
    with pytest.raises(ValueError, match="asscalar"):
        mx.nd.array([1.0, 2.0]).asscalar()
    with pytest.raises(ValueError):
        mx.nd.zeros((2, 2)).asscalar()


def test_wait_to_read() -> None:
    x = mx.nd.ones((50, 50))
    y = x
    for _ in range(20):
        y = y + 1
    y.wait_to_read()
    np.testing.assert_array_equal(y.asnumpy(), np.full((50, 50), 21.0))
    mx.nd.waitall()


def test_copy_is_independent() -> None:
    x = mx.nd.array(np.arange(6.0).reshape(2, 3))
    y = x.copy()
    assert y.shape == x.shape and y.dtype == x.dtype
    x[:] = -1
    x += 10
    np.testing.assert_array_equal(y.asnumpy(), np.arange(6.0).reshape(2, 3))
    y[0, 0] = 100
    np.testing.assert_array_equal(x.asnumpy(), np.full((2, 3), 9.0))


def test_astype_and_copyto() -> None:
    x = mx.nd.array([1.7, -2.2, 3.0])
    i = x.astype("int32")
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i.asnumpy(), np.array([1.7, -2.2, 3.0], np.float32).astype(np.int32))
    dst = mx.nd.zeros(3)
    out = x.copyto(dst)
    assert out is dst
    assert_nd(dst, np.array([1.7, -2.2, 3.0], np.float32))
    with pytest.raises(mx.nd.OperatorError):
        x.copyto(mx.nd.zeros(4))


@pytest.mark.parametrize(
    ("shape", "target", "expected"),
    [
        ((2, 3, 4), (6, 4), (6, 4)),
        ((2, 3, 4), (-1,), (24,)),
        ((2, 3, 4), (4, -1), (4, 6)),
        ((2, 3, 4), (0, -1), (2, 12)),
        ((2, 3, 4), (0, 0, 2, 2), (2, 3, 2, 2)),
        ((2, 3, 4), (-1, 0, 2), (4, 3, 2)),
        ((6,), (2, 3), (2, 3)),
        ((1,), (), ()),
    ],
)
def test_reshape(shape: tuple[int, ...], target: tuple[int, ...], expected: tuple[int, ...]) -> None:
    src = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    x = mx.nd.array(src)
    for y in (x.reshape(target), x.reshape(*target), x.reshape(shape=target), mx.nd.reshape(x, target)):
        assert y.shape == expected
        assert_nd(y, src.reshape(expected))


@pytest.mark.parametrize("target", [(5,), (7, -1), (-1, -1), (0, 5), (2, -3), (-1, 0, 5)])
def test_bad_reshape_raises(target: tuple[int, ...]) -> None:
    x = mx.nd.zeros((2, 3))
    with pytest.raises(mx.nd.OperatorError, match="Reshape"):
        x.reshape(target)
    with pytest.raises(mx.nd.OperatorError, match="Reshape"):
        mx.nd.reshape(x, target)


def test_the_reshape_method_is_a_view_and_nd_reshape_a_copy() -> None:
    # MXNet 1.9.1's own docstring example: ``NDArray.reshape`` shares the data (NDArray::Reshape).
    x = mx.nd.arange(0, 6).reshape(2, 3)
    y = x.reshape(-3)
    y[:] = -1
    np.testing.assert_array_equal(x.asnumpy(), -np.ones((2, 3)))
    copied = mx.nd.reshape(x, (3, 2))  # the operator makes its own output
    x[:] = 0
    np.testing.assert_array_equal(copied.asnumpy(), -np.ones((3, 2)))
    np.testing.assert_array_equal(y.asnumpy(), np.zeros(6))


def test_a_reshaped_view_waits_for_the_op_writing_its_array() -> None:
    x = mx.nd.ones((100, 100))
    for _ in range(20):
        x = x + 1  # pushed, maybe not run yet: the view shares the var, so reading it waits
    assert float(x.reshape((-1,)).sum().asscalar()) == 21 * 100 * 100


def test_a_slice_is_a_view_only_where_mxnet_makes_one() -> None:
    a = mx.nd.zeros((4, 6))
    rows, one, column = a[1:3], a[2], a[:, 1:3]  # contiguous, contiguous, not
    rows[:] = 7
    one[:] = 9
    column[:] = 5  # MXNet's ``slice`` op made a copy: the array is left alone
    np.testing.assert_array_equal(a.asnumpy()[:, 0], [0, 7, 9, 0])
    assert not (a.asnumpy()[:, 1:3] == 5).any() and (column.asnumpy() == 5).all()
    assert a[::2].asnumpy().shape == (2, 6)  # a step: a copy as well


GETITEM_KEYS = [
    0,
    1,
    -1,
    slice(1, 3),
    slice(None, None, 2),
    slice(None, None, -1),
    slice(-2, None),
    (1, 2),
    (-1, -2, -3),
    (slice(None), 1),
    (0, slice(1, None)),
    (Ellipsis, 1),
    (1, Ellipsis),
    (slice(None), Ellipsis, slice(0, 2)),
    Ellipsis,
    (None, 1),
    (slice(1, 1),),
]


@pytest.mark.parametrize("key", GETITEM_KEYS, ids=repr)
def test_getitem_matches_numpy(key: Any) -> None:
    src = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    x = mx.nd.array(src)
    y = x[key]
    assert isinstance(y, mx.nd.NDArray)
    expected = np.asarray(src[key])
    assert y.shape == expected.shape
    np.testing.assert_array_equal(y.asnumpy(), expected)


def test_getitem_full_slice_and_errors() -> None:
    x = mx.nd.array(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(x[:].asnumpy(), np.arange(6.0).reshape(2, 3))
    with pytest.raises(IndexError):
        x[5]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(TypeError):
        x[[0, 1]]
    with pytest.raises(TypeError):
        x[mx.nd.array([0])]


def test_getitem_result_sees_later_writes() -> None:
    """A basic slice is a view on the same buffer (as in MXNet)."""
    x = mx.nd.zeros((3, 4))
    row = x[1]
    x[:] = 2
    x += 1
    np.testing.assert_array_equal(row.asnumpy(), np.full(4, 3.0))
    row[:] = 9
    expected = np.full((3, 4), 3.0)
    expected[1] = 9
    np.testing.assert_array_equal(x.asnumpy(), expected)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (slice(None), 5.0),
        ((), 5.0),
        (0, 7.0),
        (-1, 7),
        ((1, 2), -3.5),
        ((slice(None), 1), 2.0),
        ((Ellipsis, slice(0, 2)), 4.0),
        (slice(None, None, 2), np.float32(1.5)),
        (slice(None), "row"),
        (1, "row"),
        ((slice(0, 2), slice(1, 3)), "block"),
        (slice(None), "full"),
        (slice(None), "list"),
        (0, "numpy"),
    ],
    ids=repr,
)
def test_setitem_matches_numpy(key: Any, value: Any) -> None:
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = mx.nd.array(src)
    expected = src.copy()
    named = {
        "row": np.array([10, 20, 30, 40], dtype=np.float32),
        "block": np.array([[1, 2], [3, 4]], dtype=np.float32),
        "full": np.full((3, 4), -8.0, dtype=np.float32),
    }
    if not isinstance(value, str):
        x[key] = value
        expected[key] = value
    elif value in named:
        x[key] = mx.nd.array(named[value])
        expected[key] = named[value]
    elif value == "list":
        x[key] = [1, 2, 3, 4]
        expected[key] = [1, 2, 3, 4]
    else:  # a NumPy array of another dtype
        x[key] = np.array([5, 6, 7, 8])
        expected[key] = [5, 6, 7, 8]
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x.asnumpy(), expected)


def test_setitem_keeps_identity_and_value_independent() -> None:
    x = mx.nd.zeros((2, 3))
    y = mx.nd.ones((2, 3))
    ident = id(x)
    x[:] = y
    assert id(x) == ident
    y[:] = 5
    np.testing.assert_array_equal(x.asnumpy(), np.ones((2, 3)))
    x[:] = x
    np.testing.assert_array_equal(x.asnumpy(), np.ones((2, 3)))


def test_setitem_shape_mismatch_raises() -> None:
    x = mx.nd.zeros((3, 4))
    with pytest.raises(mx.nd.OperatorError):
        x[0] = mx.nd.ones(5)
    with pytest.raises(mx.nd.OperatorError):
        x[:] = mx.nd.ones((4, 3))
    np.testing.assert_array_equal(x.asnumpy(), np.zeros((3, 4)))


# ---------------------------------------------------------------------------- operators vs NumPy

BINARY = [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("pow", lambda a, b: a**b),
]


def _positive(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.asarray(rng(seed).uniform(0.5, 2.0, shape))


@pytest.mark.parametrize(("name", "fn"), BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("scalar", [2, 0.5, -1.5, np.float32(3.0)], ids=repr)
def test_scalar_ops_both_sides(name: str, fn: Callable[[Any, Any], Any], scalar: Any) -> None:
    a = _positive((3, 4), 1).astype(np.float32)
    x = mx.nd.array(a)
    if name == "pow" and scalar < 0:
        scalar = abs(scalar)  # a negative base to a fractional power is NaN
    left = fn(x, scalar)
    right = fn(scalar, x)
    assert left.dtype == np.float32 and right.dtype == np.float32
    assert_nd(left, fn(a, np.float32(scalar)), rtol=1e-5)
    assert_nd(right, fn(np.float32(scalar), a), rtol=1e-5)


@pytest.mark.parametrize(("name", "fn"), BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (3, 4)),
        ((3, 4), (4,)),
        ((4,), (3, 4)),
        ((3, 1), (1, 4)),
        ((2, 3, 4), (3, 1)),
        ((1,), (2, 3)),
        ((), (2, 2)),
    ],
    ids=str,
)
def test_array_binary_ops(name: str, fn: Callable[[Any, Any], Any], sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = _positive(sa, 2), _positive(sb, 3)
    out = fn(mx.nd.array(a), mx.nd.array(b))
    assert out.dtype == np.float64
    assert_nd(out, fn(a, b), rtol=1e-12)


def test_binary_ops_with_numpy_operand() -> None:
    a, b = _positive((2, 3), 4), _positive((2, 3), 5)
    x = mx.nd.array(a)
    assert_nd(x + b, a + b)
    assert_nd(b - x, b - a)
    assert_nd(b * x, a * b)
    assert_nd(x / b, a / b)


def test_mixed_dtype_binary_op_promotes() -> None:
    x = mx.nd.array(np.arange(3, dtype=np.int32))
    y = mx.nd.array(np.full(3, 0.5))
    z = x + y
    assert z.dtype == np.float64
    assert_nd(z, [0.5, 1.5, 2.5])


UNARY = [
    ("abs", np.abs, (-2.0, 2.0)),
    ("exp", np.exp, (-2.0, 2.0)),
    ("log", np.log, (0.1, 4.0)),
    ("sqrt", np.sqrt, (0.0, 4.0)),
    ("tanh", np.tanh, (-3.0, 3.0)),
    ("sigmoid", lambda a: 1 / (1 + np.exp(-a)), (-6.0, 6.0)),
    ("relu", lambda a: np.maximum(a, 0), (-2.0, 2.0)),
    ("negative", np.negative, (-2.0, 2.0)),
]


@pytest.mark.parametrize(("name", "ref", "domain"), UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_ops(name: str, ref: Callable[[np.ndarray], np.ndarray], domain: tuple[float, float], dtype: type) -> None:
    a = rng(7).uniform(*domain, (4, 5)).astype(dtype)
    x = mx.nd.array(a)
    expected = ref(a)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    y = getattr(mx.nd, name)(x)
    assert y.dtype == dtype
    assert_nd(y, expected, rtol=rtol, atol=1e-7)
    if name != "negative":
        assert_nd(getattr(x, name)(), expected, rtol=rtol, atol=1e-7)
    if name == "negative":
        assert_nd(-x, expected)
    if name == "abs":
        assert_nd(abs(x), expected)
    out = mx.nd.zeros((4, 5), dtype=dtype)
    ret = getattr(mx.nd, name)(x, out=out)
    assert ret is out
    assert_nd(out, expected, rtol=rtol, atol=1e-7)


def test_sigmoid_extremes_do_not_overflow() -> None:
    x = mx.nd.array(np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0]))
    with np.errstate(all="raise"):
        y = mx.nd.sigmoid(x).asnumpy()
    np.testing.assert_allclose(y, [0, 0, 0.5, 1, 1], atol=1e-15)


def test_unary_function_rejects_non_ndarray() -> None:
    with pytest.raises(TypeError):
        mx.nd.exp(np.ones(3))


@pytest.mark.parametrize(
    ("sa", "sb", "ta", "tb"),
    [
        ((3, 4), (4, 5), False, False),
        ((4, 3), (4, 5), True, False),
        ((3, 4), (5, 4), False, True),
        ((4, 3), (5, 4), True, True),
        ((4,), (4,), False, False),
        ((3, 4), (4,), False, False),
        ((4,), (4, 5), False, False),
        ((4, 3), (4,), True, False),
        ((4,), (5, 4), False, True),
        ((1, 1), (1, 1), False, False),
    ],
    ids=str,
)
def test_dot(sa: tuple[int, ...], sb: tuple[int, ...], ta: bool, tb: bool) -> None:
    a, b = rng(1).normal(size=sa), rng(2).normal(size=sb)
    expected = np.dot(a.T if ta else a, b.T if tb else b)
    x, y = mx.nd.array(a), mx.nd.array(b)
    assert_nd(mx.nd.dot(x, y, transpose_a=ta, transpose_b=tb), expected, rtol=1e-12)
    assert_nd(x.dot(y, transpose_a=ta, transpose_b=tb), expected, rtol=1e-12)


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((3, 4), None),
        ((3, 4), (1, 0)),
        ((3, 4), (0, 1)),
        ((2, 3, 4), None),
        ((2, 3, 4), (1, 2, 0)),
        ((2, 3, 4), (2, 0, 1)),
        ((2, 3, 4), (-1, 0, 1)),
        ((5,), None),
        ((2, 3, 4, 5), (3, 1, 0, 2)),
    ],
    ids=str,
)
def test_transpose(shape: tuple[int, ...], axes: tuple[int, ...] | None) -> None:
    a = rng(3).normal(size=shape)
    x = mx.nd.array(a)
    expected = np.transpose(a, axes)
    assert_nd(mx.nd.transpose(x, axes=axes), expected)
    assert_nd(x.transpose(axes), expected)
    if axes is None:
        assert_nd(x.T, expected)
        assert_nd(mx.nd.transpose(x), expected)


AXES = [None, 0, 1, -1, (0, 2), (1,), (-1, 0), (0, 1, 2)]


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reductions(axis: Any, keepdims: bool, op: str) -> None:
    a = rng(4).normal(size=(2, 3, 4))
    x = mx.nd.array(a)
    expected = np.atleast_1d(getattr(np, op)(a, axis=axis, keepdims=keepdims))  # MXNet: a scalar is shape (1,)
    assert_nd(getattr(mx.nd, op)(x, axis=axis, keepdims=keepdims), expected, rtol=1e-12, atol=1e-14)
    assert_nd(getattr(x, op)(axis=axis, keepdims=keepdims), expected, rtol=1e-12, atol=1e-14)
    if axis is not None and not isinstance(axis, int):
        assert_nd(getattr(mx.nd, op)(x, axis=list(axis), keepdims=keepdims), expected, rtol=1e-12, atol=1e-14)


def test_reduction_defaults_and_dtype() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = mx.nd.array(a)
    s = x.sum()
    assert s.shape == (1,)  # as MXNet: a full reduction has shape (1,), not ()
    assert s.dtype == np.float32
    assert s.asscalar() == 66
    assert mx.nd.mean(x).asscalar() == pytest.approx(5.5)
    assert_nd(x.sum(1), a.sum(1))
    assert_nd(x.mean(0), a.mean(0))


def test_add_n() -> None:
    arrays = [rng(i).normal(size=(3, 2)) for i in range(4)]
    xs = [mx.nd.array(a) for a in arrays]
    assert_nd(mx.nd.add_n(*xs), arrays[0] + arrays[1] + arrays[2] + arrays[3], rtol=1e-12)
    assert_nd(mx.nd.add_n(xs[0]), arrays[0])
    assert_nd(mx.nd.add_n(xs[0], xs[0]), 2 * arrays[0])
    out = mx.nd.zeros((3, 2), dtype=np.float64)
    assert mx.nd.add_n(xs[1], xs[2], out=out) is out
    assert_nd(out, arrays[1] + arrays[2], rtol=1e-12)
    with pytest.raises(mx.nd.OperatorError, match="add_n"):
        mx.nd.add_n()


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum(op: str) -> None:
    a, b, row = rng(5).normal(size=(3, 4)), rng(6).normal(size=(3, 4)), rng(7).normal(size=(4,))
    f = getattr(mx.nd, op)
    ref = getattr(np, op)
    x, y, r = mx.nd.array(a), mx.nd.array(b), mx.nd.array(row)
    assert_nd(f(x, y), ref(a, b))
    assert_nd(f(x, r), ref(a, row))
    assert_nd(f(r, x), ref(row, a))
    assert_nd(f(x, 0.25), ref(a, 0.25))
    assert_nd(f(0.25, x), ref(0.25, a))
    with pytest.raises(TypeError):
        f(1, 2)


# ---------------------------------------------------------------------------- in-place ops


def _inplace(x: Any, op: str, other: Any) -> Any:
    if op == "+=":
        x += other
    elif op == "-=":
        x -= other
    elif op == "*=":
        x *= other
    else:
        x /= other
    return x


INPLACE = [("+=", np.add), ("-=", np.subtract), ("*=", np.multiply), ("/=", np.divide)]


@pytest.mark.parametrize(("op", "ref"), INPLACE, ids=[i[0] for i in INPLACE])
@pytest.mark.parametrize("other", ["scalar", "same", "row", "self"])
def test_inplace_ops_modify_target(op: str, ref: Callable[..., np.ndarray], other: str) -> None:
    a = _positive((3, 4), 8)
    x = mx.nd.array(a)
    view = x[1]
    ident = id(x)
    if other == "scalar":
        operand: Any = 2.5
        expected = ref(a, 2.5)
    elif other == "same":
        b = _positive((3, 4), 9)
        operand = mx.nd.array(b)
        expected = ref(a, b)
    elif other == "row":
        b = _positive((4,), 10)
        operand = mx.nd.array(b)
        expected = ref(a, b)
    else:
        operand = x
        expected = ref(a, a)
    result = _inplace(x, op, operand)
    assert result is x
    assert id(x) == ident
    assert x.shape == (3, 4)
    assert_nd(x, expected, rtol=1e-12)
    assert_nd(view, expected[1], rtol=1e-12)
    if other in ("same", "row"):
        assert_nd(operand, b)  # the operand is untouched


def test_inplace_on_view_changes_base() -> None:
    x = mx.nd.zeros((2, 3))
    v = x[1]
    v += 4
    v *= 2
    np.testing.assert_array_equal(x.asnumpy(), [[0, 0, 0], [8, 8, 8]])


def test_inplace_result_shape_must_fit() -> None:
    x = mx.nd.zeros((3,))
    with pytest.raises(mx.nd.OperatorError, match="broadcast_add"):
        x += mx.nd.ones((2, 3))
    np.testing.assert_array_equal(x.asnumpy(), np.zeros(3))


def test_chain_of_inplace_ops_runs_in_order() -> None:
    x = mx.nd.ones((20, 20))
    expected = np.ones((20, 20))
    for i in range(30):
        if i % 3 == 0:
            x += i
            expected += i
        elif i % 3 == 1:
            x *= 0.5
            expected *= 0.5
        else:
            x -= x[0]
            expected -= expected[0].copy()
    assert_nd(x, expected)


# ---------------------------------------------------------------------------- operator names

X_SHAPE = (2, 3)


def _operands() -> dict[str, Any]:
    r = rng(11)
    return {
        "x": mx.nd.array(r.uniform(0.5, 2, X_SHAPE)),
        "y": mx.nd.array(r.uniform(0.5, 2, X_SHAPE)),
        "row": mx.nd.array(r.uniform(0.5, 2, (3,))),
        "col": mx.nd.array(r.uniform(0.5, 2, (2, 1))),
        "w": mx.nd.array(r.uniform(0.5, 2, (3, 4))),
    }


NAME_CASES: list[tuple[str, Callable[[dict[str, Any]], Any], list[str]]] = [
    ("x + 1", lambda o: o["x"] + 1, ["_plus_scalar"]),
    ("1 + x", lambda o: 1 + o["x"], ["_plus_scalar"]),
    ("x + np.float32", lambda o: o["x"] + np.float32(1), ["_plus_scalar"]),
    ("np.float32 * x", lambda o: np.float32(2) * o["x"], ["_mul_scalar"]),
    ("x - 1", lambda o: o["x"] - 1, ["_minus_scalar"]),
    ("1 - x", lambda o: 1 - o["x"], ["_rminus_scalar"]),
    ("x * 2", lambda o: o["x"] * 2, ["_mul_scalar"]),
    ("2 * x", lambda o: 2 * o["x"], ["_mul_scalar"]),
    ("x / 2", lambda o: o["x"] / 2, ["_div_scalar"]),
    ("2 / x", lambda o: 2 / o["x"], ["_rdiv_scalar"]),
    ("x ** 2", lambda o: o["x"] ** 2, ["_power_scalar"]),
    ("2 ** x", lambda o: 2 ** o["x"], ["_rpower_scalar"]),
    ("x + y", lambda o: o["x"] + o["y"], ["elemwise_add"]),
    ("x - y", lambda o: o["x"] - o["y"], ["elemwise_sub"]),
    ("x * y", lambda o: o["x"] * o["y"], ["elemwise_mul"]),
    ("x / y", lambda o: o["x"] / o["y"], ["elemwise_div"]),
    ("x ** y", lambda o: o["x"] ** o["y"], ["_power"]),
    ("x + numpy", lambda o: o["x"] + np.ones(X_SHAPE), ["elemwise_add"]),
    ("x + row", lambda o: o["x"] + o["row"], ["broadcast_add"]),
    ("row + x", lambda o: o["row"] + o["x"], ["broadcast_add"]),
    ("x - row", lambda o: o["x"] - o["row"], ["broadcast_sub"]),
    ("x * col", lambda o: o["x"] * o["col"], ["broadcast_mul"]),
    ("col / x", lambda o: o["col"] / o["x"], ["broadcast_div"]),
    ("x ** row", lambda o: o["x"] ** o["row"], ["broadcast_power"]),
    ("maximum(x, y)", lambda o: mx.nd.maximum(o["x"], o["y"]), ["_maximum"]),
    ("minimum(x, y)", lambda o: mx.nd.minimum(o["x"], o["y"]), ["_minimum"]),
    ("maximum(x, row)", lambda o: mx.nd.maximum(o["x"], o["row"]), ["broadcast_maximum"]),
    ("minimum(col, x)", lambda o: mx.nd.minimum(o["col"], o["x"]), ["broadcast_minimum"]),
    ("maximum(x, 1)", lambda o: mx.nd.maximum(o["x"], 1), ["_maximum_scalar"]),
    ("minimum(1, x)", lambda o: mx.nd.minimum(1, o["x"]), ["_minimum_scalar"]),
    ("-x", lambda o: -o["x"], ["negative"]),
    ("+x", lambda o: +o["x"], []),
    ("abs(x)", lambda o: abs(o["x"]), ["abs"]),
    *[(f"nd.{n}(x)", (lambda n: lambda o: getattr(mx.nd, n)(o["x"]))(n), [n]) for n, _, _ in UNARY],
    *[(f"x.{n}()", (lambda n: lambda o: getattr(o["x"], n)())(n), [n]) for n, _, _ in UNARY if n != "negative"],
    ("dot", lambda o: mx.nd.dot(o["x"], o["w"]), ["dot"]),
    ("x.dot", lambda o: o["x"].dot(o["w"]), ["dot"]),
    ("dot transpose_b", lambda o: mx.nd.dot(o["x"], o["y"], transpose_b=True), ["dot"]),
    ("dot transpose_a", lambda o: mx.nd.dot(o["x"], o["y"], transpose_a=True), ["dot"]),
    ("x.T", lambda o: o["x"].T, ["transpose"]),
    ("transpose axes", lambda o: mx.nd.transpose(o["x"], axes=(1, 0)), ["transpose"]),
    ("x.transpose()", lambda o: o["x"].transpose(), ["transpose"]),
    ("x.reshape", lambda o: o["x"].reshape((3, 2)), []),  # a view, as MXNet's: no op runs
    ("nd.reshape", lambda o: mx.nd.reshape(o["x"], (-1,)), ["Reshape"]),
    ("nd.sum", lambda o: mx.nd.sum(o["x"]), ["sum"]),
    ("x.sum(axis)", lambda o: o["x"].sum(axis=0, keepdims=True), ["sum"]),
    ("nd.mean", lambda o: mx.nd.mean(o["x"], axis=(0, 1)), ["mean"]),
    ("x.mean()", lambda o: o["x"].mean(), ["mean"]),
    ("add_n", lambda o: mx.nd.add_n(o["x"], o["y"], o["x"]), ["add_n"]),
    ("copy", lambda o: o["x"].copy(), ["_copy"]),
    ("astype", lambda o: o["x"].astype("float32"), ["_copy"]),
    ("copyto", lambda o: o["x"].copyto(o["y"]), ["_copyto"]),
    ("x[1:]", lambda o: o["x"][1:], []),
    ("x[0, 1]", lambda o: o["x"][0, 1], []),
    ("x[:, 1:]", lambda o: o["x"][:, 1:], ["slice"]),  # not contiguous: MXNet's slice op copies
    ("zeros", lambda o: mx.nd.zeros((2, 2)), ["_zeros"]),
    ("ones", lambda o: mx.nd.ones((2, 2)), ["_ones"]),
    ("full", lambda o: mx.nd.full((2, 2), 3), ["_full"]),
    ("arange", lambda o: mx.nd.arange(5), ["_arange"]),
    ("array", lambda o: mx.nd.array([1, 2]), []),
    ("uniform", lambda o: mx.random.uniform(shape=(2,)), ["_random_uniform"]),
    ("normal", lambda o: mx.random.normal(shape=(2,)), ["_random_normal"]),
]


@pytest.mark.parametrize(("expr", "fn", "names"), NAME_CASES, ids=[c[0] for c in NAME_CASES])
def test_operator_names(expr: str, fn: Callable[[dict[str, Any]], Any], names: list[str]) -> None:
    o = _operands()
    with record_pushes() as rec:
        out = fn(o)
    assert rec.names == names, expr
    assert isinstance(out, mx.nd.NDArray)
    if names:
        (opr,) = rec.oprs
        assert opr.writes == (out.var,)
        if expr in ("x + 1", "x + y", "x + row", "nd.exp(x)"):
            assert o["x"].var in opr.reads


def test_operator_names_values_still_computed() -> None:
    """The recording observer runs every op: results are unchanged."""
    o = _operands()
    x = o["x"].asnumpy()
    with record_pushes() as rec:
        y = (o["x"] + 1) * 2 - o["row"]
    assert rec.names == ["_plus_scalar", "_mul_scalar", "broadcast_sub"]
    assert_nd(y, (x + 1) * 2 - o["row"].asnumpy(), rtol=1e-12)


@pytest.mark.parametrize(
    ("op", "operand", "name"),
    [
        ("+=", "scalar", "_plus_scalar"),
        ("-=", "scalar", "_minus_scalar"),
        ("*=", "scalar", "_mul_scalar"),
        ("/=", "scalar", "_div_scalar"),
        ("+=", "y", "elemwise_add"),
        ("-=", "y", "elemwise_sub"),
        ("*=", "y", "elemwise_mul"),
        ("/=", "y", "elemwise_div"),
        ("+=", "row", "broadcast_add"),
        ("*=", "col", "broadcast_mul"),
    ],
)
def test_inplace_operator_names_write_own_var(op: str, operand: str, name: str) -> None:
    o = _operands()
    x = o["x"]
    other = 1.0 if operand == "scalar" else o[operand]
    with record_pushes() as rec:
        _inplace(x, op, other)
    assert rec.names == [name]
    (opr,) = rec.oprs
    assert opr.writes == (x.var,)
    assert x.var not in opr.reads
    if operand != "scalar":
        assert opr.reads == (other.var,)
    else:
        assert opr.reads == ()


@pytest.mark.parametrize(
    ("key", "value", "name"),
    [
        (slice(None), 1.0, "_set_value"),
        (0, 1.0, "_slice_assign_scalar"),
        (0, "row", "_slice_assign"),
        (slice(None), "y", "_copyto"),
    ],
)
def test_setitem_names(key: Any, value: Any, name: str) -> None:
    o = _operands()
    x = o["x"]
    v = o[value] if isinstance(value, str) else value
    with record_pushes() as rec:
        x[key] = v
    assert rec.names == [name]
    assert rec.oprs[0].writes == (x.var,)


def test_reading_pushes_only_waits() -> None:
    x = mx.nd.ones(3) + 1
    x.wait_to_read()
    with record_pushes() as rec:
        x.asnumpy()
    assert all(n == "WaitForVar" for n in rec.names)


# ---------------------------------------------------------------------------- shape errors at push time


def _raises_at_push(fn: Callable[[], Any], *fragments: str) -> str:
    """``fn()`` raises OperatorError naming every fragment, and pushes nothing."""
    with record_pushes() as rec:
        with pytest.raises(mx.nd.OperatorError) as info:
            fn()
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, (frag, msg)
    assert rec.names == []
    return msg


def test_dot_shape_error() -> None:
    a, b = mx.nd.ones((3, 4)), mx.nd.ones((5, 6))
    _raises_at_push(lambda: mx.nd.dot(a, b), "dot", "(3, 4)", "(5, 6)")
    _raises_at_push(lambda: a.dot(b), "dot", "(3, 4)", "(5, 6)")
    a2, v4, v5, cube, sq = mx.nd.ones((3, 4)), mx.nd.ones((4,)), mx.nd.ones((5,)), mx.nd.ones((2, 2, 2)), mx.nd.ones((2, 2))
    _raises_at_push(lambda: mx.nd.dot(a, a2), "dot", "(3, 4)")
    _raises_at_push(lambda: mx.nd.dot(a, a2, transpose_a=True, transpose_b=True), "dot", "(3, 4)")
    _raises_at_push(lambda: mx.nd.dot(v4, v5), "dot", "(4,)", "(5,)")
    _raises_at_push(lambda: mx.nd.dot(cube, sq), "dot", "(2, 2, 2)")
    # The shapes do fit once one side is transposed.
    assert mx.nd.dot(a, a2, transpose_a=True).shape == (4, 4)
    assert mx.nd.dot(a, a2, transpose_b=True).shape == (3, 3)


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("broadcast_add", lambda a, b: a + b),
        ("broadcast_sub", lambda a, b: a - b),
        ("broadcast_mul", lambda a, b: a * b),
        ("broadcast_div", lambda a, b: a / b),
        ("broadcast_power", lambda a, b: a**b),
        ("broadcast_maximum", lambda a, b: mx.nd.maximum(a, b)),
        ("broadcast_minimum", lambda a, b: mx.nd.minimum(a, b)),
    ],
)
def test_broadcast_shape_error(name: str, fn: Callable[[Any, Any], Any]) -> None:
    a, b = mx.nd.ones((2, 3)), mx.nd.ones((4, 5))
    v = mx.nd.ones((2,))
    _raises_at_push(lambda: fn(a, b), name, "(2, 3)", "(4, 5)")
    _raises_at_push(lambda: fn(a, v), name, "(2, 3)", "(2,)")


def test_elementwise_shape_errors() -> None:
    a, b = mx.nd.ones((2, 3)), mx.nd.ones((3, 2))
    _raises_at_push(lambda: mx.nd.add_n(a, a, b), "add_n", "(2, 3)", "(3, 2)")
    _raises_at_push(lambda: a.copyto(b), "(2, 3)", "(3, 2)")

    x, big = mx.nd.ones((2, 3)), mx.nd.ones((4, 2, 3))

    def iadd() -> None:
        nonlocal x
        x += big

    _raises_at_push(iadd, "broadcast_add", "(4, 2, 3)")


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("axis", [2, -3, (0, 5)])
def test_bad_reduction_axis(op: str, axis: Any) -> None:
    x = mx.nd.ones((2, 3))
    _raises_at_push(lambda: getattr(mx.nd, op)(x, axis=axis), op, "(2, 3)", "axis")
    _raises_at_push(lambda: getattr(x, op)(axis=axis), op, "(2, 3)")


def test_bad_transpose_axes_count() -> None:
    x = mx.nd.ones((2, 3))
    _raises_at_push(lambda: mx.nd.transpose(x, axes=(0,)), "transpose", "(2, 3)")
    _raises_at_push(lambda: mx.nd.transpose(x, axes=(0, 0)), "transpose", "(2, 3)")


def test_transpose_out_of_range_axes_raise_operator_error() -> None:
    x = mx.nd.ones((2, 3))
    _raises_at_push(lambda: mx.nd.transpose(x, axes=(0, 3)), "transpose", "(2, 3)")


def test_duplicate_reduction_axis_names_operator() -> None:
    x = mx.nd.ones((2, 3))
    _raises_at_push(lambda: mx.nd.sum(x, axis=(0, -2)), "sum", "(2, 3)")


def test_shape_error_raises_on_the_line_not_later() -> None:
    """The error comes from the push, so later ops and waits are unaffected."""
    x = mx.nd.ones((2, 3))
    with pytest.raises(mx.nd.OperatorError):
        x + mx.nd.ones((3, 2, 1, 4))
    y = x + 1
    np.testing.assert_array_equal(y.asnumpy(), np.full((2, 3), 2.0))
    mx.nd.waitall()


# ---------------------------------------------------------------------------- property test: chains of ops


def _chain_step(data: st.DataObject, x: Any, a: np.ndarray) -> tuple[Any, np.ndarray]:
    kind = data.draw(
        st.sampled_from(
            [
                "scalar",
                "rscalar",
                "unary",
                "binary_same",
                "binary_bcast",
                "reduce",
                "reshape",
                "transpose",
                "dot",
                "add_n",
                "minmax",
                "inplace",
            ]
        )
    )
    scalar = data.draw(st.floats(0.5, 2.0) | st.floats(-2.0, -0.5))
    shape = a.shape
    if kind == "scalar":
        op = data.draw(st.sampled_from(["+", "-", "*", "/", "**2"]))
        if op == "+":
            return x + scalar, a + scalar
        if op == "-":
            return x - scalar, a - scalar
        if op == "*":
            return x * scalar, a * scalar
        if op == "/":
            return x / scalar, a / scalar
        return x**2, a**2
    if kind == "rscalar":
        op = data.draw(st.sampled_from(["-", "/", "**"]))
        if op == "-":
            return scalar - x, scalar - a
        if op == "/":
            return scalar / (abs(x) + 1), scalar / (np.abs(a) + 1)
        return abs(scalar) ** mx.nd.tanh(x), abs(scalar) ** np.tanh(a)
    if kind == "unary":
        name = data.draw(st.sampled_from(["abs", "tanh", "sigmoid", "relu", "negative", "exp", "log", "sqrt"]))
        if name == "exp":
            return mx.nd.exp(mx.nd.tanh(x)), np.exp(np.tanh(a))
        if name == "log":
            return (abs(x) + 0.5).log(), np.log(np.abs(a) + 0.5)
        if name == "sqrt":
            return abs(x).sqrt(), np.sqrt(np.abs(a))
        ref = dict(UNARY_REF)[name]
        return getattr(mx.nd, name)(x), ref(a)
    if kind in ("binary_same", "binary_bcast", "minmax"):
        if kind == "binary_same":
            bshape = shape
        else:
            # Drop leading axes and set some of the rest to 1.
            k = data.draw(st.integers(0, len(shape)))
            bshape = tuple(1 if data.draw(st.booleans()) else n for n in shape[k:])
        b = data.draw(_arrays(bshape))
        y = mx.nd.array(b)
        swap = data.draw(st.booleans())
        if kind == "minmax":
            f = data.draw(st.sampled_from(["maximum", "minimum"]))
            args = (y, x) if swap else (x, y)
            nargs = (b, a) if swap else (a, b)
            return getattr(mx.nd, f)(*args), getattr(np, f)(*nargs)
        op = data.draw(st.sampled_from(["+", "-", "*", "/"]))
        (lhs, rhs), (nlhs, nrhs) = ((y, x), (b, a)) if swap else ((x, y), (a, b))
        if op == "+":
            return lhs + rhs, nlhs + nrhs
        if op == "-":
            return lhs - rhs, nlhs - nrhs
        if op == "*":
            return lhs * rhs, nlhs * nrhs
        return lhs / (abs(rhs) + 1), nlhs / (np.abs(nrhs) + 1)
    if kind == "reduce":
        if not shape:
            return x, a
        f = data.draw(st.sampled_from(["sum", "mean"]))
        axis = data.draw(
            st.none() | st.integers(-len(shape), len(shape) - 1) | st.sets(st.integers(0, len(shape) - 1), min_size=1).map(tuple)
        )
        keepdims = data.draw(st.booleans())
        # MXNet's rule: a reduction to a scalar is an array of shape (1,).
        return getattr(mx.nd, f)(x, axis=axis, keepdims=keepdims), np.atleast_1d(getattr(np, f)(a, axis=axis, keepdims=keepdims))
    if kind == "reshape":
        return x.reshape(-1), a.reshape(-1)
    if kind == "transpose":
        perm = tuple(data.draw(st.permutations(range(len(shape)))))
        return mx.nd.transpose(x, axes=perm), np.transpose(a, perm)
    if kind == "dot":
        if len(shape) > 2:
            return x, a
        n = data.draw(st.integers(1, 3))
        inner = shape[-1] if shape else 1
        if not shape:
            x, a = x.reshape((1,)), a.reshape((1,))
        b = data.draw(_arrays((inner, n)))
        return mx.nd.dot(x, mx.nd.array(b)), np.dot(a, b)
    if kind == "add_n":
        b = data.draw(_arrays(shape))
        return mx.nd.add_n(x, mx.nd.array(b), x), a + b + a
    # inplace: work on a copy so earlier results stay valid
    y = x.copy()
    op = data.draw(st.sampled_from(["+=", "-=", "*="]))
    _inplace(y, op, scalar)
    return y, dict(INPLACE)[op](a, scalar)


# Same formula as the unary test's reference except sigmoid, written as MXNet-style
# 0.5 * (1 + tanh(x / 2)) so long chains compare bit-for-bit rather than within rounding.
UNARY_REF = [(n, ref) for n, ref, _ in UNARY if n != "sigmoid"] + [("sigmoid", lambda a: 0.5 * (1 + np.tanh(a * 0.5)))]


def _arrays(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    size = int(np.prod(shape, dtype=np.int64))
    return st.lists(st.floats(-2, 2, allow_nan=False, width=64), min_size=size, max_size=size).map(
        lambda v: np.array(v, dtype=np.float64).reshape(shape)
    )


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple))
def test_random_op_chains_match_numpy(data: st.DataObject, shape: tuple[int, ...]) -> None:
    a = data.draw(_arrays(shape))
    x = mx.nd.array(a)
    assert x.dtype == np.float64
    n = data.draw(st.integers(1, 6))
    for _ in range(n):
        x, a = _chain_step(data, x, a)
        assert x.shape == np.shape(a)
    got = x.asnumpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, a, rtol=1e-9, atol=1e-9)
