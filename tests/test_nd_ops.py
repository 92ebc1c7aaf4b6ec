"""The shape, reduction, sorting, joining, softmax and dropout operators, through ``mx.nd`` and NDArray methods.

Each is compared with NumPy on known inputs, on both engines; bad arguments raise OperatorError at
push time, naming the operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import both_engines, record_pushes  # noqa: F401 - both_engines is an autouse fixture
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof as mx
from opprof.nd import OperatorError

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
