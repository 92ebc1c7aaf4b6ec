"""Custom operators (``mx.operator``): MXNet's API, its execution model, its faults.

Every test runs on the naive engine (the oracle) and on the threaded engine with a few worker
counts. A custom op's Python runs on its own worker thread there; the tests check what it sees
(fresh vars, the current invocation, the thread), what it pushes (names, the final ``Dummy_Wait``)
and where its errors surface.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import numpy as np
import pytest

import opprof as mx
from opprof import nd
from opprof.engine import CustomOpInfo, CustomPart, EngineObserver, Invocation
from tests.helpers import MyAddOneProp

pytestmark = pytest.mark.timeout(60)

REPO_ROOT = Path(__file__).resolve().parents[2]
MXNET_SCRIPT_NAME = "mxnet-1.9.1-custom-op.py"


def _mxnet_script_text() -> str:
    for candidate in (
        os.environ.get("OPPROF_MXNET_SCRIPT"),
        REPO_ROOT / "tests" / "data" / MXNET_SCRIPT_NAME,  # the repository's verbatim copy
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_text()
    raise FileNotFoundError(f"{MXNET_SCRIPT_NAME} is missing from tests/data")


def _run_script(tmp_path: Path, text: str, timeout: float, hung: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``text`` as a script in a fresh interpreter that imports this checkout; ``hung`` fails the test on timeout."""
    script = tmp_path / "script.py"
    script.write_text(text)
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    try:
        return subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(hung)


def _port_to_opprof(text: str) -> str:
    """The only changes a user makes: the import, and no profiler calls (opprof has its own)."""
    assert "import mxnet as mx" in text
    lines = [line for line in text.replace("import mxnet as mx", "import opprof as mx").splitlines() if "profiler" not in line]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- engines
ENGINE_SPECS = [
    pytest.param(("naive", None, None), id="naive"),
    pytest.param(("threaded", 1, 1), id="threaded-w1-c1"),
    pytest.param(("threaded", 2, 2), id="threaded-w2-c2"),
    pytest.param(("threaded", 4, 3), id="threaded-w4-c3"),
]


def _use_engine(kind: str, workers: int | None, custom_workers: int | None) -> mx.engine.Engine:
    if kind == "naive":
        return mx.set_engine("naive")
    return mx.set_engine("threaded", workers=workers, custom_workers=custom_workers)


def _drain() -> None:
    """Wait for everything; a fault test has already checked the errors it expects."""
    try:
        nd.waitall()
    except Exception:
        pass


@pytest.fixture(params=ENGINE_SPECS)
def engine(request: pytest.FixtureRequest):
    eng = _use_engine(*request.param)
    try:
        yield eng
    finally:
        # Errors a test left behind are raised here (set_engine waits for the old engine).
        mx.set_engine("threaded")


@pytest.fixture(params=[1, 2], ids=["threaded-w1-c1", "threaded-w2-c1"])
def one_custom_worker(request: pytest.FixtureRequest):
    eng = mx.set_engine("threaded", workers=request.param, custom_workers=1)
    try:
        yield eng
    finally:
        mx.set_engine("threaded")


def _is_threaded(eng: mx.engine.Engine) -> bool:
    return eng.kind == "threaded"


class Recorder(EngineObserver):
    """Engine observer: every push (name, info, the pusher's invocation, its thread) and every run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pushes: list[tuple[str, object, Invocation | None, str]] = []
        self.runs: list[tuple[str, str]] = []

    def on_push(self, opr) -> None:
        entry = (opr.name, opr.info, mx.operator.current_invocation(), threading.current_thread().name)
        with self.lock:
            self.pushes.append(entry)

    def run(self, opr, fn, *args):
        with self.lock:
            self.runs.append((opr.name, threading.current_thread().name))
        return fn(*args)

    def clear(self) -> None:
        with self.lock:
            self.pushes.clear()
            self.runs.clear()


# ---------------------------------------------------------------------------- custom ops
def my_add_one_np(x: np.ndarray) -> np.ndarray:
    return (np.tanh(x) * 2 + 1) * 3


class AddMul(mx.operator.CustomOp):
    """Two inputs, two outputs: (a + b, a * b), half by sub-ops and half by NumPy."""

    def forward(self, is_train, req, in_data, out_data, aux):
        a, b = in_data
        out_data[0][:] = a + b
        self.assign(out_data[1], req[1], a.asnumpy() * b.asnumpy())

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g_sum, g_prod = out_grad
        a, b = in_data
        self.assign(in_grad[0], req[0], g_sum + g_prod * b)
        gb = g_sum.asnumpy() + g_prod.asnumpy() * a.asnumpy()
        self.assign(in_grad[1], req[1], gb)


class AddMulProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["lhs", "rhs"]

    def list_outputs(self):
        return ["sum", "prod"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0], in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return AddMul()


class RowStats(mx.operator.CustomOp):
    """One input (n, m), two outputs of different shapes: row sums (n,) and 2 x (n, m)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], nd.sum(x, axis=1))
        self.assign(out_data[1], req[1], x * 2)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g_rows, g_scaled = out_grad
        n = g_rows.shape[0]
        self.assign(in_grad[0], req[0], g_rows.reshape((n, 1)) + g_scaled * 2)


class RowStatsProp(mx.operator.CustomOpProp):
    def list_outputs(self):
        return ["rowsum", "scaled"]

    def infer_shape(self, in_shape):
        (shape,) = in_shape
        return in_shape, [(shape[0],), shape], []

    def create_operator(self, ctx, shapes, dtypes):
        return RowStats()


class Cube(mx.operator.CustomOp):
    """out = x^3 * y + tanh(y); backward in NumPy (checked against finite differences)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x, y = in_data
        self.assign(out_data[0], req[0], x * x * x * y + nd.tanh(y))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = out_grad[0].asnumpy()
        x, y = in_data[0].asnumpy(), in_data[1].asnumpy()
        self.assign(in_grad[0], req[0], g * 3 * x**2 * y)
        self.assign(in_grad[1], req[1], g * (x**3 + 1 - np.tanh(y) ** 2))


class CubeProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["x", "y"]

    def create_operator(self, ctx, shapes, dtypes):
        return Cube()


class AssignTwice(mx.operator.CustomOp):
    """Assigns 2x to the output twice with the req given as a keyword argument."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def forward(self, is_train, req, in_data, out_data, aux):
        for _ in range(2):
            self.assign(out_data[0], self.mode, in_data[0] * 2)


class AssignTwiceProp(mx.operator.CustomOpProp):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def create_operator(self, ctx, shapes, dtypes):
        return AssignTwice(self.mode)


SCALE_KWARGS: list[dict[str, object]] = []


class Scale(mx.operator.CustomOp):
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * self.scale)


class ScaleProp(mx.operator.CustomOpProp):
    def __init__(self, scale, **rest):
        super().__init__()
        SCALE_KWARGS.append({"scale": scale, **rest})
        self.scale = float(scale)

    def create_operator(self, ctx, shapes, dtypes):
        return Scale(self.scale)


PROBES: list[dict[str, object]] = []


class Probe(mx.operator.CustomOp):
    """Identity that records where and how its Python runs."""

    def _record(self, phase: str, **extra: object) -> None:
        PROBES.append(
            {
                "phase": phase,
                "thread": threading.current_thread().name,
                "invocation": mx.operator.current_invocation(),
                "recording": mx.autograd.is_recording(),
                **extra,
            }
        )

    def forward(self, is_train, req, in_data, out_data, aux):
        self._record("forward", is_train=is_train)
        self.assign(out_data[0], req[0], in_data[0] + 0)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self._record("backward")
        self.assign(in_grad[0], req[0], out_grad[0] + 0)


class ProbeProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Probe()


COUNTER_CALLS: list[str] = []


class Counter(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        COUNTER_CALLS.append("forward")
        self.assign(out_data[0], req[0], in_data[0] + 1)


class CounterProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Counter()


RAISED: list[BaseException] = []


class Fail(mx.operator.CustomOp):
    def __init__(self, tag: str) -> None:
        self.tag = tag

    def forward(self, is_train, req, in_data, out_data, aux):
        out_data[0][:] = in_data[0] + 1  # a sub-op pushed before the failure
        err = ValueError(f"forward failed for {self.tag}")
        RAISED.append(err)
        raise err


class FailProp(mx.operator.CustomOpProp):
    def __init__(self, tag="untagged", outputs="1"):
        super().__init__()
        self.tag = tag
        self.n_out = int(outputs)

    def list_outputs(self):
        return [f"out{i}" for i in range(self.n_out)]

    def create_operator(self, ctx, shapes, dtypes):
        return Fail(self.tag)


def _boom() -> None:
    raise RuntimeError("sub-op failed")


class SubOpFail(mx.operator.CustomOp):
    """A sub-operator fails on the engine; the Python itself returns normally."""

    def __init__(self, how: str) -> None:
        self.how = how

    def forward(self, is_train, req, in_data, out_data, aux):
        if self.how == "direct":
            # A raw engine op writing the output.
            mx.get_engine().push(_boom, (), [out_data[0].var], "Boom")
        elif self.how == "chain":
            # A raw engine op writing a temporary, which then flows into the output.
            t = nd.zeros(in_data[0].shape, dtype=in_data[0].dtype)
            mx.get_engine().push(_boom, (), [t.var], "Boom")
            self.assign(out_data[0], req[0], t * 2 + in_data[0])
        elif self.how == "nested":
            # A custom op pushed by this one fails; its output flows into ours.
            inner = nd.Custom(in_data[0], op_type="CoFail", tag="inner")
            self.assign(out_data[0], req[0], inner)
        else:
            raise AssertionError(self.how)


class SubOpFailProp(mx.operator.CustomOpProp):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def create_operator(self, ctx, shapes, dtypes):
        return SubOpFail(self.how)


class BadBackward(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 2)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 2)  # a sub-op before the failure
        raise KeyError("backward failed")


class BadBackwardProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return BadBackward()


class BadInferShapeProp(mx.operator.CustomOpProp):
    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0], in_shape[0]], []  # two output shapes, one output

    def create_operator(self, ctx, shapes, dtypes):
        return Probe()


class WriteOutputs(mx.operator.CustomOp):
    """Sub-ops write the outputs, then read them back, and asnumpy() intermediate results."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        x_np = x.asnumpy()
        out_data[0][:] = x * 2  # a sub-op writing output 0 (var held by the running custom op)
        doubled = out_data[0].asnumpy()  # wait for that sub-op, from inside the custom op
        assert np.array_equal(doubled, x_np * 2)
        t = out_data[0] + 1  # a sub-op reading an output
        t_np = t.asnumpy()  # an intermediate result
        self.assign(out_data[1], req[1], nd.array(t_np - 1) + x)  # 3x
        out_data[1][:] += 1  # 3x + 1, in place on an output
        out_data[2][:] = 5.0  # a scalar write


class WriteOutputsProp(mx.operator.CustomOpProp):
    def list_outputs(self):
        return ["double", "triple_plus_one", "five"]

    def create_operator(self, ctx, shapes, dtypes):
        return WriteOutputs()


class Aux(mx.operator.CustomOp):
    """out = x + counter; counter += 1 (an auxiliary state written by the op)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] + aux[0])
        aux[0][:] = aux[0] + 1


class AuxProp(mx.operator.CustomOpProp):
    def list_auxiliary_states(self):
        return ["counter"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], [in_shape[0]]

    def create_operator(self, ctx, shapes, dtypes):
        return Aux()


class Float32Out(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 0.5)


class Float32OutProp(mx.operator.CustomOpProp):
    def infer_type(self, in_type):
        return in_type, [np.float32], []

    def create_operator(self, ctx, shapes, dtypes):
        return Float32Out()


WAIT_GATE = threading.Event()
WAIT_HOLDER: dict[str, nd.NDArray] = {}


class WaitOnLater(mx.operator.CustomOp):
    """Waits (asnumpy) on an array that a custom op pushed *after* this one produces."""

    def forward(self, is_train, req, in_data, out_data, aux):
        assert WAIT_GATE.wait(20), "the test never published the later array"
        later = WAIT_HOLDER["G"].asnumpy()
        self.assign(out_data[0], req[0], in_data[0] + nd.array(later))


class WaitOnLaterProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return WaitOnLater()


class TimesTen(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 10)


class TimesTenProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return TimesTen()


NESTED_SEEN: list[tuple[Invocation | None, Invocation | None]] = []


class Outer(mx.operator.CustomOp):
    """Pushes another custom op from its forward and waits for it (a nested invocation)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        before = mx.operator.current_invocation()
        inner = nd.Custom(in_data[0], op_type="CoTimesTen")
        inner_np = inner.asnumpy()
        NESTED_SEEN.append((before, mx.operator.current_invocation()))
        self.assign(out_data[0], req[0], nd.array(inner_np) + 1)


class OuterProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Outer()


class WaitAll(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        out_data[0][:] = in_data[0] + 1
        nd.waitall()  # would wait for this very op


class WaitAllProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return WaitAll()


class Generate(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        assert in_data == []
        self.assign(out_data[0], req[0], nd.ones((2, 3)) * 7)


class GenerateProp(mx.operator.CustomOpProp):
    """No inputs (a generator): infer_shape and infer_type give the output from nothing."""

    def list_arguments(self):
        return []

    def infer_shape(self, in_shape):
        return [], [(2, 3)], []

    def infer_type(self, in_type):
        return [], [np.float32], []

    def create_operator(self, ctx, shapes, dtypes):
        return Generate()


OPS = {
    "MyAddOne": MyAddOneProp,
    "CoGenerate": GenerateProp,
    "CoWaitAll": WaitAllProp,
    "CoAddMul": AddMulProp,
    "CoRowStats": RowStatsProp,
    "CoCube": CubeProp,
    "CoAssignTwice": AssignTwiceProp,
    "CoScale": ScaleProp,
    "CoProbe": ProbeProp,
    "CoCounter": CounterProp,
    "CoFail": FailProp,
    "CoSubOpFail": SubOpFailProp,
    "CoBadBackward": BadBackwardProp,
    "CoBadInferShape": BadInferShapeProp,
    "CoWriteOutputs": WriteOutputsProp,
    "CoAux": AuxProp,
    "CoFloat32Out": Float32OutProp,
    "CoWaitOnLater": WaitOnLaterProp,
    "CoTimesTen": TimesTenProp,
    "CoOuter": OuterProp,
}


@pytest.fixture(autouse=True)
def _registered_ops():
    # Registered per test: the registry is global and other test modules may register their own
    # "MyAddOne" at import time.
    for name, prop in OPS.items():
        mx.operator.register(name)(prop)
    for log in (SCALE_KWARGS, PROBES, COUNTER_CALLS, RAISED, NESTED_SEEN):
        log.clear()
    WAIT_GATE.clear()
    WAIT_HOLDER.clear()
    yield


def _rand(shape, seed: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, size=shape)


def _frames(exc: BaseException) -> list[str]:
    return [f.name for f in traceback.extract_tb(exc.__traceback__)]


def _check_engine_works() -> None:
    x = nd.array(_rand((2, 3), 99))
    y = nd.Custom(x, op_type="MyAddOne")
    np.testing.assert_allclose(y.asnumpy(), my_add_one_np(x.asnumpy()))
    nd.waitall()


# ---------------------------------------------------------------------------- the MXNet script
@pytest.mark.e2e  # a script in a subprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["naive", "threaded"])
def test_mxnet_script_runs_unchanged_in_subprocess(kind: str, tmp_path: Path) -> None:
    proc = _run_script(tmp_path, _port_to_opprof(_mxnet_script_text()), 100, "the ported script hung", OPPROF_ENGINE=kind)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def test_port_removes_only_profiler_lines() -> None:
    original = _mxnet_script_text()
    ported = _port_to_opprof(original)
    code = [line for line in ported.splitlines() if not line.lstrip().startswith("#")]  # the copy's header names MXNet
    assert not any("mxnet" in line for line in code) and "profiler" not in ported
    assert "import opprof as mx" in ported
    kept = [line for line in original.splitlines() if "profiler" not in line]
    assert len(ported.splitlines()) == len(kept)


def test_mxnet_script_workload_in_process(engine) -> None:
    namespace: dict[str, object] = {"__name__": "mxnet_script"}
    exec(compile(_port_to_opprof(_mxnet_script_text()), MXNET_SCRIPT_NAME, "exec"), namespace)
    a, b, c, b2 = (namespace[k] for k in ("a", "b", "c", "b2"))
    expected_b = (np.tanh(np.ones((100, 100), np.float32)) * 2 + 1) * 3
    np.testing.assert_allclose(b.asnumpy(), expected_b, rtol=1e-6)
    np.testing.assert_allclose(c.asnumpy(), expected_b * 2, rtol=1e-6)
    np.testing.assert_allclose(c.asnumpy(), ((np.tanh(1.0) * 2) + 1) * 3 * 2, rtol=1e-6)
    # d(c)/d(a) = 2 (from c = b * 2) * 3 (MyAddOne's backward), written (not added) each iteration.
    np.testing.assert_array_equal(a.grad.asnumpy(), np.full((100, 100), 6.0, np.float32))
    np.testing.assert_array_equal(b2.asnumpy(), np.full((100, 100), 2.0, np.float32))


# ---------------------------------------------------------------------------- several inputs/outputs
def test_multi_input_multi_output_forward(engine) -> None:
    a_np, b_np = _rand((3, 4), 1), _rand((3, 4), 2)
    a, b = nd.array(a_np), nd.array(b_np)
    outs = nd.Custom(a, b, op_type="CoAddMul")
    assert isinstance(outs, list) and len(outs) == 2
    s, p = outs
    assert s.shape == p.shape == (3, 4) and s.dtype == np.float64
    np.testing.assert_allclose(s.asnumpy(), a_np + b_np)
    np.testing.assert_allclose(p.asnumpy(), a_np * b_np)
    # The outputs feed ordinary ops and other custom ops.
    s2, p2 = nd.Custom(s, p, op_type="CoAddMul")
    np.testing.assert_allclose((s2 - p2).asnumpy(), (a_np + b_np) + a_np * b_np - (a_np + b_np) * a_np * b_np)


def test_outputs_with_their_own_shapes(engine) -> None:
    x_np = _rand((3, 5), 3)
    rows, scaled = nd.Custom(nd.array(x_np), op_type="CoRowStats")
    assert rows.shape == (3,) and scaled.shape == (3, 5)
    np.testing.assert_allclose(rows.asnumpy(), x_np.sum(axis=1))
    np.testing.assert_allclose(scaled.asnumpy(), x_np * 2)


def test_multi_input_multi_output_backward(engine) -> None:
    a_np, b_np = _rand((3, 4), 4), _rand((3, 4), 5)
    w0_np, w1_np = _rand((3, 4), 6), _rand((3, 4), 7)
    a, b, w0, w1 = nd.array(a_np), nd.array(b_np), nd.array(w0_np), nd.array(w1_np)
    a.attach_grad()
    b.attach_grad()
    with mx.autograd.record():
        s, p = nd.Custom(a, b, op_type="CoAddMul")
        loss = nd.sum(s * w0) + nd.sum(p * w1)
    loss.backward()
    np.testing.assert_allclose(loss.asnumpy(), np.sum((a_np + b_np) * w0_np + a_np * b_np * w1_np))
    np.testing.assert_allclose(a.grad.asnumpy(), w0_np + w1_np * b_np)
    np.testing.assert_allclose(b.grad.asnumpy(), w0_np + w1_np * a_np)


def test_backward_with_an_unused_output(engine) -> None:
    a_np, b_np = _rand((2, 3), 8), _rand((2, 3), 9)
    a, b = nd.array(a_np), nd.array(b_np)
    a.attach_grad()
    b.attach_grad()
    with mx.autograd.record():
        _s, p = nd.Custom(a, b, op_type="CoAddMul")
        loss = nd.sum(p)
    loss.backward()
    np.testing.assert_allclose(a.grad.asnumpy(), b_np)
    np.testing.assert_allclose(b.grad.asnumpy(), a_np)


def test_same_array_as_both_inputs(engine) -> None:
    x_np = _rand((2, 3), 10)
    x = nd.array(x_np)
    x.attach_grad()
    with mx.autograd.record():
        s, p = nd.Custom(x, x, op_type="CoAddMul")
        loss = nd.sum(s + p)
    loss.backward()
    np.testing.assert_allclose(s.asnumpy(), 2 * x_np)
    np.testing.assert_allclose(p.asnumpy(), x_np**2)
    np.testing.assert_allclose(x.grad.asnumpy(), 2 + 2 * x_np)


def test_backward_through_outputs_of_different_shapes(engine) -> None:
    x_np, v_np, w_np = _rand((3, 5), 11), _rand((3,), 12), _rand((3, 5), 13)
    x, v, w = nd.array(x_np), nd.array(v_np), nd.array(w_np)
    x.attach_grad()
    with mx.autograd.record():
        rows, scaled = nd.Custom(x, op_type="CoRowStats")
        loss = nd.sum(rows * v) + nd.sum(scaled * w)
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), v_np[:, None] + 2 * w_np)


def test_backward_through_a_chain_of_custom_and_regular_ops(engine) -> None:
    x_np = _rand((4, 3), 14)
    x = nd.array(x_np)
    x.attach_grad()
    with mx.autograd.record():
        h = nd.tanh(x)
        y = nd.Custom(nd.Custom(h, op_type="MyAddOne"), op_type="MyAddOne")
        loss = nd.sum(y * 2)
    loss.backward()
    np.testing.assert_allclose(y.asnumpy(), my_add_one_np(my_add_one_np(np.tanh(x_np))))
    # MyAddOne's declared backward is 3 * out_grad (whatever its forward does).
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * 3 * 3 * (1 - np.tanh(x_np) ** 2))


def test_gradient_matches_finite_differences(engine) -> None:
    x_np, y_np, w_np = _rand((2, 3), 15), _rand((2, 3), 16), _rand((2, 3), 17)
    x, y, w = nd.array(x_np), nd.array(y_np), nd.array(w_np)
    x.attach_grad()
    y.attach_grad()
    with mx.autograd.record():
        loss = nd.sum(nd.Custom(x, y, op_type="CoCube") * w)
    loss.backward()
    gx, gy = x.grad.asnumpy(), y.grad.asnumpy()

    def f(xv: np.ndarray, yv: np.ndarray) -> float:
        out = nd.Custom(nd.array(xv), nd.array(yv), op_type="CoCube")
        return float(np.sum(out.asnumpy() * w_np))

    np.testing.assert_allclose(f(x_np, y_np), np.sum((x_np**3 * y_np + np.tanh(y_np)) * w_np))
    eps = 1e-6
    for which, grad in ((0, gx), (1, gy)):
        fd = np.zeros_like(grad)
        for idx in np.ndindex(*grad.shape):
            args_hi, args_lo = [x_np.copy(), y_np.copy()], [x_np.copy(), y_np.copy()]
            args_hi[which][idx] += eps
            args_lo[which][idx] -= eps
            fd[idx] = (f(*args_hi) - f(*args_lo)) / (2 * eps)
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


def test_grad_req_add_accumulates_over_backward_passes(engine) -> None:
    x = nd.array(_rand((2, 2), 18))
    x.attach_grad(grad_req="add")
    for _ in range(3):
        with mx.autograd.record():
            y = nd.Custom(x, op_type="MyAddOne")
        y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), np.full((2, 2), 9.0))


def test_is_train_and_recording_inside_the_op(engine) -> None:
    x = nd.ones((2, 2))
    x.attach_grad()
    nd.Custom(x, op_type="CoProbe").wait_to_read()
    with mx.autograd.record():
        y = nd.Custom(x, op_type="CoProbe")
        assert mx.autograd.is_recording()  # restored after the op ran (inline on the naive engine)
    y.wait_to_read()
    with mx.autograd.record(train_mode=False):
        nd.Custom(x, op_type="CoProbe").wait_to_read()
    y.backward()
    x.grad.wait_to_read()
    forwards = [p for p in PROBES if p["phase"] == "forward"]
    assert [p["is_train"] for p in forwards] == [False, True, False]
    # Nothing the op's Python does is recorded (as in MXNet).
    assert not any(p["recording"] for p in PROBES)
    np.testing.assert_array_equal(x.grad.asnumpy(), np.ones((2, 2), np.float32))


def test_output_dtype_from_infer_type(engine) -> None:
    y = nd.Custom(nd.array(np.arange(6.0).reshape(2, 3)), op_type="CoFloat32Out")
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.asnumpy(), (np.arange(6.0).reshape(2, 3) * 0.5).astype(np.float32))


def test_auxiliary_state_is_written(engine) -> None:
    x_np = _rand((2, 3), 19)
    x, counter = nd.array(x_np), nd.zeros((2, 3), dtype=np.float64)
    outs = [nd.Custom(x, counter, op_type="CoAux") for _ in range(3)]
    for i, out in enumerate(outs):
        np.testing.assert_allclose(out.asnumpy(), x_np + i)
    np.testing.assert_array_equal(counter.asnumpy(), np.full((2, 3), 3.0))


def test_custom_op_without_inputs(engine) -> None:
    y = nd.Custom(op_type="CoGenerate")
    assert y.shape == (2, 3) and y.dtype == np.float32
    np.testing.assert_array_equal(y.asnumpy(), np.full((2, 3), 7.0, np.float32))


@pytest.mark.timeout(60)
def test_custom_ops_pushed_from_several_user_threads(engine) -> None:
    errors: list[BaseException] = []

    def user(k: int) -> None:
        try:
            for i in range(25):
                v = float(k * 100 + i)
                x = nd.array(np.full((3, 3), v))
                x.attach_grad()
                with mx.autograd.record():
                    s, p = nd.Custom(x, nd.Custom(x, op_type="MyAddOne"), op_type="CoAddMul")
                    loss = nd.sum(s + p)
                loss.backward()
                f = my_add_one_np(np.full((3, 3), v))
                np.testing.assert_allclose(p.asnumpy(), v * f)
                # d/dx [x + f(x) + x f(x)] with MyAddOne's declared derivative 3
                np.testing.assert_allclose(x.grad.asnumpy(), 1 + 3 + f + 3 * v)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=user, args=(k,), name=f"user-{k}") for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert not any(t.is_alive() for t in threads), "a user thread hung"
    if errors:
        raise errors[0]


# ---------------------------------------------------------------------------- assign / req
@pytest.mark.parametrize("src_kind", ["ndarray", "numpy", "scalar"])
def test_assign_req_semantics(engine, src_kind: str) -> None:
    op = mx.operator.CustomOp()
    dst_np = np.arange(6.0).reshape(2, 3)
    src_np = np.full((2, 3), 0.5) if src_kind == "scalar" else _rand((2, 3), 20)
    src = {"ndarray": nd.array(src_np), "numpy": src_np, "scalar": 0.5}[src_kind]
    expected = {"write": src_np, "inplace": src_np, "add": dst_np + src_np, "null": dst_np}
    for req, want in expected.items():
        dst = nd.array(dst_np)
        op.assign(dst, req, src)
        np.testing.assert_allclose(dst.asnumpy(), want, err_msg=req)
    with pytest.raises(ValueError, match="req"):
        op.assign(nd.array(dst_np), "overwrite", src)


@pytest.mark.parametrize(("mode", "factor"), [("write", 2.0), ("inplace", 2.0), ("add", 4.0), ("null", 0.0)])
def test_assign_req_inside_forward(engine, mode: str, factor: float) -> None:
    x_np = _rand((3, 2), 21)
    y = nd.Custom(nd.array(x_np), op_type="CoAssignTwice", mode=mode)
    np.testing.assert_allclose(y.asnumpy(), x_np * factor)


# ---------------------------------------------------------------------------- kwargs
def test_kwargs_reach_the_prop_as_strings(engine) -> None:
    x_np = _rand((2, 2), 22)
    y = nd.Custom(nd.array(x_np), op_type="CoScale", scale=2.5, flag=True, count=3, name_tag="abc")
    np.testing.assert_allclose(y.asnumpy(), x_np * 2.5)
    assert SCALE_KWARGS == [{"scale": "2.5", "flag": "True", "count": "3", "name_tag": "abc"}]


def test_name_keyword_is_not_passed_to_the_prop(engine) -> None:
    # MXNet's generated nd.Custom does `kwargs.pop('name', None)` before building the op.
    x_np = _rand((2, 2), 34)
    y = nd.Custom(nd.array(x_np), op_type="MyAddOne", name="my_add_one")
    np.testing.assert_allclose(y.asnumpy(), my_add_one_np(x_np))


def test_out_keyword_receives_the_result(engine) -> None:
    # MXNet's generated nd.Custom does `out = kwargs.pop('out', None)` and writes the output there.
    x_np = _rand((2, 2), 35)
    out = nd.zeros((2, 2), dtype=np.float64)
    y = nd.Custom(nd.array(x_np), op_type="MyAddOne", out=out)
    assert y is out
    np.testing.assert_allclose(out.asnumpy(), my_add_one_np(x_np))


# ---------------------------------------------------------------------------- names and invocations
def _pushes_of(rec: Recorder, inv: Invocation) -> list[tuple[str, object, Invocation | None, str]]:
    return [p for p in rec.pushes if p[2] is inv]


def _parts(rec: Recorder, part: CustomPart) -> list[Invocation]:
    """The invocations whose ``part`` (their own engine op, or its Dummy_Wait) was pushed, in order."""
    return [p[1].invocation for p in rec.pushes if isinstance(p[1], CustomOpInfo) and p[1].part is part]


def test_forward_push_names_and_invocation(engine) -> None:
    x = nd.array(_rand((3, 3), 23))
    x.wait_to_read()
    rec = Recorder()
    engine.observer = rec
    try:
        y = nd.Custom(x, op_type="MyAddOne")
        np.testing.assert_allclose(y.asnumpy(), my_add_one_np(x.asnumpy()))
        nd.waitall()
    finally:
        engine.observer = None

    custom = [p for p in rec.pushes if isinstance(p[1], CustomOpInfo) and p[1].part is CustomPart.INVOCATION]
    assert len(custom) == 1, rec.pushes
    name, info, pusher_inv, _thread = custom[0]
    inv = info.invocation
    assert name == "MyAddOne"
    assert inv.op_type == "MyAddOne" and inv.name == "MyAddOne" and inv.backward is False
    assert pusher_inv is None  # pushed by the user's thread, not from inside a custom op

    sub = _pushes_of(rec, inv)
    names = [p[0] for p in sub]
    assert names[:2] == ["_plus_scalar", "_mul_scalar"], names
    assert names[-1] == "Dummy_Wait" and sub[-1][1] == CustomOpInfo(inv, CustomPart.COMPLETION)
    assert names.count("Dummy_Wait") == 1
    # Every push of the invocation comes from one thread: the op's worker (the pusher's when naive).
    assert {p[3] for p in sub} == {sub[0][3]}
    if _is_threaded(engine):
        assert re.fullmatch(r"opprof-custom-\d+", sub[0][3])
    # Every pushed op ran (through the observer); on the threaded engine, on engine workers.
    assert sorted(n for n, *_ in rec.pushes) == sorted(n for n, _ in rec.runs)
    if _is_threaded(engine):
        ran_on = {t for n, t in rec.runs if n in ("MyAddOne", "_plus_scalar", "_mul_scalar", "Dummy_Wait")}
        assert all(re.fullmatch(r"opprof-engine-\d+", t) for t in ran_on), ran_on


def test_backward_push_names_and_invocation(engine) -> None:
    x = nd.array(_rand((2, 3), 24))
    x.attach_grad()
    rec = Recorder()
    engine.observer = rec
    try:
        with mx.autograd.record():
            y = nd.Custom(x, op_type="MyAddOne")
            z = y * 2
        z.backward()
        np.testing.assert_array_equal(x.grad.asnumpy(), np.full((2, 3), 6.0))
        nd.waitall()
    finally:
        engine.observer = None

    invs = _parts(rec, CustomPart.INVOCATION)
    assert [i.name for i in invs] == ["MyAddOne", "_backward_MyAddOne"]
    fwd, bwd = invs
    assert bwd.backward is True and bwd.op_type == "MyAddOne" and fwd.id != bwd.id
    bsub = _pushes_of(rec, bwd)
    assert bsub[0][0] == "_mul_scalar"
    assert bsub[-1][0] == "Dummy_Wait" and bsub[-1][1] == CustomOpInfo(bwd, CustomPart.COMPLETION)
    # The backward op is pushed by autograd on the user's thread.
    assert next(p for p in rec.pushes if p[1] == CustomOpInfo(bwd, CustomPart.INVOCATION))[2] is None


def test_distinct_invocations_have_distinct_ids(engine) -> None:
    x = nd.ones((2, 2))
    x.attach_grad()
    rec = Recorder()
    engine.observer = rec
    try:
        for _ in range(3):
            with mx.autograd.record():
                y = nd.Custom(x, op_type="MyAddOne")
            y.backward()
        nd.Custom(x, x, op_type="CoAddMul")
        nd.waitall()
    finally:
        engine.observer = None
    starts = _parts(rec, CustomPart.INVOCATION)
    assert len(starts) == 7
    assert len({i.id for i in starts}) == 7
    dummies = _parts(rec, CustomPart.COMPLETION)
    assert [p[0] for p in rec.pushes if p[0] == "Dummy_Wait"] == ["Dummy_Wait"] * len(dummies)
    assert sorted(i.id for i in dummies) == sorted(i.id for i in starts)


def test_current_invocation_inside_and_outside(engine) -> None:
    assert mx.operator.current_invocation() is None
    x = nd.ones((2, 2))
    x.attach_grad()
    with mx.autograd.record():
        y = nd.Custom(x, op_type="CoProbe")
    y.backward()
    x.grad.wait_to_read()
    assert mx.operator.current_invocation() is None
    fwd, bwd = PROBES
    assert fwd["invocation"].name == "CoProbe" and not fwd["invocation"].backward
    assert bwd["invocation"].name == "_backward_CoProbe" and bwd["invocation"].backward


def test_nested_custom_op_invocations(engine) -> None:
    rec = Recorder()
    engine.observer = rec
    try:
        x_np = _rand((2, 2), 25)
        y = nd.Custom(nd.array(x_np), op_type="CoOuter")
        np.testing.assert_allclose(y.asnumpy(), x_np * 10 + 1)
        nd.waitall()
    finally:
        engine.observer = None
    [(before, after)] = NESTED_SEEN
    assert before is after and before.name == "CoOuter"
    inner = next(p for p in rec.pushes if p[0] == "CoTimesTen")
    assert inner[2] is before  # the inner op was pushed by the outer invocation
    inner_inv = inner[1].invocation
    inner_sub = _pushes_of(rec, inner_inv)
    assert inner_sub[-1][0] == "Dummy_Wait" and inner_sub[-1][1] == CustomOpInfo(inner_inv, CustomPart.COMPLETION)


# ---------------------------------------------------------------------------- threads
def test_python_runs_on_custom_worker_threads(engine) -> None:
    x = nd.ones((2, 2))
    x.attach_grad()
    with mx.autograd.record():
        y = nd.Custom(x, op_type="CoProbe")
    y.backward()
    x.grad.wait_to_read()
    threads = [p["thread"] for p in PROBES]
    assert len(threads) == 2
    if _is_threaded(engine):
        assert all(re.fullmatch(r"opprof-custom-\d+", t) for t in threads), threads
    else:
        assert threads == [threading.current_thread().name] * 2


# ---------------------------------------------------------------------------- ordering
def test_custom_op_is_ordered_with_writes_to_its_input(engine) -> None:
    x_np = _rand((3, 4), 33)
    x = nd.array(x_np)
    x[:] = x * 2  # pushed before: the op must see 2x
    y = nd.Custom(x, op_type="MyAddOne")
    x[:] = 100.0  # pushed after: must wait until the op (its Python and sub-ops) has read x
    view = nd.Custom(x[1:3], op_type="MyAddOne")  # a view shares the var
    x[1:2] = -1.0
    np.testing.assert_allclose(y.asnumpy(), my_add_one_np(2 * x_np))
    np.testing.assert_allclose(view.asnumpy(), my_add_one_np(np.full((2, 4), 100.0)))
    np.testing.assert_array_equal(x.asnumpy()[1], np.full(4, -1.0))


# ---------------------------------------------------------------------------- sub-ops on outputs
def test_sub_ops_writing_outputs_do_not_deadlock(engine) -> None:
    x_np = _rand((3, 3), 26)
    d, t, f = nd.Custom(nd.array(x_np), op_type="CoWriteOutputs")
    np.testing.assert_allclose(d.asnumpy(), 2 * x_np)
    np.testing.assert_allclose(t.asnumpy(), 3 * x_np + 1)
    np.testing.assert_array_equal(f.asnumpy(), np.full((3, 3), 5.0))


def test_many_invocations_in_flight(engine) -> None:
    x_np = _rand((4, 4), 27)
    x = nd.array(x_np)
    ys = [nd.Custom(x * i, op_type="CoWriteOutputs")[1] for i in range(20)]
    total = nd.add_n(*ys)
    np.testing.assert_allclose(total.asnumpy(), sum(3 * x_np * i + 1 for i in range(20)))


# ---------------------------------------------------------------------------- faults
def test_forward_error_surfaces_at_asnumpy_and_skips_dependents(engine) -> None:
    x = nd.ones((2, 3))
    y = nd.Custom(x, op_type="CoFail", tag="t1")
    z = y * 2
    w = nd.Custom(z, op_type="CoCounter")
    with pytest.raises(ValueError, match="forward failed for t1") as info:
        y.asnumpy()
    [err] = RAISED
    assert info.value.__cause__ is err
    assert "forward" in _frames(info.value)
    # Ops that depend on the failed output were skipped and carry the same error.
    with pytest.raises(ValueError) as info_w:
        w.asnumpy()
    assert info_w.value.__cause__ is err
    assert COUNTER_CALLS == []
    _drain()
    _check_engine_works()
    assert nd.Custom(x, op_type="CoCounter").asnumpy().tolist() == [[2.0] * 3] * 2


def test_forward_error_surfaces_at_waitall(engine) -> None:
    x = nd.ones((2, 3))
    y = nd.Custom(x, op_type="CoFail", tag="t2")
    z = nd.Custom(y + 1, op_type="CoCounter")
    with pytest.raises(ValueError, match="forward failed for t2") as info:
        nd.waitall()
    assert info.value.__cause__ is RAISED[0]
    assert "forward" in _frames(info.value)
    assert COUNTER_CALLS == []
    # Raised once, the error is cleared.
    nd.waitall()
    y.asnumpy()
    z.asnumpy()
    _check_engine_works()


def test_forward_error_reaches_every_output(engine) -> None:
    outs = nd.Custom(nd.ones((2, 2)), op_type="CoFail", tag="t3", outputs=3)
    assert len(outs) == 3
    for out in reversed(outs):
        with pytest.raises(ValueError, match="forward failed for t3") as info:
            out.asnumpy()
        assert info.value.__cause__ is RAISED[0]
    _drain()
    _check_engine_works()


@pytest.mark.parametrize("how", ["direct", "chain", "nested"])
def test_sub_op_error_inside_forward_propagates_to_outputs(engine, how: str) -> None:
    x = nd.ones((2, 3), dtype=np.float64)
    y = nd.Custom(x, op_type="CoSubOpFail", how=how)
    dependent = nd.Custom(y, op_type="CoCounter")
    expected = (ValueError, "forward failed for inner") if how == "nested" else (RuntimeError, "sub-op failed")
    with pytest.raises(expected[0], match=expected[1]) as info:
        dependent.asnumpy()
    assert ("forward" if how == "nested" else "_boom") in _frames(info.value)
    assert COUNTER_CALLS == []
    _drain()
    _check_engine_works()


@pytest.mark.timeout(30)
def test_waitall_inside_forward_is_an_error_not_a_hang(engine) -> None:
    y = nd.Custom(nd.ones((2, 2)), op_type="CoWaitAll")
    with pytest.raises(mx.engine.EngineError, match="custom operator") as info:
        y.asnumpy()
    assert "forward" in _frames(info.value)
    _drain()
    _check_engine_works()


def test_backward_error_surfaces_at_grad(engine) -> None:
    x = nd.array(_rand((2, 2), 28))
    x.attach_grad()
    with mx.autograd.record():
        y = nd.Custom(x, op_type="CoBadBackward")
        z = y * 3
    z.backward()  # pushes; the error comes later
    with pytest.raises(KeyError, match="backward failed") as info:
        x.grad.asnumpy()
    assert "backward" in _frames(info.value)
    _drain()
    # A good backward pass afterwards works and rewrites the gradient.
    with mx.autograd.record():
        y = nd.Custom(x, op_type="MyAddOne")
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), np.full((2, 2), 3.0))
    _check_engine_works()


def test_backward_error_surfaces_at_waitall(engine) -> None:
    x = nd.array(_rand((2, 2), 29))
    x.attach_grad()
    with mx.autograd.record():
        y = nd.Custom(x, op_type="CoBadBackward")
    y.backward()
    with pytest.raises(KeyError, match="backward failed"):
        nd.waitall()
    nd.waitall()
    _check_engine_works()


def test_unregistered_op_type(engine) -> None:
    with pytest.raises(mx.nd.OperatorError) as info:
        nd.Custom(nd.ones((2, 2)), op_type="CoDoesNotExist")
    msg = str(info.value)
    assert "CoDoesNotExist" in msg and "not registered" in msg
    assert "MyAddOne" in msg and "CoAddMul" in msg  # it lists what is registered
    assert "CoDoesNotExist" not in mx.operator.get_all_registered_operators()
    assert "MyAddOne" in mx.operator.get_all_registered_operators()
    _check_engine_works()


def test_wrong_number_of_inputs(engine) -> None:
    x = nd.ones((2, 2))
    with pytest.raises(mx.nd.OperatorError, match=r"CoAddMul.*2 input"):
        nd.Custom(x, op_type="CoAddMul")
    with pytest.raises(mx.nd.OperatorError, match=r"CoAddMul.*got 3"):
        nd.Custom(x, x, x, op_type="CoAddMul")
    with pytest.raises(TypeError, match="NDArray"):
        nd.Custom(x, np.ones((2, 2)), op_type="CoAddMul")
    _check_engine_works()


def test_infer_shape_with_wrong_output_count(engine) -> None:
    with pytest.raises(mx.nd.OperatorError, match="CoBadInferShape") as info:
        nd.Custom(nd.ones((2, 2)), op_type="CoBadInferShape")
    assert "output" in str(info.value)
    _check_engine_works()


def test_register_rejects_bad_names_and_classes() -> None:
    with pytest.raises(ValueError):
        mx.operator.register("")
    with pytest.raises(ValueError):
        mx.operator.register("A::B")
    with pytest.raises(TypeError):
        mx.operator.register("CoNotAProp")(object)


# ---------------------------------------------------------------------------- pool compensation
@pytest.mark.timeout(30)
def test_forward_waiting_on_a_later_custom_op_does_not_deadlock(one_custom_worker) -> None:
    # With one custom-op worker, A's forward occupies it while it waits on G, the output of B,
    # whose Python is queued behind A: the pool must add a worker while A is blocked.
    x_np, g_np = _rand((2, 3), 30), _rand((2, 3), 31)
    a = nd.Custom(nd.array(x_np), op_type="CoWaitOnLater")
    g = nd.Custom(nd.array(g_np), op_type="CoTimesTen")
    WAIT_HOLDER["G"] = g
    WAIT_GATE.set()
    np.testing.assert_allclose(a.asnumpy(), x_np + 10 * g_np)
    np.testing.assert_allclose(g.asnumpy(), 10 * g_np)


@pytest.mark.timeout(30)
def test_nested_custom_op_with_one_worker(one_custom_worker) -> None:
    x_np = _rand((2, 2), 32)
    ys = [nd.Custom(nd.array(x_np * i), op_type="CoOuter") for i in range(4)]
    for i, y in enumerate(ys):
        np.testing.assert_allclose(y.asnumpy(), x_np * i * 10 + 1)


BACKPRESSURE_SCRIPT = """\
import time
import opprof as mx

class Slow(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        # Finish only once the user's thread has filled the backlog (it is then throttled).
        engine, deadline = mx.get_engine(), time.monotonic() + 5
        while engine.pending < engine.max_pending and time.monotonic() < deadline:
            time.sleep(0.005)
        self.assign(out_data[0], req[0], in_data[0] + 1)

@mx.operator.register("Slow")
class SlowProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Slow()

eng = mx.set_engine("threaded", workers=2, custom_workers=2)  # max_pending: the default
n = eng.max_pending + 100
y = mx.nd.Custom(mx.nd.ones((2, 2)), op_type="Slow")
outs = [y + i for i in range(n)]  # ops waiting for the custom op fill the backlog
assert outs[-1].asnumpy()[0, 0] == 2 + n - 1
print("ok")
"""


@pytest.mark.e2e  # a script in a subprocess
@pytest.mark.timeout(60)
def test_backpressure_with_a_slow_custom_op_does_not_deadlock(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, BACKPRESSURE_SCRIPT, 8, "deadlock: the script did not finish in 8 s")
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


SWITCH_ENGINE_SCRIPT = """\
import time
import opprof as mx

class Slow(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        # Go on only once the user's thread has switched engines.
        deadline = time.monotonic() + 5
        while mx.get_engine() is OLD and time.monotonic() < deadline:
            time.sleep(0.005)
        out_data[0][:] = in_data[0] * 2  # a sub-op of an invocation of the old engine

@mx.operator.register("Slow")
class SlowProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Slow()

OLD = mx.set_engine("threaded", workers=2, custom_workers=2)
y = mx.nd.Custom(mx.nd.ones((2, 2)), op_type="Slow")
mx.set_engine("threaded", workers=2, custom_workers=2)  # the old engine must finish its work first
assert (y.asnumpy() == 2).all()
mx.nd.waitall()
assert mx.get_engine().pending == 0
print("ok")
"""


@pytest.mark.e2e  # a script in a subprocess
@pytest.mark.timeout(60)
def test_set_engine_while_a_custom_op_runs(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, SWITCH_ENGINE_SCRIPT, 8, "deadlock: set_engine() did not return in 8 s")
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
