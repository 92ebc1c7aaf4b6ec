"""Differential testing: random programs run on every engine and on a plain NumPy interpreter.

A program is a list of steps over a pool of four (3, 4) float64 arrays: scalar, unary, binary and
in-place ops, reductions broadcast back, and custom operators whose Python mixes NumPy (through
``asnumpy()``) with sub-operators. Optionally the whole program is recorded with autograd, with
``pool[0]`` as the leaf, and the sum of every array that depends on it is back-propagated.

The naive engine runs every op inline and is the oracle for the threaded engine: values and
gradients must be bit-for-bit equal on 1, 2 and 8 workers. Values and gradients are also checked
against NumPy (with a reverse-mode interpreter of the same steps), up to rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opprof as mx
from opprof import nd

pytestmark = pytest.mark.timeout(120)

SHAPE = (3, 4)
N_SLOTS = 4
ENGINES = [("naive", None), ("threaded", 1), ("threaded", 2), ("threaded", 8)]


# ---------------------------------------------------------------------------- custom operators
class DiffTanh(mx.operator.CustomOp):
    """out = 2 tanh(x) + 1: tanh in NumPy, the rest as sub-operators."""

    def forward(self, is_train, req, in_data, out_data, aux):
        t = np.tanh(in_data[0].asnumpy())
        self.assign(out_data[0], req[0], nd.array(t) * 2 + 1)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        t = (out_data[0] - 1) / 2  # tanh(x), recovered from the output by sub-ops
        self.assign(in_grad[0], req[0], out_grad[0] * (1 - t * t) * 2)


class DiffTanhProp(mx.operator.CustomOpProp):
    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return DiffTanh()


class DiffMix(mx.operator.CustomOp):
    """Two inputs: out = a * b + a."""

    def forward(self, is_train, req, in_data, out_data, aux):
        a, b = in_data
        prod = b * nd.array(a.asnumpy())
        self.assign(out_data[0], req[0], prod + a)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = out_grad[0]
        a, b = in_data
        self.assign(in_grad[0], req[0], g * (b + 1))
        self.assign(in_grad[1], req[1], g.asnumpy() * a.asnumpy())


class DiffMixProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["a", "b"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return DiffMix()


class DiffPair(mx.operator.CustomOp):
    """Two inputs, two outputs: (a + b, a * sigmoid(b))."""

    def forward(self, is_train, req, in_data, out_data, aux):
        a, b = in_data
        out_data[0][:] = a + b
        s = nd.sigmoid(b).asnumpy()
        self.assign(out_data[1], req[1], a.asnumpy() * s)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g0, g1 = out_grad
        a, b = in_data
        s = nd.sigmoid(b)
        self.assign(in_grad[0], req[0], g0 + g1 * s)
        self.assign(in_grad[1], req[1], g0 + g1 * a * s * (1 - s))


class DiffPairProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["a", "b"]

    def list_outputs(self):
        return ["sum", "gated"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0], in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return DiffPair()


CUSTOM_OPS = {"DiffTanh": DiffTanhProp, "DiffMix": DiffMixProp, "DiffPair": DiffPairProp}


@pytest.fixture(autouse=True, scope="module")
def _custom_ops():
    for name, prop in CUSTOM_OPS.items():
        mx.operator.register(name)(prop)
    yield
    mx.set_engine("threaded")


# ---------------------------------------------------------------------------- programs
SCALAR_OPS = ["add", "sub", "rsub", "mul", "div"]
SCALARS = [-2.0, -0.5, 0.25, 0.75, 1.5, 3.0]
UNARY_OPS = ["tanh", "sigmoid", "abs", "negative", "exp_small"]
BINARY_OPS = ["add", "sub", "mul", "maximum"]
REDUCTIONS = ["sum0", "mean1", "mean"]

slot = st.integers(0, N_SLOTS - 1)
step_strategy = st.one_of(
    st.tuples(st.just("scalar"), slot, slot, st.sampled_from(SCALAR_OPS), st.sampled_from(SCALARS)),
    st.tuples(st.just("unary"), slot, slot, st.sampled_from(UNARY_OPS)),
    st.tuples(st.just("binary"), slot, slot, slot, st.sampled_from(BINARY_OPS)),
    st.tuples(st.just("inplace"), slot, slot),
    st.tuples(st.just("custom"), slot, slot),
    st.tuples(st.just("custom2"), slot, slot, slot),
    st.tuples(st.just("pair"), slot, slot, slot, slot),
    st.tuples(st.just("reduce"), slot, slot, slot, st.sampled_from(REDUCTIONS)),
)


@dataclass
class Program:
    steps: list[tuple]
    record: bool
    seed: int


programs = st.builds(Program, st.lists(step_strategy, min_size=1, max_size=16), st.booleans(), st.integers(0, 2**16))


def initial_pool(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=SHAPE) for _ in range(N_SLOTS)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(x * 0.5))


# ---------------------------------------------------------------------------- the NumPy oracle
@dataclass(eq=False)
class T:
    """A NumPy value and, when it depends on the leaf, how to pull a gradient back to its parents."""

    value: np.ndarray
    parents: list[tuple[T, Callable[[np.ndarray], np.ndarray]]] = field(default_factory=list)
    requires: bool = False


def _node(value: np.ndarray, *parents: tuple[T, Callable[[np.ndarray], np.ndarray]]) -> T:
    req = [(p, vjp) for p, vjp in parents if p.requires]
    return T(value, req, bool(req))


def _reduce_np(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "sum0":
        return x.sum(axis=0, keepdims=True)
    if kind == "mean1":
        return x.mean(axis=1, keepdims=True)
    return np.asarray(x.mean())


def _reduce_vjp(kind: str) -> Callable[[np.ndarray], np.ndarray]:
    if kind == "sum0":
        return lambda g: np.broadcast_to(g.sum(axis=0, keepdims=True), SHAPE)
    if kind == "mean1":
        return lambda g: np.broadcast_to(g.sum(axis=1, keepdims=True) / SHAPE[1], SHAPE)
    return lambda g: np.full(SHAPE, g.sum() / (SHAPE[0] * SHAPE[1]))


class NumpyBackend:
    """Executes steps on plain NumPy values, building a tape for reverse mode."""

    def leaf(self, value: np.ndarray, requires: bool) -> T:
        return T(value.copy(), [], requires)

    def scalar(self, x: T, op: str, c: float) -> T:
        v = x.value
        if op == "add":
            return _node(v + c, (x, lambda g: g))
        if op == "sub":
            return _node(v - c, (x, lambda g: g))
        if op == "rsub":
            return _node(c - v, (x, lambda g: -g))
        if op == "mul":
            return _node(v * c, (x, lambda g: g * c))
        return _node(v / c, (x, lambda g: g / c))

    def unary(self, x: T, op: str) -> T:
        v = x.value
        if op == "tanh":
            y = np.tanh(v)
            return _node(y, (x, lambda g: g * (1 - y * y)))
        if op == "sigmoid":
            y = _sigmoid(v)
            return _node(y, (x, lambda g: g * y * (1 - y)))
        if op == "abs":
            return _node(np.abs(v), (x, lambda g: g * np.sign(v)))
        if op == "negative":
            return _node(-v, (x, lambda g: -g))
        t = np.tanh(v)
        y = np.exp(t)
        return _node(y, (x, lambda g: g * y * (1 - t * t)))

    def binary(self, a: T, b: T, op: str) -> T:
        va, vb = a.value, b.value
        if op == "add":
            return _node(va + vb, (a, lambda g: g), (b, lambda g: g))
        if op == "sub":
            return _node(va - vb, (a, lambda g: g), (b, lambda g: -g))
        if op == "mul":
            return _node(va * vb, (a, lambda g: g * vb), (b, lambda g: g * va))
        take_a = va >= vb
        return _node(np.maximum(va, vb), (a, lambda g: g * take_a), (b, lambda g: g * ~take_a))

    def inplace_add(self, a: T, b: T) -> T:
        return self.binary(a, b, "add")

    def custom(self, x: T) -> T:
        t = np.tanh(x.value)
        return _node(2 * t + 1, (x, lambda g: g * 2 * (1 - t * t)))

    def custom2(self, a: T, b: T) -> T:
        va, vb = a.value, b.value
        return _node(va * vb + va, (a, lambda g: g * (vb + 1)), (b, lambda g: g * va))

    def pair(self, a: T, b: T) -> tuple[T, T]:
        va, vb = a.value, b.value
        s = _sigmoid(vb)
        first = _node(va + vb, (a, lambda g: g), (b, lambda g: g))
        second = _node(va * s, (a, lambda g: g * s), (b, lambda g: g * va * s * (1 - s)))
        return first, second

    def reduce(self, a: T, b: T, kind: str) -> T:
        return _node(a.value + _reduce_np(b.value, kind), (a, lambda g: g), (b, _reduce_vjp(kind)))

    def value(self, x: T) -> np.ndarray:
        return x.value

    def gradient(self, leaf: T, heads: list[T]) -> np.ndarray:
        order: list[T] = []
        seen: set[int] = set()

        def visit(n: T) -> None:
            stack = [(n, False)]
            while stack:
                node, done = stack.pop()
                if done:
                    order.append(node)
                    continue
                if id(node) in seen:
                    continue
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((p, False) for p, _ in node.parents)

        for h in heads:
            visit(h)
        grads: dict[int, np.ndarray] = {id(h): np.zeros(SHAPE) for h in heads}
        for h in heads:
            grads[id(h)] = grads[id(h)] + 1.0
        for node in reversed(order):
            g = grads.get(id(node))
            if g is None:
                continue
            for parent, vjp in node.parents:
                grads[id(parent)] = grads.get(id(parent), 0) + vjp(g)
        return np.broadcast_to(grads.get(id(leaf), np.zeros(SHAPE)), SHAPE).copy()


class NDBackend:
    """Executes steps with opprof NDArrays on the current engine."""

    def leaf(self, value: np.ndarray, requires: bool) -> nd.NDArray:
        x = nd.array(value)
        if requires:
            x.attach_grad()
        return x

    def scalar(self, x: nd.NDArray, op: str, c: float) -> nd.NDArray:
        return {"add": lambda: x + c, "sub": lambda: x - c, "rsub": lambda: c - x, "mul": lambda: x * c, "div": lambda: x / c}[
            op
        ]()

    def unary(self, x: nd.NDArray, op: str) -> nd.NDArray:
        if op == "exp_small":
            return nd.exp(nd.tanh(x))
        return getattr(nd, op)(x)

    def binary(self, a: nd.NDArray, b: nd.NDArray, op: str) -> nd.NDArray:
        if op == "maximum":
            return nd.maximum(a, b)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b}[op]()

    def inplace_add(self, a: nd.NDArray, b: nd.NDArray) -> nd.NDArray:
        a += b
        return a

    def custom(self, x: nd.NDArray) -> nd.NDArray:
        return nd.Custom(x, op_type="DiffTanh")

    def custom2(self, a: nd.NDArray, b: nd.NDArray) -> nd.NDArray:
        return nd.Custom(a, b, op_type="DiffMix")

    def pair(self, a: nd.NDArray, b: nd.NDArray) -> tuple[nd.NDArray, nd.NDArray]:
        first, second = nd.Custom(a, b, op_type="DiffPair")
        return first, second

    def reduce(self, a: nd.NDArray, b: nd.NDArray, kind: str) -> nd.NDArray:
        if kind == "sum0":
            r = nd.sum(b, axis=0, keepdims=True)
        elif kind == "mean1":
            r = nd.mean(b, axis=1, keepdims=True)
        else:
            r = nd.mean(b)
        return a + r

    def value(self, x: nd.NDArray) -> np.ndarray:
        return x.asnumpy()

    def gradient(self, leaf: nd.NDArray, heads: list[nd.NDArray]) -> np.ndarray:
        assert leaf.grad is not None
        if heads:
            # Called while the program is still recording: the loss is part of the graph.
            assert mx.autograd.is_recording()
            total = nd.sum(heads[0])
            for h in heads[1:]:
                total = total + nd.sum(h)
            with mx.autograd.pause():
                total.backward()
        return leaf.grad.asnumpy()


@dataclass
class Result:
    values: list[np.ndarray]
    grad: np.ndarray | None
    refused: list[int]  # steps refused with OperatorError (in-place on a recorded array)


def run_program(prog: Program, backend) -> Result:
    """Run ``prog``; ``requires`` tracks which slots depend on the leaf (as autograd does)."""
    init = initial_pool(prog.seed)
    pool = [backend.leaf(init[0], prog.record)] + [backend.leaf(v, False) for v in init[1:]]
    leaf = pool[0]
    requires = [prog.record] + [False] * (N_SLOTS - 1)
    refused: list[int] = []
    recording = mx.autograd.record() if prog.record and isinstance(backend, NDBackend) else contextlib.nullcontext()
    with np.errstate(all="ignore"), recording:
        for i, step in enumerate(prog.steps):
            kind = step[0]
            if kind == "scalar":
                _, dst, src, op, c = step
                pool[dst], requires[dst] = backend.scalar(pool[src], op, c), requires[src]
            elif kind == "unary":
                _, dst, src, op = step
                pool[dst], requires[dst] = backend.unary(pool[src], op), requires[src]
            elif kind == "binary":
                _, dst, a, b, op = step
                pool[dst], requires[dst] = backend.binary(pool[a], pool[b], op), requires[a] or requires[b]
            elif kind == "inplace":
                _, dst, src = step
                if prog.record:
                    if requires[dst]:
                        # Not allowed on an array in the autograd graph while recording.
                        if isinstance(backend, NDBackend):
                            with pytest.raises(nd.OperatorError, match="in-place"):
                                backend.inplace_add(pool[dst], pool[src])
                        refused.append(i)
                    # Otherwise in-place would silently change values saved for backward (as in
                    # MXNet); the oracle cannot follow that, so such steps are skipped.
                    continue
                pool[dst] = backend.inplace_add(pool[dst], pool[src])
            elif kind == "custom":
                _, dst, src = step
                pool[dst], requires[dst] = backend.custom(pool[src]), requires[src]
            elif kind == "custom2":
                _, dst, a, b = step
                pool[dst], requires[dst] = backend.custom2(pool[a], pool[b]), requires[a] or requires[b]
            elif kind == "pair":
                _, d1, d2, a, b = step
                first, second = backend.pair(pool[a], pool[b])
                req = requires[a] or requires[b]
                pool[d1], requires[d1] = first, req
                pool[d2], requires[d2] = second, req
            elif kind == "reduce":
                _, dst, a, b, red = step
                pool[dst], requires[dst] = backend.reduce(pool[a], pool[b], red), requires[a] or requires[b]
            else:
                raise AssertionError(kind)
        heads = [pool[k] for k in range(N_SLOTS) if requires[k]]
        grad = backend.gradient(leaf, heads) if prog.record else None
        values = [backend.value(x) for x in pool]
    return Result(values, grad, refused)


def run_on_engine(prog: Program, kind: str, workers: int | None) -> Result:
    if kind == "naive":
        mx.set_engine("naive")
    else:
        mx.set_engine("threaded", workers=workers, custom_workers=min(workers, 4))
    result = run_program(prog, NDBackend())
    nd.waitall()
    return result


def _assert_close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    scale = float(np.nanmax(np.abs(np.where(np.isfinite(expected), expected, 0)), initial=1.0))
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-11 * scale, equal_nan=True, err_msg=what)


def _assert_same(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    assert np.array_equal(actual, expected, equal_nan=True), f"{what}: threaded differs from naive\n{actual}\n{expected}"


# ---------------------------------------------------------------------------- the tests
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs)
def test_random_programs_agree_across_engines_and_numpy(prog: Program) -> None:
    oracle = run_program(prog, NumpyBackend())
    results = {(kind, w): run_on_engine(prog, kind, w) for kind, w in ENGINES}
    naive = results[("naive", None)]
    for (kind, w), res in results.items():
        label = f"{kind}-{w}"
        assert res.refused == oracle.refused, label
        for k in range(N_SLOTS):
            assert res.values[k].shape == SHAPE and res.values[k].dtype == np.float64, label
            _assert_same(res.values[k], naive.values[k], f"{label} pool[{k}]")
            _assert_close(res.values[k], oracle.values[k], f"{label} pool[{k}] vs NumPy")
        if prog.record:
            assert res.grad is not None and oracle.grad is not None
            _assert_same(res.grad, naive.grad, f"{label} grad")
            _assert_close(res.grad, oracle.grad, f"{label} grad vs NumPy")


def test_a_fixed_program_with_every_step_kind() -> None:
    steps = [
        ("custom", 1, 0),
        ("scalar", 2, 1, "rsub", 1.5),
        ("unary", 3, 2, "exp_small"),
        ("binary", 1, 3, 0, "mul"),
        ("custom2", 2, 1, 3),
        ("pair", 3, 1, 2, 0),
        ("reduce", 0, 3, 1, "mean1"),
        ("reduce", 2, 0, 2, "sum0"),
        ("binary", 1, 2, 3, "maximum"),
        ("unary", 3, 1, "sigmoid"),
        ("inplace", 1, 2),
    ]
    for record in (False, True):
        prog = Program(steps, record, seed=7)
        oracle = run_program(prog, NumpyBackend())
        assert oracle.refused == ([10] if record else [])
        for kind, w in ENGINES:
            res = run_on_engine(prog, kind, w)
            for k in range(N_SLOTS):
                _assert_close(res.values[k], oracle.values[k], f"{kind}-{w} pool[{k}]")
            if record:
                _assert_close(res.grad, oracle.grad, f"{kind}-{w} grad")
                assert np.abs(res.grad).sum() > 0
