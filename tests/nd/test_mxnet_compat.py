"""MXNet 1.x semantics that ported code relies on: no silent wrong gradient, no hang, MXNet's shapes.

Each test pins one behaviour that was silently different from MXNet 1.9.1 (or hung), on both engines.
"""

from __future__ import annotations

import operator
import os
import pickle
import threading
import time
from multiprocessing import get_context

import numpy as np
import pytest

import opprof as mx
from opprof import nd
from opprof.nd import OperatorError

# Every test on both engines (the ``engine`` fixture in tests/conftest.py).
pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("engine")]


def _within(seconds: float, fn) -> object:  # type: ignore[no-untyped-def]
    """``fn()``'s result, or a failure (not a hung suite) if it has not returned in ``seconds``."""
    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds} s"
    return box[0]


# ---------------------------------------------------------------------------- gradients
def test_slice_assignment_of_a_recorded_array_carries_its_gradient() -> None:
    x = nd.zeros((3,))
    y = nd.ones((2,))
    y.attach_grad()
    with mx.autograd.record():
        x[0:2] = y
        z = (x * 2).sum()
    z.backward()
    np.testing.assert_array_equal(y.grad.asnumpy(), [2, 2])


def test_row_assignment_gradient_matches_finite_differences() -> None:
    base = np.arange(6, dtype=np.float64).reshape(2, 3)
    v = np.array([0.5, -1.0, 2.0])

    def loss(values: np.ndarray) -> float:
        full = base.copy()
        full[1] = values
        return float((full**3).sum())

    y = nd.array(v)
    y.attach_grad()
    x = nd.array(base)
    with mx.autograd.record():
        x[1] = y
        z = (x * x * x).sum()
    z.backward()
    eps = 1e-6
    numeric = [(loss(v + eps * e) - loss(v - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(y.grad.asnumpy(), numeric, rtol=1e-5)


def test_assigning_into_a_recorded_array_is_refused() -> None:
    x = nd.ones((3,))
    x.attach_grad()
    with mx.autograd.record(), pytest.raises(OperatorError, match="not supported while recording"):
        x[0:2] = nd.zeros((2,))


def test_relu_gradient_passes_nan_on() -> None:
    x = nd.array([np.nan, -1.0, 0.0, 2.0])
    x.attach_grad()
    with mx.autograd.record():
        y = nd.relu(x)
    y.backward()
    g = x.grad.asnumpy()
    assert np.isnan(g[0]) and list(g[1:]) == [0, 0, 1]


# ---------------------------------------------------------------------------- out=, shapes, bool
@pytest.mark.parametrize(
    ("make", "value"),
    [(lambda o: nd.zeros((2, 3), out=o), 0), (lambda o: nd.ones((2, 3), out=o), 1), (lambda o: nd.full((2, 3), 7, out=o), 7)],
)
def test_creation_functions_write_into_out(make, value: float) -> None:  # type: ignore[no-untyped-def]
    out = nd.full((2, 3), -5, dtype=np.float64)
    got = make(out)
    assert got is out
    np.testing.assert_array_equal(out.asnumpy(), np.full((2, 3), value))
    assert out.dtype == np.float64


def test_creation_out_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(OperatorError, match="does not fit"):
        nd.zeros((2, 2), out=nd.ones((3,)))


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_full_reductions_have_shape_1_and_their_gradient_flows(op: str) -> None:
    x = nd.array(np.arange(6.0).reshape(2, 3))
    x.attach_grad()
    with mx.autograd.record():
        y = getattr(nd, op)(x)
    assert y.shape == (1,)
    assert getattr(x, op)(axis=(0, 1)).shape == (1,) and getattr(x, op)(keepdims=True).shape == (1, 1)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.full((2, 3), 1.0 if op == "sum" else 1 / 6))


@pytest.mark.parametrize(
    ("shape", "codes", "reverse", "want"),
    [
        ((2, 3, 4), (4, 0, 2), False, (4, 3, 2)),
        ((2, 3, 4), (6, 1, -1), False, (6, 1, 4)),
        ((2, 3, 4), (-2, 1, 1), False, (2, 3, 4, 1, 1)),
        ((2, 3, 4, 5), (-3, -3), False, (6, 20)),
        ((2, 3, 4), (0, -3), False, (2, 12)),
        ((2, 3, 4), (-4, 1, 2, -2), False, (1, 2, 3, 4)),
        ((2, 3, 4), (2, -4, -1, 3, -2), False, (2, 1, 3, 4)),
        ((10, 5, 4), (-1, 0), False, (40, 5)),
        ((10, 5, 4), (-1, 0), True, (50, 4)),
    ],
)
def test_reshape_takes_mxnets_codes(shape: tuple[int, ...], codes: tuple[int, ...], reverse: bool, want: tuple[int, ...]) -> None:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x = nd.array(a)
    for y in (
        x.reshape(codes, reverse=reverse),
        nd.reshape(x, codes, reverse=reverse),
        nd.Reshape(x, shape=codes, reverse=reverse),
    ):
        assert y.shape == want
        np.testing.assert_array_equal(y.asnumpy(), a.reshape(want))


@pytest.mark.parametrize("codes", [(5, -1), (-1, -1), (-4, 5, -1), (0, 0, 0, 0), (7,), (-5,)])
def test_reshape_codes_that_do_not_fit_say_so(codes: tuple[int, ...]) -> None:
    with pytest.raises(OperatorError, match="Reshape"):
        nd.ones((2, 3, 4)).reshape(codes)


def test_bool_of_an_empty_array_is_false() -> None:
    assert not nd.array([])
    assert bool(nd.array([3.0])) and not bool(nd.array([0.0]))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(nd.ones((2,)))


def test_the_operator_list_names_the_engine_operators() -> None:
    ops = mx.operator.get_all_registered_operators()
    assert {"Activation", "Reshape", "Custom", "elemwise_add", "_plus_scalar"} <= set(ops) and ops == sorted(ops)


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh", "softrelu", "softsign"])
def test_activation_matches_its_formula(act: str) -> None:
    a = np.linspace(-3, 3, 13)
    ref = {
        "relu": np.maximum(a, 0),
        "sigmoid": 1 / (1 + np.exp(-a)),
        "tanh": np.tanh(a),
        "softrelu": np.log1p(np.exp(a)),
        "softsign": a / (1 + np.abs(a)),
    }[act]
    np.testing.assert_allclose(nd.Activation(nd.array(a), act_type=act).asnumpy(), ref, rtol=1e-12)
    with pytest.raises(OperatorError, match="act_type"):
        nd.Activation(nd.array(a), act_type="swish")


# ---------------------------------------------------------------------------- hangs
def _pending(n: int = 200) -> mx.nd.NDArray:
    """An array whose value is still being computed on the threaded engine."""
    x = nd.ones((64, 64))
    for _ in range(n):
        x = x + 1
    return x


def test_pickling_a_pending_array_keeps_its_value_and_blocks_nothing() -> None:
    x = _pending()
    copy = pickle.loads(pickle.dumps(x))
    assert _within(10, lambda: float(copy.asnumpy()[0, 0])) == 201.0
    _within(10, nd.waitall)
    assert copy.dtype == x.dtype and copy.shape == x.shape and copy.var is not x.var


def test_pickling_an_array_whose_computation_failed_raises_the_error() -> None:
    def boom() -> None:
        raise ZeroDivisionError("boom")

    x = nd.ones((2,))
    mx.get_engine().push(boom, (), (x.var,))
    with pytest.raises(ZeroDivisionError):
        pickle.dumps(x)
    _within(10, nd.waitall)


def _child_sum(k: int) -> float:
    return float((nd.ones((3,)) * k).sum().asscalar())


def test_a_forked_child_computes_and_the_parent_goes_on() -> None:
    x = _pending()
    with get_context("fork").Pool(2) as pool:
        assert _within(30, lambda: pool.map(_child_sum, [1, 2, 3], chunksize=1)) == [3.0, 6.0, 9.0]
    assert _within(10, lambda: float(x.asnumpy()[0, 0])) == 201.0


def test_a_forked_child_reads_arrays_made_before_the_fork() -> None:
    x = _pending()
    pid = os.fork()
    if pid == 0:  # the child: any exception must end it, never return into pytest
        try:
            ok = float(x.asnumpy()[0, 0]) == 201.0 and _child_sum(2) == 6.0
            os._exit(0 if ok else 3)
        except BaseException:
            os._exit(4)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung on its first operation")


# ---------------------------------------------------------------------------- MXNetError
def test_a_failed_operator_raises_mxneterror_at_the_wait_and_keeps_the_original() -> None:
    a = nd.random.normal(0, -1, shape=(2, 2))  # a negative scale fails when the op runs, not at the push
    with pytest.raises(mx.base.MXNetError) as info:
        nd.dot(a, a).asnumpy()
    original = info.value.__cause__
    assert isinstance(original, ValueError) and not isinstance(original, mx.MXNetError)
    assert isinstance(info.value, ValueError) and str(info.value) == str(original)
    assert info.value.__traceback__ is not None


def test_a_custom_ops_python_error_is_an_mxneterror_of_its_own_type_too() -> None:
    class Fails(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
            raise KeyError("no such row")

    @mx.operator.register("CompatFails")
    class FailsProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
            return Fails()

    y = nd.Custom(nd.ones((2,)), op_type="CompatFails")
    with pytest.raises(KeyError) as info:  # code written for opprof catches the op's own type
        nd.waitall()
    assert isinstance(info.value, mx.MXNetError) and isinstance(info.value.__cause__, KeyError)
    assert str(info.value) == "'no such row'"
    del y


def test_errors_at_the_push_are_mxneterrors() -> None:
    with pytest.raises(mx.MXNetError, match="not aligned"):
        nd.dot(nd.ones((3, 4)), nd.ones((5, 6)))
    assert mx.MXNetError is mx.base.MXNetError and issubclass(mx.engine.EngineError, mx.MXNetError)


def test_an_oserror_keeps_its_errno_through_the_wait() -> None:
    out = nd.zeros((1,))

    def fails() -> None:
        raise FileNotFoundError(2, "gone", "data.bin")

    mx.get_engine().push(fails, (), (out.var,))
    with pytest.raises(FileNotFoundError) as info:
        out.wait_to_read()
    assert info.value.errno == 2 and info.value.filename == "data.bin" and isinstance(info.value, mx.MXNetError)


# ---------------------------------------------------------------------------- comparisons, aliases
COMPARE = {
    "==": (operator.eq, np.equal),
    "!=": (operator.ne, np.not_equal),
    ">": (operator.gt, np.greater),
    ">=": (operator.ge, np.greater_equal),
    "<": (operator.lt, np.less),
    "<=": (operator.le, np.less_equal),
}


@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("rhs_shape", [(3,), (2, 1), None], ids=["same", "broadcast", "scalar"])
def test_comparisons_are_elementwise_arrays_in_the_inputs_dtype(op: str, rhs_shape: tuple[int, ...] | None) -> None:
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = 2.0 if rhs_shape is None else np.arange(int(np.prod(rhs_shape)), dtype=np.float32).reshape(rhs_shape) + 1
    python_op, numpy_op = COMPARE[op]
    x, y = nd.array(a), (b if rhs_shape is None else nd.array(b))
    got = python_op(x, y)  # the operator itself: x.__eq__(y) and so on
    assert isinstance(got, mx.nd.NDArray) and got.dtype == np.float32
    np.testing.assert_array_equal(got.asnumpy(), numpy_op(a, b).astype(np.float32))
    if rhs_shape is None:  # the scalar on the left: Python swaps the comparison
        np.testing.assert_array_equal(python_op(b, x).asnumpy(), numpy_op(b, a).astype(np.float32))


def test_comparison_functions_and_their_pushed_names() -> None:
    from tests.helpers import record_pushes

    x, y = nd.array([1.0, 5.0]), nd.array([2.0, 2.0])
    with record_pushes() as rec:
        got = [nd.lesser(x, y), nd.greater_equal(x, 2), nd.equal(2, y), nd.broadcast_not_equal(x, nd.array([[1.0]]))]
    assert [g.asnumpy().tolist() for g in got] == [[1, 0], [0, 1], [1, 1], [[0, 1]]]
    assert rec.names == ["_lesser", "_greater_equal_scalar", "_equal_scalar", "broadcast_not_equal"]


def test_comparisons_have_no_gradient_and_block_none() -> None:
    x = nd.array([-1.0, 2.0])
    x.attach_grad()
    with mx.autograd.record():
        y = (x > 0) * x
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [0, 1])


def test_an_array_still_hashes_by_identity() -> None:
    x, y = nd.ones((2,)), nd.ones((2,))
    assert {x: 1, y: 2}[x] == 1 and x in {x} and y not in {x}
    assert (x == None) is False  # noqa: E711 - not an array: Python's identity fallback


def test_random_samplers_have_mxnets_older_names_and_write_into_out() -> None:
    assert nd.uniform is nd.random.uniform and nd.random_uniform is nd.random.uniform
    assert nd.normal is nd.random.normal and nd.random_normal is nd.random.normal
    out = nd.zeros((3, 2))
    assert nd.random.uniform(5, 6, out=out) is out
    assert out.asnumpy().min() >= 5 and out.asnumpy().max() < 6


@pytest.mark.parametrize("name", ["elemwise_add", "elemwise_mul", "broadcast_sub", "broadcast_maximum", "broadcast_lesser"])
def test_operator_named_binary_functions(name: str) -> None:
    a, b = np.array([[1.0, 4.0]]), np.array([[3.0], [2.0]])
    ref = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "maximum": np.maximum, "lesser": np.less}[name.split("_", 1)[1]]
    if name.startswith("elemwise"):
        b = np.array([[3.0, 2.0]])
    np.testing.assert_array_equal(getattr(nd, name)(nd.array(a), nd.array(b)).asnumpy(), ref(a, b).astype(np.float32))


# ---------------------------------------------------------------------------- save / load
DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


def test_loads_files_written_by_mxnet_1_9_1() -> None:
    first, second = nd.load(os.path.join(DATA, "mxnet-1.9.1-list.params"))
    assert first.dtype == np.float32 and first.asnumpy().tolist() == [[1, 2], [3, 4]]
    assert second.dtype == np.int64 and second.asnumpy().tolist() == [0, 1, 2]
    named = nd.load(os.path.join(DATA, "mxnet-1.9.1-dict.params"))
    assert list(named) == ["w", "b"] and named["w"].dtype == np.float64 and named["b"].asnumpy().tolist() == [7]


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_saves_byte_for_byte_what_mxnet_writes(tmp_path, kind: str) -> None:  # type: ignore[no-untyped-def]
    original = os.path.join(DATA, f"mxnet-1.9.1-{kind}.params")
    path = tmp_path / "again.params"
    nd.save(path, nd.load(original))
    assert path.read_bytes() == open(original, "rb").read()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.uint8, np.int8, np.int32, np.int64, np.bool_])
def test_save_load_round_trip_of_every_dtype_and_shape(tmp_path, dtype) -> None:  # type: ignore[no-untyped-def]
    arrays = {"scalar": nd.array(np.array([3]), dtype=dtype), "cube": nd.array(np.arange(24).reshape(2, 3, 4) % 2, dtype=dtype)}
    nd.save(tmp_path / "a.params", arrays)
    back = nd.load(tmp_path / "a.params")
    assert isinstance(back, dict) and list(back) == list(arrays)
    for k in arrays:
        assert back[k].dtype == np.dtype(dtype) and back[k].shape == arrays[k].shape
        np.testing.assert_array_equal(back[k].asnumpy(), arrays[k].asnumpy())
    single = tmp_path / "one.params"
    nd.save(single, arrays["cube"])
    (one,) = nd.load(single)
    np.testing.assert_array_equal(one.asnumpy(), arrays["cube"].asnumpy())


def test_save_waits_for_pending_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    nd.save(tmp_path / "p.params", [_pending()])
    assert float(nd.load(tmp_path / "p.params")[0].asnumpy()[0, 0]) == 201.0


def test_a_cut_or_foreign_buffer_is_an_mxneterror_naming_where() -> None:
    raw = open(os.path.join(DATA, "mxnet-1.9.1-dict.params"), "rb").read()
    for cut in (raw[:-3], raw[:40], raw[:10]):
        with pytest.raises(mx.MXNetError, match=r"cut short|byte"):
            nd.load_frombuffer(cut)
    with pytest.raises(mx.MXNetError, match=r"not an MXNet \.params file"):
        nd.load_frombuffer(b"PK\x03\x04" + bytes(40))
    with pytest.raises(TypeError, match="keys of a dict must be strings"):
        nd.save("/tmp/never-written.params", {1: nd.ones((1,))})  # type: ignore[dict-item]


# ---------------------------------------------------------------------------- autograd.grad, Function
def test_grad_returns_gradients_and_leaves_grad_alone() -> None:
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    x.grad[:] = 7
    with mx.autograd.record():
        z = (x * x * 3).sum()
    (dx,) = mx.autograd.grad(z, [x])
    np.testing.assert_allclose(dx.asnumpy(), [6.0, 12.0])
    np.testing.assert_array_equal(x.grad.asnumpy(), [7, 7])


def test_grad_refuses_what_it_cannot_do() -> None:
    x = nd.ones((1,))
    x.attach_grad()
    with mx.autograd.record():
        z = nd.exp(x) + x
    with pytest.raises(NotImplementedError, match="first-order"):
        mx.autograd.grad(z, [x], create_graph=True)
    with pytest.raises(OperatorError, match="attach_grad"):
        mx.autograd.grad(z, [nd.ones((1,))])


class _DivMul(mx.autograd.Function):
    def forward(self, x: mx.nd.NDArray, y: mx.nd.NDArray) -> tuple[mx.nd.NDArray, mx.nd.NDArray]:
        self.save_for_backward(x, y)
        return x / y, x * y

    def backward(self, dm: mx.nd.NDArray, dn: mx.nd.NDArray) -> tuple[mx.nd.NDArray, mx.nd.NDArray]:
        x, y = self.saved_tensors
        return dm / y + dn * y, dn * x - dm * x / y / y


def test_a_function_with_its_own_gradient_matches_autograd() -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([0.5, 4.0, 2.0])
    x, y = nd.array(a), nd.array(b)
    x.attach_grad()
    y.attach_grad()
    with mx.autograd.record():
        m, n = _DivMul()(x, y)
    mx.autograd.backward([m, n])
    np.testing.assert_allclose(x.grad.asnumpy(), 1 / b + b, rtol=1e-6)
    np.testing.assert_allclose(y.grad.asnumpy(), a - a / b**2, rtol=1e-6)
    f = _DivMul()
    f(x, y)
    with pytest.raises(OperatorError, match="only once"):
        f(x, y)


def test_star_import_of_autograd_gives_what_mxnet_code_uses() -> None:
    namespace: dict[str, object] = {}
    exec("from opprof.autograd import *", namespace)  # the import form MXNet's tests use
    assert {"NDArray", "Function", "grad", "backward", "record", "pause", "mark_variables"} <= set(namespace)


def test_contexts_work_as_with_blocks_and_there_are_no_gpus() -> None:
    assert mx.current_context() == mx.cpu()
    with mx.cpu(0) as ctx:
        assert mx.current_context() is ctx
        assert float(nd.ones((2,), ctx=ctx).sum().asscalar()) == 2.0
    assert mx.context.num_gpus() == 0


def test_bulk_is_accepted_and_every_op_still_runs() -> None:
    from tests.helpers import record_pushes

    with record_pushes() as rec, mx.engine.bulk(10):
        x = nd.ones((3,))
        for _ in range(4):
            x += 1
    assert float(x.asnumpy()[0]) == 5.0 and rec.names.count("_plus_scalar") == 4
    assert mx.engine.set_bulk_size(5) == 0 and mx.engine.set_bulk_size(0) == 5


# ---------------------------------------------------------------------------- contrib
def test_contrib_isnan_isinf_isfinite() -> None:
    a = np.array([[np.inf, -np.inf, 1.0], [np.nan, 5.0, 0.0]])
    d = nd.array(a)
    np.testing.assert_array_equal(nd.contrib.isnan(d).asnumpy(), np.isnan(a))
    np.testing.assert_array_equal(nd.contrib.isinf(d).asnumpy(), np.isinf(a))
    np.testing.assert_array_equal(nd.contrib.isfinite(d).asnumpy(), np.isfinite(a))


def test_contrib_index_copy_and_its_gradients() -> None:
    x = nd.zeros((5, 3))
    t = nd.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    index = nd.array([0, 4, 2], dtype=np.int64)
    x.attach_grad()
    t.attach_grad()
    with mx.autograd.record():
        out = nd.contrib.index_copy(x, index, t)
    out.backward()
    np.testing.assert_array_equal(out.asnumpy(), [[1, 2, 3], [0, 0, 0], [7, 8, 9], [0, 0, 0], [4, 5, 6]])
    np.testing.assert_array_equal(x.grad.asnumpy(), [[0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    np.testing.assert_array_equal(t.grad.asnumpy(), np.ones((3, 3)))
    with pytest.raises(OperatorError, match="index_copy"):
        nd.contrib.index_copy(x, index, nd.ones((2, 3)))


def test_contrib_allclose_is_numpys() -> None:
    a = nd.array([1.0, 2.0])
    assert nd.contrib.allclose(a, a * (1 + 1e-7)).asnumpy().tolist() == 1.0
    assert nd.contrib.allclose(a, a + 1, atol=0.5).asnumpy().tolist() == 0.0
    assert nd.contrib.allclose(a, a + 1, atol=1.5).shape == ()  # one value, 0-d as MXNet's (code formats it)


def test_fresh_grad_says_which_leaves_the_last_backward_reached() -> None:
    x, y = nd.ones((2,)), nd.ones((2,))
    mx.autograd.mark_variables([x, y], [nd.zeros((2,)), nd.zeros((2,))])
    assert not x._fresh_grad and not y._fresh_grad
    with mx.autograd.record():
        z = (x + 2).detach() + y
    z.backward()
    assert not x._fresh_grad and y._fresh_grad


def test_randint_and_elementwisesum() -> None:
    r = nd.random.randint(3, 7, shape=(200,))
    assert r.dtype == np.int32 and set(np.unique(r.asnumpy())) <= {3, 4, 5, 6} and len(set(r.asnumpy().tolist())) == 4
    with pytest.raises(ValueError, match="greater than low"):
        nd.random.randint(5, 5)
    np.testing.assert_array_equal(nd.ElementWiseSum(nd.ones((2,)), nd.ones((2,)) * 2).asnumpy(), [3, 3])


def test_gluon_imports_and_refuses_at_first_use() -> None:
    from opprof import gluon
    from opprof.gluon import nn

    with pytest.raises(NotImplementedError, match=r"mx\.gluon\.nn\.Dense: opprof has no Gluon"):
        nn.Dense(10)
    with pytest.raises(NotImplementedError, match=r"mx\.gluon\.Trainer"):
        _ = gluon.Trainer.step
    assert not hasattr(gluon, "__wrapped__")  # dunder lookups stay AttributeErrors (copy, pickle, inspect)


def test_numpy_mode_decorators_import_and_refuse_when_called() -> None:
    @mx.test_utils.use_np
    def f() -> int:
        return 1

    @mx.use_np_shape
    def g() -> int:
        return 2

    for fn in (f, g):
        with pytest.raises(NotImplementedError, match="NumPy-shape mode"):
            fn()
    with pytest.raises(NotImplementedError):
        mx.util.set_np_shape(True)
    assert mx.util.set_np_shape(False) is False and not mx.util.is_np_shape()


def test_operator_arguments_read_off_the_functions() -> None:
    act = mx.operator.get_operator_arguments("Activation")
    assert isinstance(act, mx.operator.OperatorArguments) and act.narg == 2 and act.names == ["data", "act_type"]
    assert act.types == ["NDArray-or-Symbol", "{'relu', 'sigmoid', 'softrelu', 'softsign', 'tanh'}, required"]
    dot = mx.operator.get_operator_arguments("dot")
    assert dot.names == ["lhs", "rhs", "transpose_a", "transpose_b"] and dot.types[2] == "boolean, optional, default=False"
    with pytest.raises(OperatorError, match="no operator function"):
        mx.operator.get_operator_arguments("NotAnOp")
