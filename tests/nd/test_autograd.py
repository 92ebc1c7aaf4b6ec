"""Autograd through the public API: recording state, finite-difference gradient checks, grad_req."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import opprof as mx
from opprof.nd import ops as registry
from tests.helpers import record_pushes

# Every test on both engines (the ``engine`` fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("engine")

ag = mx.autograd


# ---------------------------------------------------------------------------- fixtures and helpers


def nd64(a: Any) -> Any:
    return mx.nd.array(np.asarray(a, dtype=np.float64))


# Input generators: fixed seeds, values kept away from the kinks and edges of each op.
def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def pos(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Positive, for log / sqrt / powers."""
    return np.asarray(_rng(seed).uniform(0.5, 2.0, shape))


def signed(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Either sign, at least 0.3 away from 0 (abs, relu, division)."""
    r = _rng(seed)
    return np.asarray(r.uniform(0.3, 2.0, shape) * r.choice([-1.0, 1.0], shape))


def normal(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.asarray(_rng(seed).normal(size=shape))


def even_grid(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Near even integers; with :func:`odd_grid` no two values are closer than 0.4 (no ties)."""
    r = _rng(seed)
    return np.asarray(2.0 * r.integers(-2, 3, shape) + r.uniform(-0.3, 0.3, shape))


def odd_grid(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    r = _rng(seed)
    return np.asarray(2.0 * r.integers(-2, 2, shape) + 1.0 + r.uniform(-0.3, 0.3, shape))


EPS = 1e-6


def _forward_value(f: Callable[..., Any], arrays: list[np.ndarray]) -> Any:
    return f(*[nd64(a) for a in arrays])


def numeric_grads(f: Callable[..., Any], arrays: list[np.ndarray], w: np.ndarray) -> list[np.ndarray]:
    """Central differences of ``sum(w * f(*arrays))`` (all forwards pushed, then read)."""
    pending = []
    for i, a in enumerate(arrays):
        for idx in np.ndindex(a.shape):
            outs = []
            for sign in (1.0, -1.0):
                moved = [b.copy() for b in arrays]
                moved[i][idx] += sign * EPS
                outs.append(_forward_value(f, moved))
            pending.append((i, idx, outs))
    grads = [np.zeros_like(a) for a in arrays]
    for i, idx, (plus, minus) in pending:
        grads[i][idx] = (np.sum(w * plus.asnumpy()) - np.sum(w * minus.asnumpy())) / (2 * EPS)
    return grads


def _leaves(arrays: list[np.ndarray]) -> tuple[list[np.ndarray], list[Any]]:
    """The inputs as float64, and as NDArrays that collect their gradients."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    xs = [nd64(a) for a in arrays]
    for x in xs:
        x.attach_grad()
    return arrays, xs


def check_grad(
    f: Callable[..., Any],
    arrays: list[np.ndarray],
    op: str | None = None,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> list[np.ndarray]:
    """Compare autograd's gradient of ``sum(w * f(*xs))`` with central differences.

    ``op`` is the registry name whose ``_backward_<op>`` push must appear in the backward pass.
    """
    arrays, xs = _leaves(arrays)
    with ag.record():
        y = f(*xs)
        w = _rng(seed + 1000).uniform(0.5, 1.5, y.shape)
        loss = (y * nd64(w)).sum()
    assert loss.shape == (1,)  # as MXNet: a full reduction has shape (1,), not ()
    # The forward value is the op's value, on the inputs as they are.
    with record_pushes() as rec:
        loss.backward()
    if op is not None:
        assert f"_backward_{op.lstrip('_')}" in rec.backward_names, rec.names
    expected = numeric_grads(f, arrays, w)
    got = [x.grad.asnumpy() for x in xs]
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.shape == arrays[i].shape
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")
    return got


def check_loss_grad(
    f: Callable[..., Any], loss: Callable[..., Any], arrays: list[np.ndarray], op: str, rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """Autograd's gradient through ``f`` (whatever the head gradient) against central differences of ``loss``."""
    arrays, xs = _leaves(arrays)
    with ag.record():
        y = f(*xs)
    with record_pushes() as rec:
        y.backward(nd64(_rng(1000).uniform(0.5, 1.5, y.shape)))
    assert f"_backward_{op.lstrip('_')}" in rec.backward_names, rec.names
    expected = numeric_grads(loss, arrays, np.ones((1,)))
    for i, (x, e) in enumerate(zip(xs, expected, strict=True)):
        np.testing.assert_allclose(x.grad.asnumpy(), e, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")


def _softmax_output_weights(label: np.ndarray, classes: int, keep: np.ndarray, scale: float) -> np.ndarray:
    """one_hot(label) on axis 1, zero where not ``keep``, times ``scale``: -sum(weights * log_softmax) is the loss."""
    onehot = np.moveaxis(np.eye(classes)[label.astype(int)], -1, 1)
    return onehot * np.expand_dims(keep, 1) * scale


_SO_LABEL = np.array([0.0, 2.0, 1.0, 2.0])
_SO_W = _softmax_output_weights(_SO_LABEL, 3, np.ones(4, bool), 0.7 / 4)
_SO_ML = np.array([[[0.0, 1.0], [2.0, 1.0]], [[1.0, 1.0], [0.0, 2.0]]])
_SO_MW = _softmax_output_weights(_SO_ML, 3, _SO_ML != 1, 1.3 / 4)  # 4 labels are not the ignored 1
_SO_MN = _softmax_output_weights(_SO_ML, 3, np.ones(_SO_ML.shape, bool), 1.0 / 4)  # null: / spatial size


def _batch_norm(op: Any, x: Any, gamma: Any, beta: Any, **kwargs: Any) -> Any:
    """A training-mode (batch statistics) BatchNorm with fresh moving statistics, also outside record()."""
    c = x.shape[kwargs.get("axis", 1)]
    with ag.train_mode():
        return op(x, gamma, beta, mx.nd.zeros((c,), dtype=np.float64), mx.nd.ones((c,), dtype=np.float64), **kwargs)


# ---------------------------------------------------------------------------- recording state


def test_default_state() -> None:
    assert not ag.is_recording()
    assert not ag.is_training()


def test_record_and_pause_nesting() -> None:
    with ag.record():
        assert ag.is_recording() and ag.is_training()
        with ag.pause():
            assert not ag.is_recording() and not ag.is_training()
            with ag.record(train_mode=False):
                assert ag.is_recording() and not ag.is_training()
            assert not ag.is_recording() and not ag.is_training()
        assert ag.is_recording() and ag.is_training()
        with ag.pause(train_mode=True):
            assert not ag.is_recording() and ag.is_training()
        assert ag.is_recording() and ag.is_training()
    assert not ag.is_recording() and not ag.is_training()


def test_train_and_predict_mode_change_only_training() -> None:
    with ag.train_mode():
        assert ag.is_training() and not ag.is_recording()
        with ag.predict_mode():
            assert not ag.is_training() and not ag.is_recording()
        assert ag.is_training()
    assert not ag.is_training()
    with ag.record():
        with ag.predict_mode():
            assert ag.is_recording() and not ag.is_training()
            with ag.train_mode():
                assert ag.is_recording() and ag.is_training()
            assert not ag.is_training()
        assert ag.is_recording() and ag.is_training()
    with ag.record(train_mode=False):
        assert not ag.is_training()
        with ag.train_mode():
            assert ag.is_training() and ag.is_recording()
        assert not ag.is_training()


def test_state_restored_after_exception() -> None:
    with pytest.raises(RuntimeError):
        with ag.record():
            with ag.pause():
                raise RuntimeError("boom")
    assert not ag.is_recording() and not ag.is_training()
    with ag.record():
        with pytest.raises(KeyError):
            with ag.predict_mode():
                raise KeyError
        assert ag.is_recording() and ag.is_training()


def test_set_recording_and_training_return_previous() -> None:
    assert ag.set_recording(True) is False
    try:
        assert ag.is_recording()
        assert ag.set_recording(False) is True
    finally:
        ag.set_recording(False)
    assert ag.set_training(True) is False
    try:
        assert ag.is_training()
    finally:
        assert ag.set_training(False) is True
    assert not ag.is_recording() and not ag.is_training()


def test_recording_state_is_per_thread() -> None:
    seen: list[tuple[bool, bool]] = []
    with ag.record():
        t = threading.Thread(target=lambda: seen.append((ag.is_recording(), ag.is_training())))
        t.start()
        t.join()
    assert seen == [(False, False)]


def test_pause_stops_recording() -> None:
    x = nd64([1.0, 2.0])
    x.attach_grad()
    with ag.record():
        y = x * 2
        with ag.pause():
            z = y * 3
        u = y + 1
    with pytest.raises(ValueError):
        z.backward()
    u.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [2.0, 2.0])


# ---------------------------------------------------------------------------- gradient checks


@dataclass
class GradCase:
    id: str
    op: str  # the registry name whose backward is checked
    f: Callable[..., Any]
    inputs: list[np.ndarray]
    #: For an op whose backward is not its output's gradient (SoftmaxOutput's is the gradient of a
    #: loss it does not compute): the scalar loss whose finite differences the gradient must match.
    loss: Callable[..., Any] | None = None


S = (3, 4)

GRAD_CASES: list[GradCase] = [
    # scalar ops
    GradCase("x+s", "_plus_scalar", lambda x: x + 1.5, [normal(S)]),
    GradCase("s+x", "_plus_scalar", lambda x: 1.5 + x, [normal(S)]),
    GradCase("x-s", "_minus_scalar", lambda x: x - 1.5, [normal(S)]),
    GradCase("s-x", "_rminus_scalar", lambda x: 1.5 - x, [normal(S)]),
    GradCase("x*s", "_mul_scalar", lambda x: x * -2.5, [normal(S)]),
    GradCase("s*x", "_mul_scalar", lambda x: 3 * x, [normal(S)]),
    GradCase("x/s", "_div_scalar", lambda x: x / 3.0, [normal(S)]),
    GradCase("s/x", "_rdiv_scalar", lambda x: 3.0 / x, [signed(S)]),
    GradCase("x**3", "_power_scalar", lambda x: x**3, [signed(S)]),
    GradCase("x**0.5", "_power_scalar", lambda x: x**0.5, [pos(S)]),
    GradCase("x**-1.5", "_power_scalar", lambda x: x**-1.5, [pos(S)]),
    GradCase("2**x", "_rpower_scalar", lambda x: 2**x, [normal(S)]),
    GradCase("0.5**x", "_rpower_scalar", lambda x: 0.5**x, [normal(S)]),
    GradCase("maximum(x,s)", "_maximum_scalar", lambda x: mx.nd.maximum(x, 1.0), [even_grid(S)]),
    GradCase("maximum(s,x)", "_maximum_scalar", lambda x: mx.nd.maximum(-1.0, x), [even_grid(S)]),
    GradCase("minimum(x,s)", "_minimum_scalar", lambda x: mx.nd.minimum(x, 1.0), [even_grid(S)]),
    GradCase("minimum(s,x)", "_minimum_scalar", lambda x: mx.nd.minimum(-1.0, x), [even_grid(S)]),
    # elementwise binary ops (equal shapes)
    GradCase("x+y", "elemwise_add", lambda x, y: x + y, [normal(S, 1), normal(S, 2)]),
    GradCase("x-y", "elemwise_sub", lambda x, y: x - y, [normal(S, 1), normal(S, 2)]),
    GradCase("x*y", "elemwise_mul", lambda x, y: x * y, [normal(S, 1), normal(S, 2)]),
    GradCase("x/y", "elemwise_div", lambda x, y: x / y, [normal(S, 1), signed(S, 2)]),
    GradCase("x**y", "_power", lambda x, y: x**y, [pos(S, 1), normal(S, 2)]),
    GradCase("maximum(x,y)", "_maximum", lambda x, y: mx.nd.maximum(x, y), [even_grid(S, 1), odd_grid(S, 2)]),
    GradCase("minimum(x,y)", "_minimum", lambda x, y: mx.nd.minimum(x, y), [even_grid(S, 1), odd_grid(S, 2)]),
    # unary ops
    GradCase("abs", "abs", lambda x: mx.nd.abs(x), [signed(S)]),
    GradCase("abs()", "abs", lambda x: abs(x), [signed(S)]),
    GradCase("exp", "exp", lambda x: mx.nd.exp(x), [normal(S)]),
    GradCase("log", "log", lambda x: x.log(), [pos(S)]),
    GradCase("sqrt", "sqrt", lambda x: mx.nd.sqrt(x), [pos(S)]),
    GradCase("tanh", "tanh", lambda x: x.tanh(), [normal(S)]),
    GradCase("sigmoid", "sigmoid", lambda x: mx.nd.sigmoid(x), [normal(S) * 3]),
    GradCase("relu", "relu", lambda x: x.relu(), [signed(S)]),
    GradCase("negative", "negative", lambda x: mx.nd.negative(x), [normal(S)]),
    GradCase("-x", "negative", lambda x: -x, [normal(S)]),
    # dot
    GradCase("dot", "dot", lambda x, y: mx.nd.dot(x, y), [normal((3, 4), 1), normal((4, 2), 2)]),
    GradCase("dot ta", "dot", lambda x, y: mx.nd.dot(x, y, transpose_a=True), [normal((4, 3), 1), normal((4, 2), 2)]),
    GradCase("dot tb", "dot", lambda x, y: mx.nd.dot(x, y, transpose_b=True), [normal((3, 4), 1), normal((2, 4), 2)]),
    GradCase(
        "dot ta tb",
        "dot",
        lambda x, y: x.dot(y, transpose_a=True, transpose_b=True),
        [normal((4, 3), 1), normal((2, 4), 2)],
    ),
    GradCase("dot 1d 1d", "dot", lambda x, y: mx.nd.dot(x, y), [normal((4,), 1), normal((4,), 2)]),
    GradCase("dot 2d 1d", "dot", lambda x, y: mx.nd.dot(x, y), [normal((3, 4), 1), normal((4,), 2)]),
    GradCase("dot 1d 2d", "dot", lambda x, y: mx.nd.dot(x, y), [normal((4,), 1), normal((4, 2), 2)]),
    GradCase("dot ta 1d", "dot", lambda x, y: mx.nd.dot(x, y, transpose_a=True), [normal((4, 3), 1), normal((4,), 2)]),
    GradCase("dot 1d tb", "dot", lambda x, y: mx.nd.dot(x, y, transpose_b=True), [normal((4,), 1), normal((3, 4), 2)]),
    # shape ops
    GradCase("T", "transpose", lambda x: x.T, [normal(S)]),
    GradCase("transpose 3d", "transpose", lambda x: mx.nd.transpose(x), [normal((2, 3, 4))]),
    GradCase("transpose 120", "transpose", lambda x: mx.nd.transpose(x, axes=(1, 2, 0)), [normal((2, 3, 4))]),
    GradCase("transpose 201", "transpose", lambda x: x.transpose((2, 0, 1)), [normal((2, 3, 4))]),
    GradCase("reshape", "Reshape", lambda x: x.reshape((2, 6)), [normal(S)]),
    GradCase("reshape -1", "Reshape", lambda x: mx.nd.reshape(x, (-1,)), [normal(S)]),
    GradCase("reshape 0 -1", "Reshape", lambda x: x.reshape(0, -1), [normal((2, 3, 2))]),
    # reductions
    *[
        GradCase(
            f"{op} axis={axis} keepdims={kd}",
            op,
            (lambda op, axis, kd: lambda x: getattr(mx.nd, op)(x, axis, kd))(op, axis, kd),
            [normal((2, 3, 4))],
        )
        for op in ("sum", "mean")
        for axis in (None, 0, -1, (0, 2))
        for kd in (False, True)
    ],
    GradCase("x.sum(1)", "sum", lambda x: x.sum(axis=1), [normal(S)]),
    GradCase("x.mean()", "mean", lambda x: x.mean(), [normal(S)]),
    *(
        GradCase(f"Activation {t}", "Activation", lambda x, t=t: mx.nd.Activation(x, act_type=t), [normal(S)])
        for t in ("relu", "sigmoid", "tanh", "softrelu", "softsign")
    ),
    # n-ary
    GradCase("add_n", "add_n", lambda x, y, z: mx.nd.add_n(x, y, z), [normal(S, 1), normal(S, 2), normal(S, 3)]),
    GradCase("add_n repeated", "add_n", lambda x, y: mx.nd.add_n(x, y, x), [normal(S, 1), normal(S, 2)]),
    # slicing and copies
    GradCase("x[1]", "slice", lambda x: x[1], [normal(S)]),
    GradCase("x[1:, ::2]", "slice", lambda x: x[1:, ::2], [normal(S)]),
    GradCase("x[-1, -2]", "slice", lambda x: x[-1, -2], [normal(S)]),
    GradCase("x[..., 1]", "slice", lambda x: x[..., 1], [normal((2, 3, 4))]),
    GradCase("x[::-1, None]", "slice", lambda x: x[::-1, None], [normal(S)]),
    GradCase("copy", "_copy", lambda x: x.copy(), [normal(S)]),
    GradCase("astype", "_copy", lambda x: x.astype(np.float64), [normal(S)]),
    GradCase("copyto", "_copyto", lambda x: x.copyto(mx.nd.zeros(x.shape, dtype=np.float64)), [normal(S)]),
    # rounding (a zero gradient, recorded as in MXNet), square, clip
    *(
        GradCase(op, op, lambda x, op=op: getattr(x, op)(), [normal(S)])
        for op in ("floor", "ceil", "round", "rint", "trunc", "fix")
    ),
    GradCase("square", "square", lambda x: mx.nd.square(x), [normal(S)]),
    GradCase("clip", "clip", lambda x: x.clip(-1.0, 1.0), [even_grid(S)]),
    # max, min, norm
    *(
        GradCase(
            f"{op} axis={axis} keepdims={kd}",
            op,
            lambda x, op=op, axis=axis, kd=kd: getattr(mx.nd, op)(x, axis, kd),
            [normal((2, 3, 4))],
        )
        for op in ("max", "min")
        for axis in (None, 1, (0, 2))
        for kd in (False, True)
    ),
    GradCase("norm", "norm", lambda x: mx.nd.norm(x), [signed(S)]),
    GradCase("norm ord=1 axis=1", "norm", lambda x: x.norm(ord=1, axis=1), [signed(S)]),
    GradCase("norm axis=(0, 2) keepdims", "norm", lambda x: mx.nd.norm(x, axis=(0, 2), keepdims=True), [signed((2, 3, 4))]),
    # shape ops that copy
    GradCase("expand_dims", "expand_dims", lambda x: x.expand_dims(1), [normal(S)]),
    GradCase("expand_dims inplace", "expand_dims", lambda x: x.expand_dims(-1, inplace=True), [normal(S)]),
    GradCase("flatten", "Flatten", lambda x: x.flatten(), [normal((2, 3, 2))]),
    GradCase("squeeze", "squeeze", lambda x: mx.nd.squeeze(x, axis=2), [normal((3, 2, 1))]),
    GradCase("reshape_like", "reshape_like", lambda x: mx.nd.reshape_like(x, mx.nd.zeros((2, 6))), [normal(S)]),
    GradCase("broadcast_to", "broadcast_to", lambda x: x.broadcast_to((3, 0, 4)), [normal((1, 2, 1))]),
    GradCase("broadcast_like", "broadcast_like", lambda x: x.broadcast_like(mx.nd.zeros((3, 4))), [normal((3, 1))]),
    GradCase("flip", "reverse", lambda x: mx.nd.flip(x, axis=1), [normal(S)]),
    GradCase("swapaxes", "SwapAxis", lambda x: x.swapaxes(0, 2), [normal((2, 3, 4))]),
    GradCase("take", "take", lambda x: mx.nd.take(x, mx.nd.array([2, 0, 2])), [normal(S)]),
    GradCase("take axis=1 wrap", "take", lambda x: x.take(mx.nd.array([[5, -1]]), axis=1, mode="wrap"), [normal(S)]),
    # joining and splitting
    GradCase("concat", "Concat", lambda x, y: mx.nd.concat(x, y, x, dim=0), [normal(S, 1), normal((1, 4), 2)]),
    GradCase("stack", "stack", lambda x, y: mx.nd.stack(x, y, axis=1), [normal(S, 1), normal(S, 2)]),
    GradCase("split", "SliceChannel", lambda x: (lambda a, b, c: a * 2 + b * c)(*mx.nd.split(x, 3, axis=0)), [normal(S)]),
    GradCase("split squeeze", "SliceChannel", lambda x: x.split(4, axis=1, squeeze_axis=True)[2], [normal(S)]),
    # sorting
    GradCase("topk value", "topk", lambda x: mx.nd.topk(x, k=2, ret_typ="value"), [normal(S)]),
    GradCase("topk axis=None ascend", "topk", lambda x: x.topk(axis=None, k=5, ret_typ="value", is_ascend=True), [normal(S)]),
    GradCase("sort", "sort", lambda x: mx.nd.sort(x, axis=0), [normal(S)]),
    GradCase("sort axis=None descending", "sort", lambda x: x.sort(axis=None, is_ascend=False), [normal(S)]),
    # softmax family
    GradCase("softmax", "softmax", lambda x: mx.nd.softmax(x), [normal(S)]),
    GradCase("softmax axis=0 temperature", "softmax", lambda x: x.softmax(axis=0, temperature=2.0), [normal(S)]),
    GradCase("log_softmax", "log_softmax", lambda x: mx.nd.log_softmax(x, temperature=0.5), [normal(S)]),
    GradCase("softmin", "softmin", lambda x: mx.nd.softmin(x, axis=0), [normal(S)]),
    # dropout: the same seed for every call (so finite differences see one mask), or p=0 (the identity)
    GradCase("Dropout", "Dropout", lambda x: (mx.random.seed(7), mx.nd.Dropout(x, p=0.4, mode="always"))[1], [normal(S)]),
    GradCase("Dropout axes", "Dropout", lambda x: (mx.random.seed(7), mx.nd.Dropout(x, 0.5, "always", (0,)))[1], [normal(S)]),
    GradCase("Dropout p=0", "Dropout", lambda x: mx.nd.Dropout(x, p=0.0), [normal(S)]),
    # contrib
    GradCase(
        "index_copy",
        "_contrib_index_copy",
        lambda x, y: mx.nd.contrib.index_copy(x, mx.nd.array([2, 0]), y),
        [normal(S, 1), normal((2, 4), 2)],
    ),
    # indexing
    GradCase("slice_like", "slice_like", lambda x: mx.nd.slice_like(x, mx.nd.zeros((2, 3))), [normal(S)]),
    GradCase("slice_like axes", "slice_like", lambda x: mx.nd.slice_like(x, mx.nd.zeros((1, 2)), axes=(-1,)), [normal(S)]),
    GradCase("pick", "pick", lambda x: mx.nd.pick(x, mx.nd.array([0, 3, 1])), [normal(S)]),
    GradCase("pick axis=0 keepdims", "pick", lambda x: mx.nd.pick(x, mx.nd.array([2, 0, 1, 2]), 0, True), [normal(S)]),
    GradCase("choose_element_0index", "pick", lambda x: mx.nd.choose_element_0index(x, mx.nd.array([1, 1, 2])), [normal(S)]),
    GradCase("gather_nd", "gather_nd", lambda x: mx.nd.gather_nd(x, mx.nd.array([[0, 2, 2], [1, -1, -1]])), [normal(S)]),
    GradCase("gather_nd rows", "gather_nd", lambda x: mx.nd.gather_nd(x, mx.nd.array([[2, 0]])), [normal(S)]),
    # nn
    GradCase(
        "SoftmaxOutput batch",
        "SoftmaxOutput",
        lambda x: mx.nd.SoftmaxOutput(x, nd64(_SO_LABEL), grad_scale=0.7, normalization="batch"),
        [normal((4, 3))],
        loss=lambda x: -(mx.nd.log_softmax(x, axis=1) * nd64(_SO_W)).sum(),
    ),
    GradCase(
        "SoftmaxOutput multi valid ignore",
        "SoftmaxOutput",
        lambda x: mx.nd.SoftmaxOutput(
            x, nd64(_SO_ML), grad_scale=1.3, multi_output=True, use_ignore=True, ignore_label=1, normalization="valid"
        ),
        [normal((2, 3, 2, 2))],
        loss=lambda x: -(mx.nd.log_softmax(x, axis=1) * nd64(_SO_MW)).sum(),
    ),
    GradCase(
        "SoftmaxOutput multi null",
        "SoftmaxOutput",
        lambda x: mx.nd.SoftmaxOutput(x, nd64(_SO_ML), multi_output=True),
        [normal((2, 3, 2, 2))],
        loss=lambda x: -(mx.nd.log_softmax(x, axis=1) * nd64(_SO_MN)).sum(),
    ),
    GradCase(
        "AdaptiveAvgPooling2D",
        "_contrib_AdaptiveAvgPooling2D",
        lambda x: mx.nd.contrib.AdaptiveAvgPooling2D(x, output_size=(2, 3)),
        [normal((1, 2, 5, 4))],
    ),
    GradCase(
        "BatchNorm axis 1",
        "BatchNorm",
        lambda x, g, b: _batch_norm(mx.nd.BatchNorm, x, g, b, fix_gamma=False, eps=1e-3),
        [normal((3, 2, 2)), normal((2,), 1), normal((2,), 2)],
    ),
    GradCase(
        "BatchNorm last axis fix_gamma",
        "BatchNorm",
        lambda x, g, b: _batch_norm(mx.nd.BatchNorm, x, g, b, axis=-1, eps=1e-3),
        [normal((4, 3)), normal((3,), 1), normal((3,), 2)],
    ),
    GradCase(
        "SyncBatchNorm",
        "_contrib_SyncBatchNorm",
        lambda x, g, b: _batch_norm(mx.nd.contrib.SyncBatchNorm, x, g, b, fix_gamma=False, eps=1e-3),
        [normal((2, 3, 2)), normal((3,), 1), normal((3,), 2)],
    ),
    GradCase(
        "Pooling max 2d",
        "Pooling",
        lambda x: mx.nd.Pooling(x, kernel=(2, 2), stride=(1, 2), pad=(1, 0), pool_type="max"),
        [normal((2, 2, 4, 5))],
    ),
    GradCase(
        "Pooling avg full",
        "Pooling",
        lambda x: mx.nd.Pooling(x, kernel=(3, 2), stride=(2, 2), pad=(1, 1), pool_type="avg", pooling_convention="full"),
        [normal((1, 2, 5, 4))],
    ),
    GradCase(
        "Pooling avg no pad count",
        "Pooling",
        lambda x: mx.nd.Pooling(x, kernel=(3,), stride=(2,), pad=(1,), pool_type="avg", count_include_pad=False),
        [normal((2, 3, 6))],
    ),
    GradCase(
        "Pooling sum same",
        "Pooling",
        lambda x: mx.nd.Pooling(x, kernel=3, stride=2, pool_type="sum", pooling_convention="same"),
        [normal((1, 2, 7))],
    ),
    GradCase("Pooling global max", "Pooling", lambda x: mx.nd.Pooling(x, global_pool=True), [normal((2, 3, 2, 3))]),
    GradCase(
        "FullyConnected",
        "FullyConnected",
        lambda x, w, b: mx.nd.FullyConnected(x, w, b, num_hidden=3),
        [normal((4, 2, 3), 1), normal((3, 6), 2), normal((3,), 3)],
    ),
    GradCase(
        "FullyConnected no_bias flatten=False",
        "FullyConnected",
        lambda x, w: mx.nd.FullyConnected(x, w, num_hidden=2, no_bias=True, flatten=False),
        [normal((2, 3, 4), 1), normal((2, 4), 2)],
    ),
]


def _bcast_cases() -> list[GradCase]:
    fns: dict[str, Callable[[Any, Any], Any]] = {
        "add": lambda x, y: x + y,
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "div": lambda x, y: x / y,
        "power": lambda x, y: x**y,
        "maximum": lambda x, y: mx.nd.maximum(x, y),
        "minimum": lambda x, y: mx.nd.minimum(x, y),
    }
    shapes = [((3, 4), (4,)), ((4,), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)), ((1,), (2, 3)), ((), (2, 2))]
    cases = []
    for stem, fn in fns.items():
        for sa, sb in shapes:
            if stem == "power":
                a, b = pos(sa, 1), normal(sb, 2)
            elif stem in ("maximum", "minimum"):
                a, b = even_grid(sa, 1), odd_grid(sb, 2)
            elif stem == "div":
                a, b = normal(sa, 1), signed(sb, 2)
            else:
                a, b = normal(sa, 1), normal(sb, 2)
            cases.append(GradCase(f"broadcast_{stem} {sa} {sb}", f"broadcast_{stem}", fn, [a, b]))
    return cases


GRAD_CASES += _bcast_cases()


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_gradient_matches_finite_differences(case: GradCase) -> None:
    if case.loss is not None:
        check_loss_grad(case.f, case.loss, case.inputs, op=case.op)
    else:
        check_grad(case.f, case.inputs, op=case.op)
    # Recording pushes the op itself and does not change the forward result.
    plain = case.f(*[nd64(a) for a in case.inputs])
    ys = [nd64(a) for a in case.inputs]
    for y in ys:
        y.attach_grad()
    with record_pushes() as rec:
        with ag.record():
            recorded = case.f(*ys)
    assert case.op in rec.names
    np.testing.assert_array_equal(recorded.asnumpy(), plain.asnumpy())


def test_every_differentiable_operator_is_checked() -> None:
    differentiable = {name for name, op in registry.OPS.items() if op.backward is not None}
    differentiable |= {name for name, mop in registry.MULTI_OPS.items() if mop.backward is not None}
    checked = {c.op for c in GRAD_CASES}
    assert differentiable - checked == set()


def test_transpose_negative_axes_gradient() -> None:
    check_grad(lambda x: mx.nd.transpose(x, axes=(-1, 0, 1)), [normal((2, 3, 4))], op="transpose")


def test_gradient_of_composite_expression() -> None:
    a, b = signed((3, 4), 1), pos((4, 2), 2)

    def f(x: Any, y: Any) -> Any:
        h = mx.nd.tanh(mx.nd.dot(x, y) + 0.5)
        return (mx.nd.sigmoid(h) * h).mean(axis=0) + y.sum(axis=0) ** 2

    check_grad(f, [a, b])


def test_gradient_float32_leaf() -> None:
    x = mx.nd.array([[1.0, -2.0], [3.0, 0.5]])
    x.attach_grad()
    assert x.grad.dtype == np.float32
    with ag.record():
        y = (x * x).sum()
    y.backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * x.asnumpy())


# ---------------------------------------------------------------------------- backward op names


def test_backward_pushes_one_named_op_per_node() -> None:
    x = nd64(normal(S))
    x.attach_grad()
    with ag.record():
        y = mx.nd.exp(x * 2) + 1
        z = mx.nd.sum(y)
    with record_pushes() as rec:
        z.backward()
    assert rec.backward_names == ["_backward_sum", "_backward_plus_scalar", "_backward_exp", "_backward_mul_scalar"]


def test_backward_names_for_two_input_op() -> None:
    x, y = nd64(normal(S, 1)), nd64(normal(S, 2))
    x.attach_grad()
    y.attach_grad()
    with ag.record():
        z = mx.nd.dot(x, y, transpose_b=True)
    with record_pushes() as rec:
        z.backward()
    # One backward op computes the gradients of both inputs.
    assert rec.backward_names == ["_backward_dot"]


def test_backward_only_for_recorded_path() -> None:
    x = nd64(normal(S, 1))
    c = nd64(normal(S, 2))
    x.attach_grad()
    with ag.record():
        k = mx.nd.exp(c) * 2  # no attached input: not on the tape
        y = x * k
    with record_pushes() as rec:
        y.backward()
    assert rec.backward_names == ["_backward_elemwise_mul"]
    np.testing.assert_allclose(x.grad.asnumpy(), k.asnumpy())


# ---------------------------------------------------------------------------- grad_req, out_grad, graph rules


def _square_sum(x: Any) -> Any:
    with ag.record():
        y = (x * x).sum()
    return y


def test_grad_req_write_overwrites() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad()  # default: write
    g = x.grad
    _square_sum(x).backward()
    _square_sum(x).backward()
    assert x.grad is g
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * a)


def test_grad_req_add_accumulates() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad(grad_req="add")
    np.testing.assert_array_equal(x.grad.asnumpy(), np.zeros(S))
    _square_sum(x).backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * a)
    _square_sum(x).backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 4 * a)
    with ag.record():
        y = x * 3
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 4 * a + 3)


def test_grad_req_add_pushes_an_add() -> None:
    x = nd64(normal(S))
    x.attach_grad(grad_req="add")
    with ag.record():
        y = x * 2
    with record_pushes() as rec:
        y.backward()
    assert rec.backward_names == ["_backward_mul_scalar"]
    assert rec.names[-1] == "elemwise_add"


def test_grad_req_null_and_invalid() -> None:
    x = nd64(normal(S))
    x.attach_grad(grad_req="null")
    _square_sum(x).backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), np.zeros(S))
    with pytest.raises(ValueError, match="grad_req"):
        x.attach_grad(grad_req="accumulate")


def test_attach_grad_again_resets() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad(grad_req="add")
    _square_sum(x).backward()
    x.attach_grad()
    np.testing.assert_array_equal(x.grad.asnumpy(), np.zeros(S))
    _square_sum(x).backward()
    _square_sum(x).backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * a)


def test_mark_variables() -> None:
    a = normal(S)
    x = nd64(a)
    g = mx.nd.zeros(S, dtype=np.float64)
    ag.mark_variables([x], [g], grad_reqs="add")
    _square_sum(x).backward()
    _square_sum(x).backward()
    assert x.grad is g
    np.testing.assert_allclose(g.asnumpy(), 4 * a)


def test_out_grad() -> None:
    a, og = normal(S, 1), normal(S, 2)
    x = nd64(a)
    x.attach_grad()
    with ag.record():
        y = x * x * 3
    y.backward(out_grad=nd64(og))
    np.testing.assert_allclose(x.grad.asnumpy(), 6 * a * og)


def test_out_grad_head_shape_mismatch() -> None:
    x = nd64(normal(S))
    x.attach_grad()
    with ag.record():
        y = x * 2
    with pytest.raises(ValueError, match="shape"):
        y.backward(out_grad=mx.nd.ones((4, 3), dtype=np.float64))


def test_default_head_gradient_is_ones() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad()
    with ag.record():
        y = mx.nd.exp(x)  # not a scalar
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.exp(a))


def test_backward_of_several_heads() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad()
    with ag.record():
        y1 = x * 2
        y2 = x * x
    g1, g2 = normal(S, 5), normal(S, 6)
    ag.backward([y1, y2], [nd64(g1), nd64(g2)])
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * g1 + 2 * a * g2)
    with pytest.raises(ValueError):
        ag.backward([x * 1], [None, None])


def test_head_is_a_leaf() -> None:
    x = nd64(normal(S))
    x.attach_grad()
    x.backward(out_grad=nd64(np.full(S, 3.0)))
    np.testing.assert_allclose(x.grad.asnumpy(), np.full(S, 3.0))


@pytest.mark.parametrize(
    ("name", "f", "df"),
    [
        ("x*x", lambda x: x * x, lambda a: 2 * a),
        ("x+x", lambda x: x + x, lambda a: np.full_like(a, 2.0)),
        ("x*x+x", lambda x: x * x + x, lambda a: 2 * a + 1),
        ("x/x", lambda x: x / x, lambda a: np.zeros_like(a)),
        ("add_n(x,x,x)", lambda x: mx.nd.add_n(x, x, x), lambda a: np.full_like(a, 3.0)),
        ("exp(x)*x", lambda x: mx.nd.exp(x) * x, lambda a: np.exp(a) * (1 + a)),
        ("diamond", lambda x: (x * 2) * (x + 1), lambda a: 4 * a + 2),
        ("row reuse", lambda x: x[0] * x[1], None),
    ],
)
def test_variable_used_twice(name: str, f: Callable[[Any], Any], df: Callable[[np.ndarray], np.ndarray] | None) -> None:
    a = signed(S)
    x = nd64(a)
    x.attach_grad()
    with ag.record():
        y = f(x)
    y.backward()
    if df is None:
        expected = np.zeros(S)
        expected[0], expected[1] = a[1], a[0]
    else:
        expected = df(a)
    np.testing.assert_allclose(x.grad.asnumpy(), expected, rtol=1e-12, atol=1e-12)


def test_dot_with_itself() -> None:
    a = normal((3, 3))
    check_grad(lambda x: mx.nd.dot(x, x), [a], op="dot")
    check_grad(lambda x: mx.nd.dot(x, x, transpose_a=True), [a], op="dot")


def test_gradient_flows_only_to_attached_arrays() -> None:
    a, b = normal(S, 1), normal(S, 2)
    x, w = nd64(a), nd64(b)
    x.attach_grad()
    with ag.record():
        y = (x * w).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), b)
    assert w.grad is None


def test_detach_cuts_the_graph() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad()
    with ag.record():
        y = x.detach() * x
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), a)


def test_array_computed_before_attach_is_a_constant() -> None:
    a = normal(S)
    x = nd64(a)
    c = x * 3  # before attach_grad and outside record: a constant
    x.attach_grad()
    with ag.record():
        y = c * x
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 3 * a)


def test_backward_not_in_graph_raises() -> None:
    x = nd64(normal(S))
    with pytest.raises(ValueError, match="graph"):
        x.backward()
    with ag.record():
        y = x * 2  # x has no gradient attached
    with pytest.raises(ValueError):
        y.backward()
    x.attach_grad()
    z = x * 2  # not recorded
    with pytest.raises(ValueError):
        z.backward()
    with pytest.raises(ValueError):
        ag.backward([z])


def test_second_backward_needs_retain_graph() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad(grad_req="add")
    with ag.record():
        y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 4 * a)
    with pytest.raises(ValueError):
        y.backward()


def test_inplace_in_graph_while_recording_raises() -> None:
    x = nd64(normal(S))
    x.attach_grad()
    before = x.asnumpy()
    with ag.record():
        with pytest.raises(mx.nd.OperatorError, match="in-place"):
            x += 1
        with pytest.raises(mx.nd.OperatorError, match="_mul_scalar"):
            x *= 2
        y = x * 2
        with pytest.raises(mx.nd.OperatorError):
            y -= x
        with pytest.raises(mx.nd.OperatorError):
            y /= 2
        with pytest.raises(mx.nd.OperatorError):
            x[:] = 0
        with pytest.raises(mx.nd.OperatorError):
            y[:] = mx.nd.zeros(S, dtype=np.float64)
        with pytest.raises(mx.nd.OperatorError):
            mx.nd.exp(x, out=x)
    np.testing.assert_array_equal(x.asnumpy(), before)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.full(S, 2.0))


def test_inplace_allowed_outside_recording_or_graph() -> None:
    x = nd64(np.ones(S))
    x.attach_grad()
    x += 1  # not recording
    c = nd64(np.ones(S))
    with ag.record():
        c += 1  # not in the graph
        y = x * c
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.full(S, 2.0))
    np.testing.assert_allclose(x.asnumpy(), np.full(S, 2.0))


def test_partial_slice_assign_in_graph_while_recording_raises() -> None:
    a = np.array([1.0, 2.0, 3.0])
    x = nd64(a)
    x.attach_grad()
    with ag.record():
        y = x * 2
        with pytest.raises(mx.nd.OperatorError):
            y[0] = 5.0
        z = (y * y).sum()
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 8 * a)


def test_slicing_under_recording_is_a_recorded_copy() -> None:
    a = normal(S)
    x = nd64(a)
    x.attach_grad()
    with record_pushes() as rec:
        with ag.record():
            row = x[1]
    assert rec.names == ["slice"]
    # Outside recording a slice is a view (no push).
    with record_pushes() as rec:
        view = x[1]
    assert rec.names == []
    np.testing.assert_array_equal(row.asnumpy(), view.asnumpy())
    with ag.record():
        y = (x[1:] * 2).sum() + x[0, 0]
    y.backward()
    expected = np.full(S, 2.0)
    expected[0] = 0
    expected[0, 0] = 1
    np.testing.assert_allclose(x.grad.asnumpy(), expected)


def test_many_independent_backward_passes_on_threaded_engine() -> None:
    """Gradients of independent graphs do not interfere when their ops interleave."""
    arrays = [normal((8, 8), i) for i in range(12)]
    xs = [nd64(a) for a in arrays]
    heads = []
    for x in xs:
        x.attach_grad()
        with ag.record():
            heads.append(mx.nd.tanh(mx.nd.dot(x, x)).sum())
    for h in heads:
        h.backward()
    for a, x in zip(arrays, xs, strict=True):
        t = np.tanh(a @ a)
        g = 1 - t * t
        np.testing.assert_allclose(x.grad.asnumpy(), g @ a.T + a.T @ g, rtol=1e-10)
