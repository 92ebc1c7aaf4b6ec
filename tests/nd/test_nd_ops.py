"""The shape, reduction, sorting, joining, softmax and dropout operators, through ``mx.nd`` and NDArray methods.

Each is compared with NumPy on known inputs, on both engines; bad arguments raise OperatorError at
push time, naming the operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof as mx
from opprof.nd import OperatorError
from tests.helpers import record_pushes

# Every test on both engines (the ``engine`` fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("engine")

nd = mx.nd
ag = mx.autograd


def grid(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 5


def assert_np(x: Any, expected: Any) -> None:
    got = x.asnumpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------- shapes
def test_expand_dims_flatten_squeeze() -> None:
    a = grid(2, 3, 4)
    x = nd.array(a)
    assert_np(x.expand_dims(1), np.expand_dims(a, 1))
    assert_np(nd.expand_dims(x, axis=-1), np.expand_dims(a, -1))
    assert_np(x.flatten(), a.reshape(2, 12))
    assert nd.Flatten(nd.ones((5,))).shape == (5, 1)
    y = nd.array(a.reshape(1, 2, 1, 12, 1))
    assert_np(y.squeeze(), a.reshape(2, 12))
    assert_np(nd.squeeze(y, axis=(0, -1)), a.reshape(2, 1, 12))
    assert nd.ones((1, 1, 1)).squeeze().shape == (1,)  # MXNet keeps (1,)


def test_inplace_reshapes_are_views() -> None:
    x = nd.array(grid(2, 3))
    copy, view = x.expand_dims(0), x.expand_dims(0, inplace=True)
    flat = nd.array(grid(2, 1, 3)).squeeze(inplace=True)
    x[0] = 100
    assert copy.asnumpy()[0, 0, 0] == -5
    assert view.asnumpy()[0, 0, 0] == 100
    assert flat.shape == (2, 3)


def test_bad_shapes_raise_at_push() -> None:
    with pytest.raises(OperatorError, match=r"squeeze: cannot squeeze axis 1 of shape \(1, 3\)"):
        nd.ones((1, 3)).squeeze(axis=1)
    with pytest.raises(OperatorError, match=r"expand_dims: axis 4 is out of range for shape \(2, 3\)"):
        nd.ones((2, 3)).expand_dims(4)
    with pytest.raises(OperatorError, match="reshape_like"):
        nd.reshape_like(nd.ones((2, 3)), nd.ones((4,)))
    with pytest.raises(OperatorError, match=r"broadcast_to: cannot broadcast shape \(2, 3\) to \(4, 3\)"):
        nd.ones((2, 3)).broadcast_to((4, 3))


def test_broadcast_to_like_and_reshape_like() -> None:
    a = grid(2, 1, 3)
    x = nd.array(a)
    assert_np(x.broadcast_to((2, 4, 3)), np.broadcast_to(a, (2, 4, 3)))
    assert_np(nd.broadcast_to(x, (0, 5, 0)), np.broadcast_to(a, (2, 5, 3)))  # 0 keeps the dim
    like = nd.broadcast_like(x, nd.zeros((2, 4, 3), dtype=np.int32))
    assert like.dtype == np.float32 and like.shape == (2, 4, 3)
    assert nd.broadcast_like(nd.ones((1, 2, 1, 3)), nd.ones((5, 6, 7, 8)), lhs_axes=(0, 2), rhs_axes=(1, 3)).shape == (6, 2, 8, 3)
    with pytest.raises(OperatorError, match="lhs_axes"):
        nd.broadcast_like(x, x, lhs_axes=(), rhs_axes=())
    r = nd.reshape_like(nd.array(grid(2, 3)), nd.zeros((3, 2), dtype=np.int32))
    assert r.dtype == np.float32
    assert_np(r, grid(2, 3).reshape(3, 2))


def test_flip_swapaxes_moveaxis() -> None:
    a = grid(2, 3, 4)
    x = nd.array(a)
    assert_np(nd.flip(x, axis=1), a[:, ::-1])
    assert_np(nd.reverse(x, axis=(0, 2)), a[::-1, :, ::-1])
    assert_np(x.swapaxes(0, 2), np.swapaxes(a, 0, 2))
    assert_np(nd.moveaxis(x, 0, -1), np.moveaxis(a, 0, -1))
    assert_np(nd.moveaxis(x, [0, 1], [2, 0]), np.moveaxis(a, [0, 1], [2, 0]))
    with pytest.raises(OperatorError, match="moveaxis"):
        nd.moveaxis(x, 3, 0)
    with pytest.raises(ValueError, match="same number"):
        nd.moveaxis(x, [0, 1], [0])
    with pytest.raises(ValueError, match="repeated"):
        nd.moveaxis(x, [0, 0], [0, 1])


# ---------------------------------------------------------------------------- elementwise
def test_rounding_square_clip() -> None:
    a = np.array([-2.5, -1.5, -0.4, 0.5, 1.5, 2.7], dtype=np.float32)
    x = nd.array(a)
    assert_np(x.floor(), np.floor(a))
    assert_np(nd.ceil(x), np.ceil(a))
    assert_np(x.round(), [-3, -2, -0, 1, 2, 3])  # halves away from zero, as MXNet (C's round)
    assert_np(nd.rint(x), np.rint(a))
    assert_np(x.trunc(), np.trunc(a))
    assert_np(nd.fix(x), np.fix(a))
    assert_np(x.square(), a * a)
    assert_np(nd.clip(x, -1, 1), np.clip(a, -1, 1))
    big = nd.array([50000001], dtype="int32")
    assert big.floor().dtype == np.int32 and int(big.round().asscalar()) == 50000001
    with pytest.raises(OperatorError, match="clip: a_min"):
        x.clip(2, 1)


# ---------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("axis", [None, 0, 2, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_max_min_norm(axis: Any, keepdims: bool) -> None:
    a = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    x = nd.array(a)
    for ours, ref in ((nd.max(x, axis, keepdims), np.max), (x.min(axis=axis, keepdims=keepdims), np.min)):
        expected = ref(a, axis=axis, keepdims=keepdims)
        assert_np(ours, expected if expected.shape else expected.reshape(1))
    n2 = np.linalg.norm(a.reshape(-1)) if axis is None else np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims))
    n2 = np.asarray(n2).reshape(1) if axis is None and not keepdims else n2
    if axis is None and keepdims:
        n2 = np.asarray(n2).reshape(1, 1, 1)
    np.testing.assert_allclose(nd.norm(x, axis=axis, keepdims=keepdims).asnumpy(), n2, rtol=1e-5)
    n1 = np.sum(np.abs(a), axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(x.norm(ord=1, axis=axis, keepdims=keepdims).asnumpy().reshape(np.shape(n1)), n1, rtol=1e-5)


def test_reduction_dtypes_and_errors() -> None:
    h = nd.array([np.finfo("float16").min, np.finfo("float16").max], dtype="float16")
    assert nd.max(h).dtype == np.float16 and nd.max(h).asscalar() == np.finfo("float16").max
    assert nd.norm(nd.ones((2, 2)), out_dtype="float64").dtype == np.float64
    with pytest.raises(OperatorError, match="norm: ord must be 1 or 2"):
        nd.norm(nd.ones((2,)), ord=3)
    with pytest.raises(OperatorError, match=r"max: axis 3 is out of range for shape \(2, 2\)"):
        nd.max(nd.ones((2, 2)), axis=3)


def test_argmax_argmin() -> None:
    a = np.array([[1, 5, 2], [7, 0, 3]], dtype=np.float32)
    x = nd.array(a)
    assert_np(nd.argmax(x, axis=1), [1, 0])
    assert_np(x.argmin(axis=0, keepdims=True), [[0, 1, 0]])
    assert_np(nd.argmax(x), [3])  # flattened, shape (1,)
    assert nd.argmax(x, axis=1).dtype == np.float32  # MXNet: the input's dtype


# ---------------------------------------------------------------------------- take, one_hot, creation
def test_take_modes() -> None:
    a = grid(4, 3)
    x = nd.array(a)
    idx = np.array([[0, 3], [5, -1]])
    assert_np(nd.take(x, nd.array(idx)), a[np.clip(idx, 0, 3)])
    assert_np(x.take(nd.array(idx), mode="wrap"), a[np.mod(idx, 4)])
    assert_np(nd.take(x, [2, 0], axis=1), a[:, [2, 0]])
    with pytest.raises(OperatorError, match="take: mode"):
        nd.take(x, [0], mode="nope")


def test_one_hot_and_onehot_encode() -> None:
    idx = nd.array([0, 2, 5, -1])
    assert_np(nd.one_hot(idx, 3), [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
    h = idx.one_hot(3, on_value=4, off_value=-1, dtype="int32")
    assert h.dtype == np.int32 and h.asnumpy()[1].tolist() == [-1, -1, 4]
    out = nd.zeros((2, 4))
    assert nd.onehot_encode(nd.array([3, 1]), out) is out
    assert_np(out, [[0, 0, 0, 1], [0, 1, 0, 0]])


def test_eye_linspace_from_numpy() -> None:
    assert_np(nd.eye(3, 4, 1), np.eye(3, 4, 1))
    assert_np(nd.eye(3, k=-1), np.eye(3, k=-1))
    assert_np(nd.linspace(0, 1, 5), np.linspace(0, 1, 5))
    assert_np(nd.linspace(0, 1, 4, endpoint=False), np.linspace(0, 1, 4, endpoint=False))
    assert nd.linspace(0, 10, 3, dtype="int32").dtype == np.int32
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = nd.from_numpy(a)
    assert not a.flags.writeable  # as MXNet: the NDArray owns the buffer now
    x[1, 2] = 100
    x.wait_to_read()  # the write is an engine op like any other
    assert a[1, 2] == 100  # zero-copy: the same memory
    assert nd.from_numpy(a).asnumpy()[1, 2] == 100  # a second zero-copy of the same array
    c = nd.from_numpy(np.ones(3), zero_copy=False)
    assert c.dtype == np.float64
    with pytest.raises(ValueError, match="C-contiguous"):
        nd.from_numpy(np.ones((2, 3)).T)


# ---------------------------------------------------------------------------- joining and splitting
def test_concat_stack_split() -> None:
    a, b = grid(2, 3), grid(2, 1) * 10
    assert_np(nd.concat(nd.array(a), nd.array(b)), np.concatenate([a, b], axis=1))  # MXNet's default dim=1
    assert_np(nd.concatenate([nd.array(a), nd.array(a)]), np.concatenate([a, a]))
    assert_np(nd.stack(nd.array(a), nd.array(a), axis=2), np.stack([a, a], axis=2))
    parts = nd.split(nd.array(a), num_outputs=3, axis=1)
    assert [p.shape for p in parts] == [(2, 1)] * 3
    assert_np(parts[2], a[:, 2:])
    sq = nd.array(a).split(2, axis=0, squeeze_axis=True)
    assert_np(sq[1], a[1])
    assert isinstance(nd.split(nd.array(a), 1), mx.nd.NDArray)
    with pytest.raises(OperatorError, match=r"Concat: shapes \(2, 3\) and \(3, 1\)"):
        nd.concat(nd.array(a), nd.ones((3, 1)))
    with pytest.raises(OperatorError, match="SliceChannel: cannot split axis 1 of shape"):
        nd.split(nd.array(a), 2)


def test_split_is_one_push_writing_every_output() -> None:
    x = nd.array(grid(4, 2))
    x.wait_to_read()
    with record_pushes() as rec:
        parts = nd.split(x, 4, axis=0)
    assert rec.names == ["SliceChannel"]
    assert {id(v) for v in rec.oprs[0].writes} == {id(p.var) for p in parts}


def test_split_out_grads() -> None:
    # MXNet's test_out_grads: head gradients for some outputs of one split, None for another.
    x = nd.ones((3, 5))
    dx = nd.zeros_like(x)
    ag.mark_variables([x], [dx])
    with ag.record():
        a, b, c = nd.split(x, axis=0, num_outputs=3, squeeze_axis=True)
        ag.backward([a, b, c], [None, nd.array([1, 2, 3, 4, 5]), nd.array([5, 4, 3, 2, 1])])
    assert dx.asnumpy().tolist() == [[1] * 5, [1, 2, 3, 4, 5], [5, 4, 3, 2, 1]]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.integers(1, 3),
    st.data(),
)
def test_split_then_concat_is_identity(shape: list[int], n: int, data: st.DataObject) -> None:
    axis = data.draw(st.integers(0, len(shape) - 1))
    shape[axis] *= n
    a = np.random.default_rng(len(shape)).normal(size=shape)
    parts = nd.split(nd.array(a), n, axis=axis)
    parts = [parts] if n == 1 else parts
    assert_np(nd.concat(*parts, dim=axis), a)


# ---------------------------------------------------------------------------- sorting
def test_topk_sort_argsort() -> None:
    a = np.array([[3, 1, 4, 1.5], [9, 2, 6, 5]], dtype=np.float32)
    x = nd.array(a)
    assert_np(nd.topk(x, k=2), [[2, 0], [0, 2]])
    assert nd.topk(x).dtype == np.float32 and nd.topk(x, dtype="int32").dtype == np.int32
    assert_np(x.topk(k=2, ret_typ="value", is_ascend=True), [[1, 1.5], [2, 5]])
    assert_np(nd.topk(x, axis=0, ret_typ="mask"), [[0, 0, 0, 0], [1, 1, 1, 1]])
    v, i = nd.topk(x, axis=None, k=3, ret_typ="both")
    assert_np(v, [9, 6, 5])
    assert_np(i, [4, 6, 7])
    assert_np(nd.sort(x), np.sort(a))
    assert_np(x.sort(axis=0, is_ascend=False), np.sort(a, axis=0)[::-1])
    assert_np(nd.argsort(x, axis=None), np.argsort(a, axis=None))
    assert nd.argsort(x, dtype="float64").dtype == np.float64
    with pytest.raises(OperatorError, match="topk: k=5"):
        nd.topk(x, k=5)
    with pytest.raises(OperatorError, match="ret_typ"):
        nd.topk(x, ret_typ="nope")


def test_topk_of_many_elements_uses_the_same_order() -> None:
    a = np.random.default_rng(1).permutation(1000).astype(np.float64).reshape(2, 500)
    assert_np(nd.topk(nd.array(a), k=3), np.argsort(a, axis=1)[:, ::-1][:, :3])
    assert_np(nd.topk(nd.array(a), k=3, is_ascend=True, ret_typ="value"), np.sort(a, axis=1)[:, :3])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-100, 100, width=32), min_size=1, max_size=20), st.booleans())
def test_sort_matches_numpy(values: list[float], ascend: bool) -> None:
    a = np.array(values, dtype=np.float32)
    expected = np.sort(a) if ascend else np.sort(a)[::-1]
    assert_np(nd.sort(nd.array(a), is_ascend=ascend), expected)
    order = nd.argsort(nd.array(a), is_ascend=ascend).asnumpy().astype(int)
    np.testing.assert_array_equal(a[order], expected)


# ---------------------------------------------------------------------------- softmax, dropout
def _softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_softmax_family() -> None:
    a = np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)
    x = nd.array(a)
    assert_np(nd.softmax(x), _softmax(a, -1))
    assert_np(x.softmax(axis=0, temperature=2.0), _softmax(a / 2, 0))
    assert_np(nd.log_softmax(x), np.log(_softmax(a, -1)))
    assert_np(nd.softmin(x), _softmax(-a, -1))
    assert nd.softmax(x.astype("float16")).dtype == np.float16
    assert nd.softmax(x, dtype="float64").dtype == np.float64
    with pytest.raises(OperatorError, match="softmax: axis 2 is out of range"):
        nd.softmax(x, axis=2)


def test_dropout_is_identity_unless_training() -> None:
    x = nd.ones((20, 20))
    assert_np(nd.Dropout(x, p=0.5), np.ones((20, 20)))
    with ag.record():
        y = nd.Dropout(x, p=0.5)
    v = y.asnumpy()
    assert set(np.unique(v)) == {0.0, 2.0}  # kept values scaled by 1/(1-p)
    with ag.train_mode():
        assert nd.Dropout(x, p=0.5, axes=(1,)).asnumpy().std(axis=1).max() == 0  # one mask per row
    assert set(np.unique(nd.Dropout(x, p=0.25, mode="always").asnumpy())) <= {0.0, np.float32(4 / 3)}
    with pytest.raises(OperatorError, match="Dropout: p must be in"):
        nd.Dropout(x, p=1.5)


def test_dropout_gradient_is_the_mask() -> None:
    x = nd.ones((10, 10))
    x.attach_grad()
    with ag.record():
        y = nd.Dropout(x, p=0.5)
    y.backward()
    assert (x.grad.asnumpy() == y.asnumpy()).all()


def test_dropout_masks_do_not_depend_on_the_engine() -> None:
    mx.random.seed(11)
    with ag.train_mode():
        first = nd.Dropout(nd.ones((8, 8)), p=0.5).asnumpy()
    mx.set_engine("naive")
    try:
        mx.random.seed(11)
        with ag.train_mode():
            again = nd.Dropout(nd.ones((8, 8)), p=0.5).asnumpy()
    finally:
        mx.set_engine("threaded")
    np.testing.assert_array_equal(first, again)


# ---------------------------------------------------------------------------- slice_like, pick, crop, gather_nd
def test_slice_like() -> None:
    a = grid(3, 4)
    x = nd.array(a)
    like = nd.zeros((2, 3), dtype="int32")
    z = nd.slice_like(x, like)
    assert z.dtype == np.float32
    assert_np(z, a[:2, :3])
    assert_np(nd.slice_like(x, nd.zeros((1, 2)), axes=(1,)), a[:, :2])
    assert_np(nd.slice_like(x, nd.zeros((1, 2)), axes=(0, -1)), a[:1, :2])
    with pytest.raises(OperatorError, match=r"slice_like: cannot slice axis 1 of shape \(3, 4\)"):
        nd.slice_like(x, nd.zeros((2, 5)))
    with pytest.raises(OperatorError, match="slice_like: with no axes"):
        nd.slice_like(x, nd.zeros((2,)))


def test_pick_choose_batch_take_fill() -> None:
    a = grid(3, 4)
    x = nd.array(a)
    idx = np.array([0, 3, 5])  # 5 is out of range: clipped to 3
    clipped = np.clip(idx, 0, 3)
    assert_np(nd.pick(x, nd.array(idx)), a[np.arange(3), clipped])
    assert_np(nd.choose_element_0index(x, nd.array(idx)), a[np.arange(3), clipped])
    assert_np(nd.pick(x, nd.array([2, -1, 5]), mode="wrap"), a[np.arange(3), np.mod([2, -1, 5], 4)])
    assert_np(nd.pick(x, nd.array([2, 0, 1, 1]), axis=0, keepdims=True), a[[2, 0, 1, 1], np.arange(4)][None, :])
    assert_np(nd.batch_take(x, nd.array(idx, dtype="int32")), a[np.arange(3), clipped])
    filled = a.copy()
    filled[np.arange(3), [1, 0, 3]] = [10, 20, 30]
    assert_np(nd.fill_element_0index(x, nd.array([10, 20, 30]), nd.array([1, 0, 3])), filled)
    assert_np(x, a)  # the input is unchanged
    with pytest.raises(OperatorError, match=r"batch_take: needs 2-D data"):
        nd.batch_take(x, nd.array([0, 1]))
    with pytest.raises(OperatorError, match=r"pick: mode must be"):
        nd.pick(x, nd.array(idx), mode="raise")


def test_crop_and_crop_assign() -> None:
    a = grid(2, 3, 4)
    x = nd.array(a)
    assert_np(nd.crop(x, begin=(0, 1, 1), end=(2, 3, 4)), a[0:2, 1:3, 1:4])
    assert_np(nd.crop(x, begin=(None, 0), end=(None, 3), step=(None, 2)), a[:, 0:3:2])
    y = nd.array(a)
    out = nd._internal._crop_assign(y, nd.zeros((2, 1, 3)), begin=(0, 0, 0), end=(2, 1, 3), out=y)
    expected = a.copy()
    expected[0:2, 0:1, 0:3] = 0
    assert out is y
    assert_np(y, expected)
    fresh = nd._internal._crop_assign_scalar(x, scalar=5, begin=(1,), end=(2,))
    expected = a.copy()
    expected[1:2] = 5
    assert_np(fresh, expected)
    assert_np(x, a)
    with pytest.raises(OperatorError, match="_slice_assign: cannot assign shape"):
        nd._internal._crop_assign(y, nd.zeros((2, 2)), begin=(0, 0), end=(1, 1), out=y)


def test_gather_nd() -> None:
    a = grid(2, 3, 2)
    x = nd.array(a)
    idx = np.array([[0, 1, -1], [2, 0, -3]])
    assert_np(nd.gather_nd(x, nd.array(idx)), a[np.mod(idx[0], 2), np.mod(idx[1], 3)])
    assert_np(nd.gather_nd(x, nd.array([[1, 0]])), a[[1, 0]])
    bad = nd.gather_nd(x, nd.array([[0, 2]]))  # raises when it runs, as an IndexError
    with pytest.raises(IndexError, match="gather_nd: index 2 is out of bounds for axis 0 with size 2"):
        bad.asnumpy()
    with pytest.raises(OperatorError, match=r"gather_nd: indices of shape \(4, 1\)"):
        nd.gather_nd(x, nd.array([[0], [0], [0], [0]]))


def test_sample_normal() -> None:
    mu, sigma = nd.array([10.0, -3.0]), nd.array([0.5, 0.0])
    assert nd.sample_normal(mu, sigma).shape == (2,)
    assert nd.sample_normal(mu, sigma, shape=1).shape == (2, 1)
    mx.random.seed(3)
    s = nd.sample_normal(mu, sigma, shape=(2000,))
    mx.random.seed(3)
    again = nd.sample_normal(mu, sigma, shape=(2000,)).asnumpy()
    got = s.asnumpy()
    assert got.shape == (2, 2000) and got.dtype == np.float32
    np.testing.assert_array_equal(got, again)
    assert abs(got[0].mean() - 10.0) < 0.05 and abs(got[0].std() - 0.5) < 0.05
    np.testing.assert_array_equal(got[1], -3.0)  # sigma 0: exactly mu
    with pytest.raises(OperatorError, match="_sample_normal: mu and sigma must have the same shape"):
        nd.sample_normal(mu, nd.array([1.0]))


# ---------------------------------------------------------------------------- Pooling, FullyConnected
def ref_pool(
    x: np.ndarray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    kind: str,
    out_sizes: tuple[int, ...],
    include_pad: bool = True,
) -> np.ndarray:
    """Pooling written out window by window: padded values never win a max, and count in an average's divisor."""
    out = np.zeros(x.shape[:2] + out_sizes)
    for pos in np.ndindex(*out_sizes):
        sl, size, clipped = [], 1, 1
        for o, n, k, s, p in zip(pos, x.shape[2:], kernel, stride, pad, strict=True):
            start, end = o * s - p, min(o * s - p + k, n + p)
            lo, hi = max(start, 0), min(end, n)
            sl.append(slice(lo, hi))
            size, clipped = size * (end - start), clipped * (hi - lo)
        w = x[(Ellipsis, *sl)].reshape(x.shape[0], x.shape[1], -1)
        v = w.max(axis=2) if kind == "max" else w.sum(axis=2)
        if kind == "avg":
            v = v / (size if include_pad else clipped)
        out[(Ellipsis, *pos)] = v
    return out


@pytest.mark.parametrize("kind", ["max", "avg", "sum"])
def test_pooling_2d_matches_reference(kind: str) -> None:
    x = np.random.default_rng(0).normal(size=(2, 3, 5, 6)).astype(np.float32)
    # valid: 1 + (5 + 2 - 3) // 2 = 3 and 1 + (6 + 0 - 2) // 2 = 3
    y = nd.Pooling(nd.array(x), kernel=(3, 2), stride=(2, 2), pad=(1, 0), pool_type=kind)
    np.testing.assert_allclose(y.asnumpy(), ref_pool(x, (3, 2), (2, 2), (1, 0), kind, (3, 3)), rtol=1e-5, atol=1e-6)
    x7 = np.random.default_rng(1).normal(size=(2, 3, 5, 7)).astype(np.float32)
    full = nd.Pooling(nd.array(x7), kernel=(2, 2), stride=(3, 3), pool_type=kind, pooling_convention="full")
    assert full.shape == (2, 3, 2, 3)  # 1 + ceil(3 / 3) = 2, 1 + ceil(5 / 3) = 3: the last window is cut short
    np.testing.assert_allclose(full.asnumpy(), ref_pool(x7, (2, 2), (3, 3), (0, 0), kind, (2, 3)), rtol=1e-5, atol=1e-6)
    valid = nd.Pooling(nd.array(x7), kernel=(2, 2), stride=(3, 3), pool_type=kind)
    assert valid.shape == (2, 3, 2, 2)
    np.testing.assert_allclose(valid.asnumpy(), ref_pool(x7, (2, 2), (3, 3), (0, 0), kind, (2, 2)), rtol=1e-5, atol=1e-6)


def test_pooling_avg_count_include_pad_and_global() -> None:
    x = grid(1, 2, 5)
    y = nd.Pooling(nd.array(x), kernel=(3,), stride=(2,), pad=(1,), pool_type="avg", count_include_pad=False)
    np.testing.assert_allclose(y.asnumpy(), ref_pool(x, (3,), (2,), (1,), "avg", (3,), include_pad=False), rtol=1e-6)
    with_pad = nd.Pooling(nd.array(x), kernel=(3,), stride=(2,), pad=(1,), pool_type="avg")
    np.testing.assert_allclose(with_pad.asnumpy()[0, 0, 0], (x[0, 0, 0] + x[0, 0, 1]) / 3, rtol=1e-6)
    g = grid(2, 3, 4, 2)
    assert_np(nd.Pooling(nd.array(g), global_pool=True, pool_type="max"), g.max(axis=(2, 3), keepdims=True))
    assert_np(nd.Pooling(nd.array(g), kernel=(1, 1), global_pool=True, pool_type="avg"), g.mean(axis=(2, 3), keepdims=True))


def test_pooling_same_convention_and_errors() -> None:
    x = grid(1, 1, 10)
    y = nd.Pooling(nd.array(x), kernel=2, stride=2, pad=(0, 0, 0), pooling_convention="same")
    assert y.shape == (1, 1, 5)
    assert_np(y, x.reshape(1, 1, 5, 2).max(axis=3))
    odd = nd.Pooling(nd.array(grid(1, 1, 7)), kernel=3, stride=2, pooling_convention="same", pool_type="sum")
    assert odd.shape == (1, 1, 4)  # ceil(7 / 2); the last window is cut at the end
    assert_np(odd, [[[-5 - 4 - 3, -3 - 2 - 1, -1 + 0 + 1, 1]]])
    with pytest.raises(OperatorError, match="Pooling: pooling_convention='same' does not allow a pad"):
        nd.Pooling(nd.array(x), kernel=2, stride=2, pad=2, pooling_convention="same")
    with pytest.raises(OperatorError, match="Pooling: pooling_convention='same' supports 1-D"):
        nd.Pooling(nd.array(grid(1, 1, 4, 4)), kernel=(2, 2), pooling_convention="same")
    with pytest.raises(OperatorError, match=r"Pooling: kernel \(6,\) exceeds input of shape \(1, 1, 5\)"):
        nd.Pooling(nd.array(grid(1, 1, 5)), kernel=6)
    with pytest.raises(OperatorError, match="Pooling: a 2-D kernel"):
        nd.Pooling(nd.array(grid(1, 1, 5)), kernel=(2, 2))
    with pytest.raises(OperatorError, match="Pooling: pool_type must be one of"):
        nd.Pooling(nd.array(x), kernel=2, pool_type="median")


def test_fully_connected() -> None:
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=(4, 2, 3)), rng.normal(size=(5, 6)), rng.normal(size=(5,))
    y = nd.FullyConnected(nd.array(x), nd.array(w), nd.array(b), num_hidden=5)
    np.testing.assert_allclose(y.asnumpy(), x.reshape(4, 6) @ w.T + b, rtol=1e-5, atol=1e-5)
    w2 = rng.normal(size=(5, 3))
    y2 = nd.FullyConnected(nd.array(x), nd.array(w2), num_hidden=5, no_bias=True, flatten=False)
    assert y2.shape == (4, 2, 5)
    np.testing.assert_allclose(y2.asnumpy(), x @ w2.T, rtol=1e-5, atol=1e-5)
    with pytest.raises(OperatorError, match=r"FullyConnected: weight of shape \(5, 6\) does not fit data of shape \(4, 2, 3\)"):
        nd.FullyConnected(nd.array(x), nd.array(w), nd.array(b), num_hidden=5, flatten=False)
    with pytest.raises(OperatorError, match=r"FullyConnected: bias must have shape \(5,\)"):
        nd.FullyConnected(nd.array(x), nd.array(w), nd.array(b[:3]), num_hidden=5)


# ---------------------------------------------------------------------------- optimizer updates
def _clip(g: np.ndarray, c: float) -> np.ndarray:
    return np.clip(g, -c, c) if c >= 0 else g


def _update_case(name: str) -> tuple[dict[str, float], Any]:
    """The op's parameters and a NumPy reference ``(w, g, states) -> (new_w, new_states)``."""
    lr, wd, rg, cg = 0.1, 0.01, 0.5, 0.3

    def sgd(w: Any, g: Any, s: Any) -> Any:
        return (1 - lr * wd) * w - lr * _clip(rg * g, cg), []

    def sgd_mom(w: Any, g: Any, s: Any) -> Any:
        mom = 0.9 * s[0] - lr * wd * w - lr * _clip(rg * g, cg)
        return w + mom, [mom]

    def nag_mom(w: Any, g: Any, s: Any) -> Any:
        step = _clip(rg * g, cg) + wd * w
        mom = 0.9 * s[0] - lr * step
        return w + 0.9 * mom - lr * step, [mom]

    def signsgd(w: Any, g: Any, s: Any) -> Any:
        return (1 - lr * wd) * w - lr * np.sign(g), []

    def signum(w: Any, g: Any, s: Any) -> Any:
        mom = 0.9 * s[0] - 0.1 * wd * w - 0.1 * _clip(rg * g, cg)
        return (1 - lr * 0.02) * w + lr * np.sign(mom), [mom]

    def adam(w: Any, g: Any, s: Any) -> Any:
        gr = _clip(rg * g + wd * w, cg)
        m, v = 0.9 * s[0] + 0.1 * gr, 0.999 * s[1] + 0.001 * gr * gr
        return w - lr * m / (np.sqrt(v) + 1e-8), [m, v]

    def rmsprop(w: Any, g: Any, s: Any) -> Any:
        gr = _clip(rg * g + wd * w, cg)
        n = 0.05 * gr * gr + 0.95 * s[0]
        return _clip(w - lr * gr / np.sqrt(n + 1e-8), 0.9), [n]

    def rmspropalex(w: Any, g: Any, s: Any) -> Any:
        gr = _clip(rg * g + wd * w, cg)
        n, mean = 0.05 * gr * gr + 0.95 * s[0], 0.05 * gr + 0.95 * s[1]
        delta = 0.9 * s[2] - lr * gr / np.sqrt(n - mean * mean + 1e-8)
        return w + delta, [n, mean, delta]

    def ftrl(w: Any, g: Any, s: Any) -> Any:
        gr = _clip(rg * g, cg)
        z = s[0] + gr - (np.sqrt(s[1] + gr * gr) - np.sqrt(s[1])) * w / lr
        n = s[1] + gr * gr
        return (np.sign(z) * 0.01 - z) / ((1.0 + np.sqrt(n)) / lr + wd) * (np.abs(z) > 0.01), [z, n]

    def ftml(w: Any, g: Any, s: Any) -> Any:
        t = 3
        gr = _clip(rg * g + wd * w, cg)
        v = 0.999 * s[1] + 0.001 * gr * gr
        d = (1 - 0.6**t) / lr * (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        z = 0.6 * s[2] + 0.4 * gr - (d - 0.6 * s[0]) * w
        return -z / d, [d, v, z]

    base = {"lr": lr, "wd": wd, "rescale_grad": rg}
    cases: dict[str, tuple[dict[str, float], Any]] = {
        "sgd_update": ({**base, "clip_gradient": cg}, sgd),
        "sgd_mom_update": ({**base, "clip_gradient": cg, "momentum": 0.9}, sgd_mom),
        "nag_mom_update": ({**base, "clip_gradient": cg, "momentum": 0.9}, nag_mom),
        "signsgd_update": ({**base, "clip_gradient": cg}, signsgd),
        "signum_update": ({**base, "clip_gradient": cg, "momentum": 0.9, "wd_lh": 0.02}, signum),
        "adam_update": ({**base, "clip_gradient": cg}, adam),
        "rmsprop_update": ({**base, "clip_gradient": cg, "clip_weights": 0.9}, rmsprop),
        "rmspropalex_update": ({**base, "clip_gradient": cg}, rmspropalex),
        "ftrl_update": ({**base, "clip_gradient": cg}, ftrl),
        "ftml_update": ({**base, "clip_grad": cg, "t": 3}, ftml),
    }
    return cases[name]


UPDATE_STATE_COUNTS = {
    "sgd_update": 0,
    "sgd_mom_update": 1,
    "nag_mom_update": 1,
    "signsgd_update": 0,
    "signum_update": 1,
    "adam_update": 2,
    "rmsprop_update": 1,
    "rmspropalex_update": 3,
    "ftrl_update": 2,
    "ftml_update": 3,
}


@pytest.mark.parametrize("name", sorted(UPDATE_STATE_COUNTS))
def test_update_op_matches_reference(name: str) -> None:
    rng = np.random.default_rng(5)
    shape = (3, 4)
    w, g = rng.normal(size=shape), rng.normal(size=shape) * 2
    states = [rng.uniform(0.5, 1.0, size=shape) for _ in range(UPDATE_STATE_COUNTS[name])]  # positive: n, v are squares
    if name == "rmspropalex_update":
        states[1] *= 0.3  # the running mean of g, small enough that n - mean² stays positive
    params, ref = _update_case(name)
    new_w, new_states = ref(w, g, states)
    assert np.isfinite(new_w).all()
    weight, grad = nd.array(w, dtype="float64"), nd.array(g, dtype="float64")
    nd_states = [nd.array(s, dtype="float64") for s in states]
    result = getattr(nd, name)(weight, grad, *nd_states, out=weight, **params)
    assert result is weight
    np.testing.assert_allclose(weight.asnumpy(), new_w, rtol=1e-10, atol=1e-12)
    for got, expected in zip(nd_states, new_states, strict=True):
        np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(grad.asnumpy(), g)  # the gradient is only read


def test_update_ops_defaults_new_output_and_errors() -> None:
    w, g = nd.array([1.0, -2.0]), nd.array([0.5, 3.0])
    fresh = nd.sgd_update(w, g, lr=0.1)  # no clipping, no wd, rescale 1 by default
    assert_np(fresh, [0.95, -2.3])
    assert_np(w, [1.0, -2.0])
    mom = nd.zeros((2,))
    nd.sgd_mom_update(w, g, mom, lr=0.1, momentum=0.5, out=w)
    nd.sgd_mom_update(w, g, mom, lr=0.1, momentum=0.5, out=w)  # the second update reads the first's mom
    assert_np(mom, [-0.075, -0.45])
    assert_np(w, [1.0 - 0.05 - 0.075, -2.0 - 0.3 - 0.45])
    mean, var = nd.zeros((2,)), nd.zeros((2,))
    nd.adam_update(w, g, mean=mean, var=var, lr=0.01, out=w)
    np.testing.assert_allclose(mean.asnumpy(), [0.05, 0.3], rtol=1e-6)
    with pytest.raises(TypeError, match="sgd_update: the parameter 'lr' is required"):
        nd.sgd_update(w, g)
    with pytest.raises(TypeError, match="sgd_mom_update: needs weight, grad and the states mom"):
        nd.sgd_mom_update(w, g, lr=0.1)
    with pytest.raises(TypeError, match="sgd_update: unknown parameter 'momentum'"):
        nd.sgd_update(w, g, lr=0.1, momentum=0.9)
    with pytest.raises(OperatorError, match=r"adam_update: weight, grad and states must have the same shape"):
        nd.adam_update(w, g, nd.zeros((3,)), var, lr=0.1)


# ---------------------------------------------------------------------------- SoftmaxOutput, contrib ops, Correlation
def test_basic_indexing_slice_is_contiguous_matches_numpy() -> None:
    x = np.zeros((3, 4, 5))
    pred = mx.nd.NDArray._basic_indexing_slice_is_contiguous
    for key in [
        (slice(None),) * 3,
        (slice(1, 2), slice(None), slice(None)),
        (slice(None), slice(1, 3), slice(None)),
        (slice(None), slice(None), slice(None, None, 2)),
        (slice(0, 1), slice(0, 1), slice(None, None, -1)),
        (slice(0, 1), slice(2, 3), slice(4, 5)),
        (slice(0, 0), slice(None), slice(None, None, 2)),
    ]:
        assert pred(key, x.shape) == x[key].flags.contiguous, key


def test_softmax_output_forward_and_label_shape() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 2, 2))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    out = mx.nd.SoftmaxOutput(mx.nd.array(x), mx.nd.zeros((2, 2, 2)), multi_output=True)
    np.testing.assert_allclose(out.asnumpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    flat = x.reshape(2, 12)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    out = mx.nd.SoftmaxOutput(mx.nd.array(x), mx.nd.zeros((2,)))
    np.testing.assert_allclose(out.asnumpy(), (e / e.sum(axis=1, keepdims=True)).reshape(x.shape), rtol=1e-5)
    with pytest.raises(OperatorError, match="SoftmaxOutput"):
        mx.nd.SoftmaxOutput(mx.nd.array(x), mx.nd.zeros((3,)))


def test_softmax_output_label_gets_no_gradient() -> None:
    x, label = mx.nd.array([[1.0, 2.0, 0.5]]), mx.nd.array([1.0])
    x.attach_grad()
    label.attach_grad()
    with mx.autograd.record():
        y = mx.nd.SoftmaxOutput(x, label, grad_scale=2.0)
    y.backward()
    p = np.exp([1.0, 2.0, 0.5]) / np.exp([1.0, 2.0, 0.5]).sum()
    np.testing.assert_allclose(x.grad.asnumpy(), [2 * (p - [0, 1, 0])], rtol=1e-5)
    np.testing.assert_array_equal(label.grad.asnumpy(), [0.0])


def _adaptive_ref(x: np.ndarray, oh: int, ow: int) -> np.ndarray:
    h, w = x.shape[2:]
    y = np.empty((*x.shape[:2], oh, ow))
    for i in range(oh):
        h0, h1 = int(np.floor(i * h / oh)), int(np.ceil((i + 1) * h / oh))
        for j in range(ow):
            w0, w1 = int(np.floor(j * w / ow)), int(np.ceil((j + 1) * w / ow))
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return y


@pytest.mark.parametrize("size", [1, 3, (2, 5), (7, 4)])
def test_adaptive_avg_pooling_matches_reference(size: Any) -> None:
    x = np.random.default_rng(1).uniform(size=(2, 3, 7, 5))
    oh, ow = (size, size) if isinstance(size, int) else size
    y = mx.nd.contrib.AdaptiveAvgPooling2D(mx.nd.array(x), output_size=size)
    np.testing.assert_allclose(y.asnumpy(), _adaptive_ref(x, oh, ow), rtol=1e-5)
    with pytest.raises(OperatorError, match="AdaptiveAvgPooling2D"):
        mx.nd.contrib.AdaptiveAvgPooling2D(mx.nd.zeros((2, 3, 4)), output_size=2)


def test_quantize_int8_and_uint8_round_trip() -> None:
    x = np.array([[-0.9, -0.2, 0.0], [0.3, 0.55, 1.0]], dtype=np.float32)
    lo, hi = mx.nd.array([-1.0]), mx.nd.array([1.0])
    q, qmin, qmax = mx.nd.contrib.quantize(mx.nd.array(x), lo, hi, out_type="int8")
    assert q.dtype == np.int8
    np.testing.assert_array_equal(q.asnumpy(), np.trunc(np.sign(x) * np.minimum(np.abs(x) * 127 + 0.5, 127)))
    np.testing.assert_array_equal([qmin.asscalar(), qmax.asscalar()], [-1.0, 1.0])
    back = mx.nd.contrib.dequantize(q, qmin, qmax)
    np.testing.assert_allclose(back.asnumpy(), x, atol=1 / 127)
    q, qmin, qmax = mx.nd.contrib.quantize(mx.nd.array(x), lo, hi, out_type="uint8")
    assert q.dtype == np.uint8
    np.testing.assert_array_equal(q.asnumpy(), np.trunc((x + 1) * np.float32(127.5) + 0.5))
    back = mx.nd.contrib.dequantize(q, qmin, qmax)
    np.testing.assert_allclose(back.asnumpy(), x, atol=2 / 255)


def _correlation_ref(a: np.ndarray, b: np.ndarray, k: int, md: int, s1: int, s2: int, pad: int, mul: bool) -> np.ndarray:
    n, c, h, w = a.shape
    pa = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    pb = np.pad(b, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    border = md + (k - 1) // 2
    th = int(np.ceil((h + 2 * pad - 2 * border) / s1))
    tw = int(np.ceil((w + 2 * pad - 2 * border) / s1))
    r = md // s2
    gw = 2 * r + 1
    out = np.zeros((n, gw * gw, th, tw))
    for i in range(th):
        for j in range(tw):
            y1, x1 = i * s1 + md, j * s1 + md
            for tc in range(gw * gw):
                y2, x2 = y1 + (tc // gw - r) * s2, x1 + (tc % gw - r) * s2
                p1 = pa[:, :, y1 : y1 + k, x1 : x1 + k]
                p2 = pb[:, :, y2 : y2 + k, x2 : x2 + k]
                v = p1 * p2 if mul else np.abs(p1 - p2)
                out[:, tc, i, j] = v.sum(axis=(1, 2, 3)) / (k * k * c)
    return out


@pytest.mark.parametrize(
    "k,md,s1,s2,pad,mul", [(1, 1, 1, 1, 0, True), (3, 2, 1, 2, 1, True), (3, 1, 2, 1, 2, False), (5, 0, 1, 1, 0, True)]
)
def test_correlation_matches_reference(k: int, md: int, s1: int, s2: int, pad: int, mul: bool) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 3, 8, 9)), rng.normal(size=(2, 3, 8, 9))
    y = mx.nd.Correlation(
        mx.nd.array(a),
        mx.nd.array(b),
        kernel_size=k,
        max_displacement=md,
        stride1=s1,
        stride2=s2,
        pad_size=pad,
        is_multiply=mul,
    )
    np.testing.assert_allclose(y.asnumpy(), _correlation_ref(a, b, k, md, s1, s2, pad, mul), rtol=1e-4, atol=1e-6)


def test_correlation_rejects_even_kernel_and_too_small_data() -> None:
    x = mx.nd.zeros((1, 1, 6, 6))
    with pytest.raises(OperatorError, match="odd"):
        mx.nd.Correlation(x, x, kernel_size=4)
    with pytest.raises(OperatorError, match="do not fit"):
        mx.nd.Correlation(x, x, kernel_size=5, max_displacement=2)


def _bn_ref(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray, axis: int, eps: float) -> Any:
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_batch_norm_training_inference_and_moving_stats(axis: int) -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(4, 3, 5))
    c = x.shape[axis]
    gamma, beta = rng.uniform(size=c), rng.uniform(size=c)
    reduce = tuple(i for i in range(3) if i != axis % 3)
    mm, mv = mx.nd.array(np.full(c, 0.2)), mx.nd.array(np.full(c, 2.0))
    args = (mx.nd.array(x), mx.nd.array(gamma), mx.nd.array(beta), mm, mv)
    # Inference: the moving statistics, which stay as they are.
    y = mx.nd.BatchNorm(*args, fix_gamma=False, eps=1e-3, axis=axis)
    ref = _bn_ref(x, gamma, beta, np.full(c, 0.2), np.full(c, 2.0), axis % 3, 1e-3)
    np.testing.assert_allclose(y.asnumpy(), ref, rtol=1e-5)
    np.testing.assert_allclose(mm.asnumpy(), np.full(c, 0.2), rtol=1e-6)
    # Training: the batch statistics; the moving ones move by (1 - momentum).
    with mx.autograd.record():
        y, mean, invstd = mx.nd.BatchNorm(*args, fix_gamma=True, eps=1e-3, momentum=0.8, axis=axis, output_mean_var=True)
    bm, bv = x.mean(axis=reduce), x.var(axis=reduce)
    np.testing.assert_allclose(y.asnumpy(), _bn_ref(x, np.ones(c), beta, bm, bv, axis % 3, 1e-3), rtol=1e-4)
    np.testing.assert_allclose(mean.asnumpy(), bm, rtol=1e-5)
    np.testing.assert_allclose(invstd.asnumpy(), 1 / np.sqrt(bv + 1e-3), rtol=1e-5)
    np.testing.assert_allclose(mm.asnumpy(), 0.2 * 0.8 + bm * 0.2, rtol=1e-5)
    np.testing.assert_allclose(mv.asnumpy(), 2.0 * 0.8 + bv * 0.2, rtol=1e-5)
    # use_global_stats: the moving statistics even when training, left unchanged.
    before = mm.asnumpy().copy()
    with mx.autograd.record():
        y = mx.nd.BatchNorm(*args, fix_gamma=False, use_global_stats=True, eps=1e-3, axis=axis)
    np.testing.assert_allclose(y.asnumpy(), _bn_ref(x, gamma, beta, before, mv.asnumpy(), axis % 3, 1e-3), rtol=1e-5)
    np.testing.assert_array_equal(mm.asnumpy(), before)


def test_batch_norm_rejects_mismatched_parameters() -> None:
    with pytest.raises(OperatorError, match="BatchNorm"):
        mx.nd.BatchNorm(mx.nd.zeros((2, 3)), *(mx.nd.ones((2,)) for _ in range(4)))


def test_sync_batch_norm_outputs_variance() -> None:
    x = np.random.default_rng(4).uniform(size=(4, 2, 3))
    ones, zeros = mx.nd.ones((2,)), mx.nd.zeros((2,))
    with mx.autograd.record():
        _, mean, var = mx.nd.contrib.SyncBatchNorm(
            mx.nd.array(x), ones, zeros, mx.nd.zeros((2,)), mx.nd.ones((2,)), output_mean_var=True, key="k"
        )
    np.testing.assert_allclose(mean.asnumpy(), x.mean(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(var.asnumpy(), x.var(axis=(0, 2)), rtol=1e-4)


def test_sum_mean_exclude_and_power() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    a = mx.nd.array(x)
    np.testing.assert_allclose(a.sum(axis=1, exclude=True).asnumpy(), x.sum(axis=(0, 2)))
    np.testing.assert_allclose(mx.nd.mean(a, axis=(0, 2), exclude=True, keepdims=True).asnumpy(), x.mean(1, keepdims=True))
    np.testing.assert_allclose(mx.nd.power(a, 2).asnumpy(), x**2)
    np.testing.assert_allclose(mx.nd.power(2, a[0]).asnumpy(), 2 ** x[0])
    np.testing.assert_allclose(mx.nd.power(a, a).asnumpy(), x**x, rtol=1e-5)
