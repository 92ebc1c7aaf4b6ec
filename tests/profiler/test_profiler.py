"""The profiler on the real engine: every trace it makes keeps the trace model's invariants.

Each test runs on the naive engine (everything inline on the pushing thread) and on the threaded
engine (ops on ``opprof-engine-N`` workers, custom-op Python on ``opprof-custom-N`` workers).
Random programs mix scalar and elementwise ops with custom-op invocations (pure NumPy, several
sub-ops, two inputs), inside and outside ``autograd.record()`` with a backward pass.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opprof as mx
import opprof.profiler
from opprof import nd
from opprof.engine import Engine
from opprof.profiler import ProfilerError, Recorder, profile
from opprof.trace import Span, Trace, from_chrome
from opprof.trace.formats.chrome import to_chrome
from tests.helpers import MyAddOneProp, engine_spans

pytestmark = pytest.mark.timeout(60)

ENGINE_RE = re.compile(r"^opprof-engine-\d+$")
CUSTOM_RE = re.compile(r"^opprof-custom-\d+$")
SHAPE = (3, 4)


# ---------------------------------------------------------------------------- custom operators
class NumpyTanh(mx.operator.CustomOp):
    """Pure NumPy: one wait (asnumpy) and the assignment."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.tanh(in_data[0].asnumpy()))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        t = np.tanh(in_data[0].asnumpy())
        self.assign(in_grad[0], req[0], out_grad[0].asnumpy() * (1 - t * t))


@mx.operator.register("ProfNumpyTanh")
class NumpyTanhProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return NumpyTanh()


class MultiSub(mx.operator.CustomOp):
    """Several NDArray sub-ops, no wait."""

    def forward(self, is_train, req, in_data, out_data, aux):
        z = in_data[0] + 1
        z = z * 3
        z = nd.exp(z * 0.01)
        self.assign(out_data[0], req[0], z)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * out_data[0] * 0.03)


@mx.operator.register("ProfMultiSub")
class MultiSubProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return MultiSub()


class TwoInputs(mx.operator.CustomOp):
    """out = a * b + 1."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[1] + 1)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * in_data[1])
        self.assign(in_grad[1], req[1], out_grad[0] * in_data[0])


@mx.operator.register("ProfTwoInputs")
class TwoInputsProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["a", "b"]

    def create_operator(self, ctx, shapes, dtypes):
        return TwoInputs()


class Raises(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        z = in_data[0] + 1  # a sub-op first, then the failure
        raise ValueError(f"boom-prof {z.shape}")


@mx.operator.register("ProfRaises")
class RaisesProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Raises()


# Set by the test that uses it: forward() signals it runs, then waits to be released.
BLOCK: dict[str, threading.Event] = {}


class Blocking(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        BLOCK["started"].set()
        assert BLOCK["release"].wait(20), "never released"
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("ProfBlocking")
class BlockingProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Blocking()


CUSTOM_OPS = ("ProfNumpyTanh", "ProfMultiSub", "ProfTwoInputs")


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def engine(engine: Engine) -> Iterator[Engine]:
    """tests/conftest.py's both engines, and no profiler left attached to the engine after the test."""
    yield engine
    leaked = engine.observer
    engine.observer = None
    assert leaked is None, f"a profiler was left attached to the engine: {leaked!r}"


def pusher_name() -> str:
    return threading.current_thread().name


# ---------------------------------------------------------------------------- the invariants
def check_trace(trace: Trace, kind: str, expected: Counter[tuple[str, bool]], main_waits: int | None = None) -> None:
    """Everything a profile of a program on ``kind`` must satisfy.

    ``expected`` counts invocations per (op type, backward); ``main_waits`` is the number of
    ``WaitForVar`` the pushing thread made outside custom ops (asnumpy), when known.
    """
    problems = trace.validate()
    assert problems == [], problems
    assert trace.metadata["engine"] == kind
    assert trace.metadata["dropped_events"] == trace.metadata["incomplete_invocations"] == 0
    tname = {t.tid: t.name for t in trace.threads}
    assert len(tname) == len(trace.threads), "thread ids are not unique"
    assert all(isinstance(t, int) and 0 < t < 1000 for t in tname), tname
    me = pusher_name()

    # Invocations: distinct ids 1..n, as many as the program made.
    fams = trace.families()
    n = sum(expected.values())
    assert sorted(fams) == list(range(1, n + 1))
    rows = trace.custom_ops()
    assert Counter((r.op_type, r.backward) for r in rows) == expected
    for r in rows:
        assert r.python_ns + r.subops_ns + r.waiting_ns == r.wall_ns
        assert min(r.python_ns, r.subops_ns, r.waiting_ns) >= 0
        assert r.error is None

    for inv, spans in fams.items():
        parents = [s for s in spans if s.role == "parent"]
        assert len(parents) == 1, spans
        p = parents[0]
        a = p.args or {}
        op, backward = a["op_type"], a["backward"]
        assert isinstance(backward, bool)
        assert p.name == (f"_backward_{op}" if backward else op)
        assert "::" not in p.name
        kids = [s for s in spans if s is not p]
        for s in kids:
            assert s.name.startswith(p.name + "::"), s
            assert s.args is not None and s.args["op_type"] == op and s.args["invocation"] == inv
            assert s.start >= p.start and s.end <= p.end
        pythons = [s for s in kids if s.role == "python"]
        assert [s.name for s in pythons] == [f"{p.name}::pure_python"]
        py_thread = tname[pythons[0].tid]
        if kind == "threaded":
            assert CUSTOM_RE.match(py_thread), py_thread
        else:
            assert py_thread == me
        dummies = [s for s in kids if s.role == "dummy_wait"]
        assert [s.name for s in dummies] == [f"{p.name}::Dummy_Wait"]
        assert dummies[0].end == p.end
        for w in (s for s in kids if s.role == "wait"):
            assert w.tid == pythons[0].tid and w.name == f"{p.name}::WaitForVar"
        # The split stored on the parent adds up to its duration.
        total = a["python_us"] + a["subops_us"] + a["waiting_us"]
        assert abs(total - p.dur / 1e3) <= 0.01, (a, p.dur)
        if op == "ProfNumpyTanh":
            assert sum(s.role == "wait" for s in kids) == (2 if backward else 1)
        if op in ("ProfMultiSub", "ProfTwoInputs"):
            assert sum(s.role == "subop" for s in kids) >= 2

    ids = set(fams)
    for s in engine_spans(trace):
        if s.role == "subop":
            assert s.invocation in ids
        if s.role is None:  # regular ops and waits keep their plain names, with no invocation
            assert "::" not in s.name and s.invocation is None, s
        if s.role in (None, "subop", "dummy_wait") and s.cat != "wait":  # an engine op
            if kind == "threaded":
                assert ENGINE_RE.match(tname[s.tid]), (s, tname[s.tid])
            else:
                assert tname[s.tid] == me, (s, tname[s.tid])

    # Waits: on the thread that blocked, and WaitForAll when the profile ends, after everything.
    plain_waits = [s for s in trace.spans if s.role is None and s.cat == "wait"]
    assert all(s.name in ("WaitForVar", "WaitForAll") and tname[s.tid] == me for s in plain_waits), plain_waits
    final = [s for s in plain_waits if s.name == "WaitForAll"]
    assert final, "no WaitForAll at the end of the profile"
    assert final[-1].end == max(s.end for s in trace.spans)
    if main_waits is not None:
        assert sum(s.name == "WaitForVar" for s in plain_waits) == main_waits

    check_flows(trace)
    if kind == "threaded":  # an op runs on another thread than the one that pushed it
        for f in trace.flows:
            assert f.src_tid != f.dst_tid and CUSTOM_RE.match(tname[f.src_tid])


def check_flows(trace: Trace) -> None:
    """One flow per sub-op: from its push, inside its invocation's Python on that thread, to its start."""
    subops = {(s.tid, s.start, s.name): s for s in trace.spans if s.role == "subop"}
    python = {s.invocation: s for s in trace.spans if s.role == "python"}
    seen: Counter[tuple[int, int, str]] = Counter()
    for f in trace.flows:
        key = (f.dst_tid, f.dst_ts, f.name)
        assert key in subops, f"flow {f} does not end where a sub-op starts"
        seen[key] += 1
        py = python[subops[key].invocation]
        assert f.src_tid == py.tid, f"flow {f} leaves thread {f.src_tid}, the push was in {py}"
        assert py.start <= f.src_ts <= min(py.end, f.dst_ts), (f, py)
    assert set(seen) == set(subops) and set(seen.values()) <= {1}


# ---------------------------------------------------------------------------- random programs
STEP = st.one_of(
    st.just(("scalar",)),
    st.just(("elem",)),
    st.just(("asnumpy",)),
    st.sampled_from(CUSTOM_OPS).map(lambda op: ("custom", op)),
)
BLOCK_ST = st.tuples(st.sampled_from(["plain", "record"]), st.lists(STEP, min_size=1, max_size=6))
PROGRAM = st.lists(BLOCK_ST, min_size=1, max_size=5)


def run_program(program: list[tuple[str, list[tuple[str, ...]]]], x: Any, w: Any) -> tuple[Counter[tuple[str, bool]], int]:
    """Run ``program``; return invocations expected per (op type, backward) and main-thread waits."""
    expected: Counter[tuple[str, bool]] = Counter()
    waits = 0
    for mode, steps in program:
        recording = mode == "record"
        with mx.autograd.record() if recording else nullcontext():
            cur = x
            for step in steps:
                if step[0] == "scalar":
                    cur = cur * 0.5 + 1
                elif step[0] == "elem":
                    cur = nd.maximum(cur, w) if len(steps) % 2 else cur * w
                elif step[0] == "asnumpy":
                    assert np.isfinite(cur.asnumpy()).all()
                    waits += 1
                else:
                    op = step[1]
                    cur = nd.Custom(cur, x, op_type=op) if op == "ProfTwoInputs" else nd.Custom(cur, op_type=op)
                    expected[(op, False)] += 1
                    if recording:
                        expected[(op, True)] += 1
            if recording:
                loss = cur * 2
        if recording:
            loss.backward()
    return expected, waits


@pytest.mark.e2e  # 60 programs on each engine, ~2 s
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=PROGRAM)
def test_random_programs_make_valid_traces(engine: Engine, check_chrome: Callable[..., list[str]], program: Any) -> None:
    rng = np.random.default_rng(0)
    x = nd.array(rng.standard_normal(SHAPE))
    w = nd.array(rng.standard_normal(SHAPE))
    x.attach_grad()
    x.wait_to_read()
    w.wait_to_read()
    with opprof.profiler.profile() as prof:
        expected, waits = run_program(program, x, w)
    trace = prof.trace
    assert trace is not None
    check_trace(trace, engine.kind, expected, main_waits=waits)
    obj = to_chrome(trace)
    assert check_chrome(obj) == []
    assert_round_trip(trace, from_chrome(json.loads(json.dumps(obj))))
    assert np.isfinite(x.grad.asnumpy()).all()


def assert_round_trip(a: Trace, b: Trace) -> None:
    def key(s: Span) -> tuple[Any, ...]:
        return (s.start, s.end, s.tid, s.name, s.cat, json.dumps(s.args or {}, sort_keys=True))

    assert sorted(map(key, b.spans)) == sorted(map(key, a.spans))
    assert (b.threads, b.flows, b.metadata) == (a.threads, a.flows, a.metadata)
    if b.ops is not None:
        assert b.custom_ops() == a.custom_ops()
    else:  # Chrome JSON keeps no engine edges: the calls and their split agree, not the causes

        def split(rows: list[Any]) -> list[tuple[Any, ...]]:
            return [
                (r.op_type, r.backward, r.invocation, r.start_ns, r.wall_ns, r.python_ns, r.subops_ns, r.waiting_ns, r.error)
                for r in rows
            ]

        assert split(b.custom_ops()) == split(a.custom_ops())


def test_mxnet_example_under_the_profiler(engine: Engine, check_chrome: Callable[..., list[str]]) -> None:
    """The MXNet 1.9.1 script's loop: Custom, *2, backward, a plain op, three times."""

    mx.operator.register("ProfMyAddOne")(MyAddOneProp)

    a = mx.nd.ones((100, 100))
    a.attach_grad()
    a.wait_to_read()
    with profile() as prof:
        for _ in range(3):
            with mx.autograd.record():
                b = mx.nd.Custom(a, op_type="ProfMyAddOne")
                c = b * 2
            c.backward()
            _b2 = a + 1
    trace = prof.trace
    assert trace is not None
    check_trace(trace, engine.kind, Counter({("ProfMyAddOne", False): 3, ("ProfMyAddOne", True): 3}), main_waits=0)
    assert check_chrome(to_chrome(trace)) == []
    (final,) = [s for s in trace.spans if s.name == "WaitForAll"]
    assert trace.thread_name(final.tid) == threading.current_thread().name == "MainThread"
    names = Counter(s.name for s in trace.spans)
    assert names["ProfMyAddOne::_plus_scalar"] == names["ProfMyAddOne::_mul_scalar"] == 3
    assert names["ProfMyAddOne::WaitForVar"] == 3
    assert names["_backward_ProfMyAddOne::_mul_scalar"] == 3
    assert names["_plus_scalar"] == 3 and names["_mul_scalar"] == 3  # a + 1 and b * 2 stay plain
    np.testing.assert_allclose(a.grad.asnumpy(), np.full((100, 100), 6.0))


# ---------------------------------------------------------------------------- attribution
@pytest.mark.parametrize("who", ["helper thread", "pushing thread"])
def test_ops_pushed_by_other_threads_during_a_custom_op_stay_plain(engine: Engine, who: str) -> None:
    if who == "pushing thread" and engine.kind == "naive":
        pytest.skip("the naive engine runs the custom op's Python on the pushing thread itself")
    BLOCK["started"], BLOCK["release"] = threading.Event(), threading.Event()
    x = nd.ones(SHAPE)
    a, b = nd.ones(SHAPE), nd.full(SHAPE, 2.0)
    for arr in (x, a, b):
        arr.wait_to_read()
    errors: list[BaseException] = []

    def push_while_custom_op_runs() -> None:
        try:
            assert BLOCK["started"].wait(20)
            outs = [nd.maximum(a, b) for _ in range(20)]
            outs[-1].wait_to_read()
        except BaseException as e:
            errors.append(e)
        finally:
            BLOCK["release"].set()

    try:
        with profile() as prof:
            if who == "helper thread":
                helper = threading.Thread(target=push_while_custom_op_runs, name="helper")
                helper.start()
                y = nd.Custom(x, op_type="ProfBlocking")
                helper.join(30)
            else:
                y = nd.Custom(x, op_type="ProfBlocking")
                push_while_custom_op_runs()
            y.wait_to_read()
    finally:
        BLOCK["release"].set()
    assert not errors, errors
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    maxes = [s for s in trace.spans if "_maximum" in s.name]
    assert len(maxes) == 20
    assert all(s.name == "_maximum" and s.invocation is None and s.role is None for s in maxes), maxes
    (inv,) = trace.families().values()
    assert sorted(s.name for s in inv if s.role == "subop") == ["ProfBlocking::_copyto", "ProfBlocking::_plus_scalar"]
    # The helper's ops really ran while the custom op's Python was blocked.
    (py,) = [s for s in inv if s.role == "python"]
    if engine.kind == "threaded" or who == "helper thread":
        assert any(py.start <= s.start and s.end <= py.end for s in maxes)


def test_flows_of_custom_ops_run_from_short_lived_threads(engine: Engine, request: pytest.FixtureRequest) -> None:
    """Two user threads, one after the other, each run a custom op; a finished thread's ident is
    usually reused by the next one (glibc), which must not move its flow arrows to the other thread."""
    x = nd.ones(SHAPE)
    x.wait_to_read()
    idents: list[int] = []

    def work() -> None:
        idents.append(threading.get_ident())
        nd.Custom(x, op_type="ProfMultiSub").wait_to_read()

    with profile() as prof:
        for i in range(2):
            t = threading.Thread(target=work, name=f"user-{i}")
            t.start()
            t.join()
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    assert len(trace.custom_ops()) == 2
    check_flows(trace)


def test_pause_and_resume_while_a_custom_op_finishes(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """pause() just before the custom op's Python ends, resume() before its Dummy_Wait is pushed.

    On the threaded engine this is a race between the user's thread and the custom-op worker; the
    test forces the interleaving by resuming from inside ``engine.push`` of the Dummy_Wait.
    """
    session: dict[str, opprof.profiler.Profiler] = {}

    class PauseAtEnd(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] + 1)
            session["prof"].pause()

    @mx.operator.register("ProfPauseAtEnd")
    class PauseAtEndProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):
            return PauseAtEnd()

    real_push = engine.push

    def push(fn: Any, reads: Any = (), writes: Any = (), name: str = "op", **kw: Any) -> None:
        if name == "Dummy_Wait":
            session["prof"].resume()
        real_push(fn, reads, writes, name, **kw)

    monkeypatch.setattr(engine, "push", push)
    x = nd.ones(SHAPE)
    x.wait_to_read()
    with profile() as prof:
        session["prof"] = prof
        nd.Custom(x, op_type="ProfPauseAtEnd").wait_to_read()
    assert prof.trace is not None
    assert prof.trace.validate() == []


def test_nested_custom_ops_attribute_subops_to_the_inner_invocation(engine: Engine) -> None:
    class Outer(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            inner = nd.Custom(in_data[0], op_type="ProfMultiSub")
            self.assign(out_data[0], req[0], inner * 2)

    @mx.operator.register("ProfOuter")
    class OuterProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):
            return Outer()

    x = nd.ones(SHAPE)
    x.wait_to_read()
    with profile() as prof:
        nd.Custom(x, op_type="ProfOuter").wait_to_read()
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    by_op = {r.op_type: r for r in trace.custom_ops()}
    assert set(by_op) == {"ProfOuter", "ProfMultiSub"}
    fams = trace.families()
    outer = fams[by_op["ProfOuter"].invocation]
    inner = fams[by_op["ProfMultiSub"].invocation]
    assert sorted(s.name for s in outer if s.role == "subop") == ["ProfOuter::_copyto", "ProfOuter::_mul_scalar"]
    assert {s.name for s in inner if s.role == "subop"} == {
        "ProfMultiSub::_plus_scalar",
        "ProfMultiSub::_mul_scalar",
        "ProfMultiSub::exp",
        "ProfMultiSub::_copyto",
    }


# ---------------------------------------------------------------------------- a fake clock
class FakeClock:
    """Time moves only when the test says so (plus ``tick`` per read, 0 by default)."""

    def __init__(self, tick: int = 0) -> None:
        self.now = 1_000_000
        self.tick = tick
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            t = self.now
            self.now += self.tick
            return t

    def advance(self, ns: int) -> None:
        with self._lock:
            self.now += ns


CLOCK: dict[str, FakeClock] = {}


class Timed(mx.operator.CustomOp):
    """Python work 1000 ns, a 300 ns sub-op, 200 ns, a 400 ns sub-op, a 50 ns wait, 100 ns."""

    def forward(self, is_train, req, in_data, out_data, aux):
        clock = CLOCK["clock"]
        eng = mx.get_engine()
        v = eng.new_var()
        clock.advance(1000)
        eng.push(lambda: clock.advance(300), (), (v,), "work_a")
        clock.advance(200)
        eng.push(lambda: clock.advance(400), (), (v,), "work_b")
        self.assign(out_data[0], req[0], in_data[0].asnumpy())  # a wait (quiet) and a _copyto
        clock.advance(100)


@mx.operator.register("ProfTimed")
class TimedProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Timed()


def test_fake_clock_exact_numbers_on_the_naive_engine() -> None:
    """A clock that moves only inside the work: every span and the split are exact."""
    eng = mx.set_engine("naive")
    try:
        x = nd.ones(SHAPE)
        clock = CLOCK["clock"] = FakeClock()
        rec = Recorder(clock=clock).attach(eng)
        y = nd.Custom(x, op_type="ProfTimed")
        rec.detach()
        trace = rec.build()
        assert eng.observer is None
    finally:
        mx.set_engine("threaded")
    t0 = 1_000_000
    spans = {s.name: s for s in trace.spans}
    assert set(spans) == {
        "ProfTimed",
        "ProfTimed::pure_python",
        "ProfTimed::work_a",
        "ProfTimed::work_b",
        "ProfTimed::WaitForVar",
        "ProfTimed::_copyto",
        "ProfTimed::Dummy_Wait",
    }
    # Python runs from t0; work_a inline at t0+1000, work_b at t0+1500, the rest takes no time.
    assert (spans["ProfTimed"].start, spans["ProfTimed"].end) == (t0, t0 + 2000)
    assert (spans["ProfTimed::pure_python"].start, spans["ProfTimed::pure_python"].end) == (t0, t0 + 2000)
    assert (spans["ProfTimed::work_a"].start, spans["ProfTimed::work_a"].dur) == (t0 + 1000, 300)
    assert (spans["ProfTimed::work_b"].start, spans["ProfTimed::work_b"].dur) == (t0 + 1500, 400)
    assert spans["ProfTimed::WaitForVar"].dur == spans["ProfTimed::_copyto"].dur == 0
    assert spans["ProfTimed::Dummy_Wait"].end == t0 + 2000
    (row,) = trace.custom_ops()
    assert (row.wall_ns, row.python_ns, row.subops_ns, row.waiting_ns) == (2000, 1300, 700, 0)
    a = spans["ProfTimed"].args
    assert a is not None and (a["python_us"], a["subops_us"], a["waiting_us"]) == (1.3, 0.7, 0.0)
    assert np.array_equal(y.asnumpy(), np.ones(SHAPE))


class TwoSubops(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        z = in_data[0] + 1
        z = z * 3
        self.assign(out_data[0], req[0], z)


@mx.operator.register("ProfTwoSubops")
class TwoSubopsProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return TwoSubops()


def test_fake_counter_clock_exact_numbers_on_the_naive_engine() -> None:
    """``itertools.count`` in steps of 1000 ns: each clock read is one tick.

    Ticks (current recorder): 0 construct, 1000 attach; the custom op's push at 2000, its engine
    op starts at 3000, its Python at 4000; each sub-op: push 5000/8000/11000, run [6000, 7000],
    [9000, 10000], [12000, 13000] (``+ 1``, ``* 3``, the assignment's ``_copyto``); Python ends
    14000; Dummy_Wait is pushed at 15000 and runs [16000, 17000]; detach at 18000 (a custom op's
    own engine op is recorded before it runs: its end is never read). Python 10000 - 3000 inline
    sub-ops = 7000; sub-ops 3000 + Dummy_Wait 1000 = 4000; waiting [3000, 4000] + [14000, 16000]
    = 3000.
    """
    eng = mx.set_engine("naive")
    try:
        x = nd.ones(SHAPE)
        ticks = itertools.count(0, 1000)
        rec = Recorder(clock=lambda: next(ticks))
        rec.attach(eng)
        nd.Custom(x, op_type="ProfTwoSubops")
        rec.detach()
        trace = rec.build()
    finally:
        mx.set_engine("threaded")
    got = [(s.name, s.start, s.end, s.role) for s in trace.spans]
    assert got == [
        ("ProfTwoSubops", 3000, 17000, "parent"),
        ("ProfTwoSubops::pure_python", 4000, 14000, "python"),
        ("ProfTwoSubops::_plus_scalar", 6000, 7000, "subop"),
        ("ProfTwoSubops::_mul_scalar", 9000, 10000, "subop"),
        ("ProfTwoSubops::_copyto", 12000, 13000, "subop"),
        ("ProfTwoSubops::Dummy_Wait", 16000, 17000, "dummy_wait"),
    ]
    (row,) = trace.custom_ops()
    assert (row.start_ns, row.wall_ns, row.python_ns, row.subops_ns, row.waiting_ns) == (3000, 14000, 7000, 4000, 3000)
    p = trace.spans[0]
    assert p.args is not None and (p.args["python_us"], p.args["subops_us"], p.args["waiting_us"]) == (7.0, 4.0, 3.0)
    assert [(f.src_ts, f.dst_ts) for f in trace.flows] == [(5000, 6000), (8000, 9000), (11000, 12000)]
    assert (trace.metadata["t_start_ns"], trace.metadata["t_stop_ns"]) == (1000, 18000)
    assert trace.validate() == []


# ---------------------------------------------------------------------------- the event cap
def test_event_cap_drops_and_counts(engine: Engine) -> None:
    x = nd.ones(SHAPE)
    x.wait_to_read()

    def body() -> None:
        for i in range(100):
            x + i

    with profile() as full:
        body()
    assert full.trace is not None
    attempted = len(engine_spans(full.trace))  # every op and wait is one record
    assert attempted == 101  # 100 ops + WaitForAll
    with profile(max_events=10) as capped:
        body()
    trace = capped.trace
    assert trace is not None
    assert len(engine_spans(trace)) == 10
    assert trace.metadata["max_events"] == 10
    assert trace.metadata["dropped_events"] == attempted - 10 > 0
    assert trace.validate() == []


def test_event_cap_drops_incomplete_invocations(engine: Engine, check_chrome: Callable[..., list[str]]) -> None:
    x = nd.ones(SHAPE)
    x.wait_to_read()

    def body() -> None:
        for _ in range(30):
            nd.Custom(x, op_type="ProfMultiSub")

    with profile() as full:
        body()
    assert full.trace is not None
    check_trace(full.trace, engine.kind, Counter({("ProfMultiSub", False): 30}))
    # Records that count toward the cap: every span but the python ones (never dropped) and the
    # parents (one per custom op's engine op record).
    attempted = sum(s.role != "python" for s in engine_spans(full.trace))
    with profile(max_events=40) as capped:
        body()
    trace = capped.trace
    assert trace is not None
    md = trace.metadata
    assert md["dropped_events"] == attempted - 40 > 0
    assert trace.validate() == []
    assert check_chrome(to_chrome(trace)) == []
    complete = len(trace.families())
    assert md["incomplete_invocations"] > 0
    # Invocations wholly past the cap left no record at all (not even their python span: that
    # would let memory grow with every call); they are among the dropped events.
    assert complete + md["incomplete_invocations"] <= 30
    assert sorted(trace.families()) == list(range(1, complete + 1))
    for s in trace.spans:
        if s.role is not None:
            assert s.invocation in trace.families()


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("where", ["at exit", "inside the block"])
def test_custom_op_error_keeps_a_valid_trace(engine: Engine, where: str, tmp_path: Path) -> None:
    x = nd.ones(SHAPE)
    x.wait_to_read()
    prof = opprof.profiler.Profiler()
    path = tmp_path / "failed.json.gz"
    with pytest.raises(ValueError, match="boom-prof"):
        with profile(path=path) as prof:
            y = nd.Custom(x, op_type="ProfRaises")
            _z = y + 1  # skipped: its input holds the error
            if where == "inside the block":
                y.asnumpy()
    trace = prof.trace
    assert trace is not None
    assert trace.validate() == []
    (row,) = trace.custom_ops()
    assert row.op_type == "ProfRaises" and row.error is not None
    assert "ValueError" in row.error and "boom-prof" in row.error
    (p,) = [s for s in trace.spans if s.role == "parent"]
    assert p.args is not None and "boom-prof" in p.args["error"]
    kids = trace.families()[row.invocation]
    assert {s.role for s in kids} >= {"parent", "python", "subop", "dummy_wait"}
    # The trace of the failed run was saved too, and stop() hands back the same trace.
    assert_round_trip(trace, opprof.trace.load(path))
    assert prof.stop() is trace
    # The engine is usable afterwards and the error was raised once.
    with profile() as again:
        (x + 1).wait_to_read()
    assert again.trace is not None and again.trace.validate() == []


# ---------------------------------------------------------------------------- one profiler per engine
def test_profiler_cannot_be_started_twice_on_one_engine(engine: Engine) -> None:
    x = nd.ones(SHAPE)
    p1 = opprof.profiler.Profiler().start()
    try:
        assert p1.running
        with pytest.raises(ProfilerError):
            opprof.profiler.Profiler().start()
        with pytest.raises(ProfilerError):
            p1.start()
        with pytest.raises(ProfilerError):
            with profile():
                pass
        with pytest.raises(ProfilerError):
            Recorder().attach(engine)
        y = x + 1
    finally:
        trace = p1.stop()
    assert engine.observer is None and not p1.running
    assert [s.name for s in trace.spans if s.cat == "operator"] == ["_plus_scalar"]
    assert trace.validate() == []
    y.wait_to_read()
    # Once stopped, another may start.
    with profile() as p2:
        (x * 2).wait_to_read()
    assert p2.trace is not None and "_mul_scalar" in {s.name for s in p2.trace.spans}


def test_stop_without_start_is_an_error(engine: Engine) -> None:
    with pytest.raises(ProfilerError):
        opprof.profiler.Profiler().stop()
    with pytest.raises(ValueError):
        Recorder(max_events=0)


def test_recorded_spans_are_spans(engine: Engine) -> None:
    with profile() as prof:
        (nd.ones(SHAPE) + 1).wait_to_read()
    assert prof.trace is not None
    assert all(isinstance(s, Span) and isinstance(s.start, int) and s.start <= s.end for s in prof.trace.spans)


# ---------------------------------------------------------------------------- MXNet's live statistics
@pytest.fixture
def mx_session(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "profile.json"
    mx.profiler.set_config(filename=str(path), aggregate_stats=True)
    mx.profiler.dumps(reset=True)
    yield path
    mx.profiler.set_state("stop")
    mx.profiler.set_config(filename="profile.json")
    mx.profiler.dumps(reset=True)


def test_dumps_json_has_mxnets_schema_and_sees_the_running_session(mx_session: Path) -> None:
    mx.profiler.set_state("run")
    x = mx.nd.zeros((10, 10))
    y = mx.nd.sqrt(x) + 1
    y = y + 1
    mx.nd.waitall()
    stats = json.loads(mx.profiler.dumps(format="json"))  # still running
    assert set(stats) == {"Time", "Memory", "Unit"} and stats["Unit"] == {"Time": "ms", "Memory": "kB"}
    ops = stats["Time"]["operator"]
    assert ops["sqrt"]["Count"] == 1 and ops["_plus_scalar"]["Count"] == 2
    assert set(ops["sqrt"]) == {"Count", "Total", "Min", "Max", "Avg"}
    assert ops["_plus_scalar"]["Min"] <= ops["_plus_scalar"]["Avg"] <= ops["_plus_scalar"]["Max"]


def test_dumps_reset_clears_the_statistics_not_the_trace(mx_session: Path) -> None:
    mx.profiler.set_state("run")
    (mx.nd.ones((4,)) * 2).wait_to_read()
    mx.profiler.dumps(reset=True)
    (mx.nd.ones((4,)) + 1).wait_to_read()
    ops = json.loads(mx.profiler.dumps(format="json"))["Time"]["operator"]
    assert "_mul_scalar" not in ops and ops["_plus_scalar"]["Count"] == 1
    mx.profiler.set_state("stop")
    names = {s.name for s in mx.profiler.last_trace().spans}  # type: ignore[union-attr]
    assert {"_mul_scalar", "_plus_scalar"} <= names
    assert "_mul_scalar" not in json.loads(mx.profiler.dumps(format="json"))["Time"]["operator"]


@pytest.mark.parametrize(
    ("sort_by", "key"), [("total", "Total"), ("avg", "Avg"), ("min", "Min"), ("max", "Max"), ("count", "Count")]
)
@pytest.mark.parametrize("ascending", [False, True])
def test_dumps_json_sorts_each_category(mx_session: Path, sort_by: str, key: str, ascending: bool) -> None:
    mx.profiler.set_state("run")
    x = mx.nd.ones((50, 50))
    for k in range(3):
        x = mx.nd.sqrt(x + k) * 2
    x.wait_to_read()
    for domain in json.loads(mx.profiler.dumps(format="json", sort_by=sort_by, ascending=ascending))["Time"].values():
        values = [item[key] for item in domain.values()]
        assert values == sorted(values, reverse=not ascending)


def test_custom_op_work_is_under_mxnets_custom_operator_category(mx_session: Path) -> None:
    mx.profiler.set_state("run")
    mx.operator.register("ProfMyAddOne")(MyAddOneProp)
    mx.nd.Custom(mx.nd.ones((2,)), op_type="ProfMyAddOne").wait_to_read()
    stats = json.loads(mx.profiler.dumps(format="json"))["Time"]
    assert "ProfMyAddOne::pure_python" in stats["Custom Operator"] and "ProfMyAddOne::_plus_scalar" in stats["Custom Operator"]


def test_dump_unfinished_writes_what_is_recorded_so_far_and_keeps_recording(mx_session: Path) -> None:
    mx.profiler.set_state("run")
    sizes = []
    for _ in range(3):
        (mx.nd.ones((8,)) * 3).wait_to_read()
        mx.profiler.dump(False)
        sizes.append(mx_session.stat().st_size)
        assert any(isinstance(o, Recorder) for o in mx.get_engine().observers)  # still recording
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
    counts = [s.name for s in opprof.trace.load(mx_session).spans].count("_mul_scalar")
    assert counts == 3
