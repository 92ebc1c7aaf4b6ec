"""Engine observers: the typed protocol, several at once, and the profiler as one of them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import opprof as mx
from opprof.engine import EngineObserver, Invocation, Observers, Opr
from opprof.profiler import ProfilerError, Recorder, npmem, profile
from opprof.profiler.recorder import COMPILED_WHY_NOT
from opprof.profiler.session import Profiler

pytestmark = pytest.mark.timeout(60)


class Log(EngineObserver):
    """Writes every hook it hears to a shared log, tagged with its own name."""

    def __init__(self, tag: str, log: list[tuple[str, str, str]]) -> None:
        self.tag = tag
        self.log = log
        self.lock = threading.Lock()

    def _add(self, hook: str, what: str) -> None:
        with self.lock:
            self.log.append((self.tag, hook, what))

    def on_push(self, opr: Opr) -> None:
        self._add("push", opr.name)

    def run(self, opr: Opr, fn: Callable[..., Any], *args: Any) -> None:
        self._add("start", opr.name)
        try:
            fn(*args)
        finally:
            self._add("end", opr.name)

    def on_wait(self, name: str, t0: int, t1: int, by: int = 0, var: int = 0) -> None:
        assert t1 >= t0
        self._add("wait", name)

    def on_python(self, inv: Invocation, t0: int, t1: int, cpu_ns: int = -1) -> None:
        assert cpu_ns >= 0  # the engine measures the Python's CPU time whenever someone listens
        self._add("python", inv.name)


def test_a_base_observer_hears_everything_and_changes_nothing(engine: mx.engine.Engine) -> None:
    engine.add_observer(EngineObserver())
    x = mx.nd.ones((2, 2)) * 3
    assert float(x.asnumpy().sum()) == 12.0


def test_two_observers_each_hear_every_hook_and_each_wraps_the_op(engine: mx.engine.Engine) -> None:
    log: list[tuple[str, str, str]] = []
    a, b = Log("a", log), Log("b", log)
    engine.add_observer(a)
    engine.add_observer(b)
    assert engine.observers == (a, b) and isinstance(engine.observer, Observers)
    y = mx.nd.ones((3,)) + 1
    y.wait_to_read()
    for tag in ("a", "b"):
        mine = [(hook, what) for t, hook, what in log if t == tag]
        assert ("push", "_plus_scalar") in mine and ("start", "_plus_scalar") in mine and ("end", "_plus_scalar") in mine
        assert ("wait", "WaitForVar") in mine
    # The first observer's run wraps the second's: a starts first and ends last.
    runs = [(t, hook) for t, hook, what in log if what == "_plus_scalar" and hook in ("start", "end")]
    assert runs == [("a", "start"), ("b", "start"), ("b", "end"), ("a", "end")]


def test_removing_observers_leaves_the_rest_and_then_none(engine: mx.engine.Engine) -> None:
    log: list[tuple[str, str, str]] = []
    a, b = Log("a", log), Log("b", log)
    engine.add_observer(a)
    engine.add_observer(b)
    engine.remove_observer(a)
    # The hot path calls b alone (behind the guard every observer not opprof's has: see the end).
    assert getattr(engine.observer, "reports_to", None) is b and engine.observers == (b,)
    (mx.nd.ones((1,)) * 2).wait_to_read()
    assert {t for t, _, _ in log} == {"b"}
    engine.remove_observer(b)
    engine.remove_observer(b)  # not there any more: ignored
    assert engine.observer is None and engine.observers == ()


def test_the_profiler_records_beside_another_observer(engine: mx.engine.Engine) -> None:
    log: list[tuple[str, str, str]] = []
    other = Log("other", log)
    engine.add_observer(other)
    with profile() as prof:
        (mx.nd.ones((2,)) * 2).wait_to_read()
    assert engine.observers == (other,), "stopping the profiler removed only itself"
    assert prof.trace is not None and "_mul_scalar" in {s.name for s in prof.trace.spans}
    assert ("other", "end", "_mul_scalar") in log


def test_a_second_recorder_on_one_engine_is_refused(engine: mx.engine.Engine) -> None:
    first = Recorder().attach(engine)
    try:
        with pytest.raises(ProfilerError, match="already recording"):
            Recorder().attach(engine)
    finally:
        first.detach()
    assert engine.observer is None


class Clocked(EngineObserver):
    """Hears only the ready hook's stamps, on a clock of its own that counts its reads."""

    def __init__(self, start: int) -> None:
        self.now = start
        self.reads = 0

    def clock(self) -> int:  # type: ignore[override]
        self.reads += 1
        self.now += 1
        return self.now


def test_ops_made_ready_by_a_completion_carry_its_seq_and_the_first_observers_stamp() -> None:
    """A completion that makes ops ready stamps each with the op that did (its seq) and one time,
    read once on the first observer's clock: the stamps are the ops' own, shared by every observer.
    (Threaded: the naive engine runs an op as it is pushed, so none waits for a gate there.)"""
    engine = mx.set_engine("threaded", workers=2, custom_workers=2)
    try:
        _two_made_ready_at_once(engine)
    finally:
        engine.observer = None
        mx.set_engine("threaded")


def _two_made_ready_at_once(engine: mx.engine.Engine) -> None:
    first, second = Clocked(1_000), Clocked(5_000)
    engine.add_observer(first)
    engine.add_observer(second)
    stamped: list[Opr] = []
    on_ready = first.on_ready

    def keep(ready: list[Opr], by: int) -> None:
        stamped.extend(ready)
        on_ready(ready, by)

    first.on_ready = keep  # type: ignore[method-assign]
    gate = threading.Event()
    a = mx.nd.ones((2,))
    a.wait_to_read()
    # An op that waits for a gate, and two that read what it writes: its completion makes both ready.
    engine.push(gate.wait, writes=(a._var,), name="gated")
    b, c = a + 1, a * 2
    gate.set()
    b.wait_to_read()
    c.wait_to_read()
    ops = [o for o in stamped if o.name != "WaitForVar"]  # the waits' own token ops are made ready too
    assert sorted(o.name for o in ops) == ["_mul_scalar", "_plus_scalar"]
    assert len({o.by for o in ops}) == 1 and ops[0].by > 0
    assert len({o.ready_ns for o in ops}) == 1 and 1_000 < ops[0].ready_ns <= first.now
    assert second.reads == 0


@pytest.mark.parametrize("compiled", [False, True] if not COMPILED_WHY_NOT else [False], ids=lambda c: f"compiled={c}")
def test_the_engine_calls_a_recorders_hot_path_and_names_the_recorder(engine: mx.engine.Engine, compiled: bool) -> None:
    """A compiled recorder puts its C object on the engine's hot path (hooks found on its type, not
    looked up in the recorder's dict at every call); everything that asks which observers are there
    gets the recorder itself, and the hooks the C object does not keep reach the recorder."""
    rec = Recorder(compiled=compiled)
    rec.attach(engine)
    try:
        assert engine.observers == (rec,)
        assert (engine.observer is not rec) == compiled and engine.observer is rec.hot_path
        y = mx.nd.ones((3,)) + 1
        y.wait_to_read()  # a WaitForVar: on_wait, which the C object hands to the recorder
        with pytest.raises(ProfilerError, match="already recording"):
            Recorder(compiled=compiled).attach(engine)
    finally:
        rec.detach()
    assert engine.observer is None and engine.observers == ()
    names = [s.name for s in rec.build().spans]
    assert "_plus_scalar" in names and "WaitForVar" in names


@pytest.mark.parametrize("compiled", [False, True] if not COMPILED_WHY_NOT else [False], ids=lambda c: f"compiled={c}")
def test_a_recorder_beside_another_observer_still_meters_a_custom_ops_numpy(engine: mx.engine.Engine, compiled: bool) -> None:
    """Several observers are called as one (:class:`Observers`), which offers the custom-op machinery
    the recorder's NumPy-memory meter: without it a recording with memory next to another observer
    measured no custom op's own NumPy data."""
    if not npmem.AVAILABLE:
        pytest.skip(f"opprof.profiler._npmem not in use: {npmem.WHY_NOT}")
    log: list[tuple[str, str, str]] = []
    engine.add_observer(Log("other", log))
    prof = Profiler(memory=True, compiled=compiled).start()
    try:
        x = mx.nd.ones((4, 4))
        x = mx.nd.Custom(x, op_type="ObserverBigTemp")
        x.wait_to_read()
    finally:
        trace = prof.stop()
    assert [type(o) for o in engine.observers] == [Log] and ("other", "python", "ObserverBigTemp") in log
    (row,) = [r for r in trace.custom_ops() if r.op_type == "ObserverBigTemp"]
    assert row.python_numpy_peak_bytes is not None and row.python_numpy_peak_bytes >= 8_000_000


class _BigTemp(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        t = np.ones(1_000_000)  # 8 MB of NumPy data the Python makes itself
        del t
        self.assign(out_data[0], req[0], in_data[0])


@mx.operator.register("ObserverBigTemp")
class _BigTempProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return _BigTemp()


class _FailsOnPython(EngineObserver):
    def on_python(self, inv: Invocation, t0: int, t1: int, cpu_ns: int = -1) -> None:
        raise TypeError("an observer's own bug")


def test_an_observer_that_fails_on_a_custom_ops_python_fails_the_op_not_the_engine(engine: mx.engine.Engine) -> None:
    """The custom op fails with the observer's error on both engines; on the threaded one it used to
    hang its readers (the invocation never completed) and lose a custom-op thread."""
    bad = _FailsOnPython()
    engine.add_observer(bad)
    try:
        for _ in range(3):  # more calls than the pool has threads: none may be lost
            y = mx.nd.Custom(mx.nd.ones((2, 2)), op_type="ObserverBigTemp")
            with pytest.raises(mx.base.MXNetError, match="an observer's own bug"):
                y.wait_to_read()
    finally:
        engine.remove_observer(bad)
    z = mx.nd.Custom(mx.nd.ones((2, 2)), op_type="ObserverBigTemp")
    assert float(z.asnumpy().sum()) == 4.0


class _FailsOnReady(EngineObserver):
    def on_ready(self, ready: list[Opr], by: int) -> None:
        raise TypeError("an observer's own bug in on_ready")


def test_an_observer_that_fails_on_ready_loses_its_stamps_not_the_ops(engine: mx.engine.Engine) -> None:
    """``on_ready`` runs under the engine's lock with the ops it dispatches next: an observer that
    failed there left them undispatched on the threaded engine, and every reader waited forever.
    Now its error is said as a thread's uncaught exception is, and the ops run."""
    errors: list[BaseException | None] = []
    hook, threading.excepthook = threading.excepthook, lambda args: errors.append(args.exc_value)
    bad = _FailsOnReady()
    engine.add_observer(bad)
    try:
        x = mx.nd.ones((2, 2))
        for _ in range(3):
            x = x + 1
        x = mx.nd.Custom(x, op_type="ObserverBigTemp")
        assert float(x.asnumpy().sum()) == 16.0
    finally:
        engine.remove_observer(bad)
        threading.excepthook = hook
    assert all(isinstance(e, TypeError) and "on_ready" in str(e) for e in errors)
    assert errors or engine.kind == "naive"  # the naive engine runs this chain inline: nothing waits to be made ready


class _RunFailsFirst(EngineObserver):
    """An observer whose ``run`` fails before calling the op's function, or (``call=None``) returns
    without ever calling it: the protocol asks otherwise, and a user's observer may not listen."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.seen: list[str] = []

    def run(self, opr: Opr, fn: Callable[..., Any], *args: Any) -> None:
        self.seen.append(opr.name)
        if self.fail:
            raise TypeError(f"an observer's own bug running {opr.name}")


@pytest.mark.parametrize("fail", [True, False], ids=["raises-first", "never-calls"])
def test_an_observer_that_does_not_run_the_engines_own_ops_hangs_no_waiter(engine: mx.engine.Engine, fail: bool) -> None:
    """The engine's own ops (a wait's release, ``Dummy_Wait``, a delete) release the threads waiting
    on them in their function: an observer's ``run`` that raised before calling it, or never did,
    left ``wait_to_read`` and a custom op's readers waiting forever. Now the engine calls it; the
    observer's error fails the op as any op's does, and the engine goes on."""
    bad = _RunFailsFirst(fail)
    engine.add_observer(bad)
    try:
        x = mx.nd.ones((2, 2))
        if fail:
            with pytest.raises(mx.base.MXNetError, match="an observer's own bug"):
                (x + 1).wait_to_read()  # the plain op fails with it: nothing ran
        else:  # the plain op ran all the same (the naive engine's fast path too)
            assert float((x + 1).asnumpy().sum()) == 8.0
        y = mx.nd.Custom(x, op_type="ObserverBigTemp")
        if fail:
            with pytest.raises(mx.base.MXNetError, match="an observer's own bug"):
                y.wait_to_read()
        else:  # a run that calls nothing ran nothing: the op's own work is lost, no waiter hangs
            y.wait_to_read()
        del y
        try:  # returns, or raises what failed and nobody waited for: the observer's errors only
            mx.nd.waitall()
        except mx.base.MXNetError as e:
            assert fail and "an observer's own bug" in str(e), e
    finally:
        engine.remove_observer(bad)
    assert "WaitForVar" in bad.seen or engine.kind == "naive"  # the threaded engine's wait is an op
    z = mx.nd.Custom(mx.nd.ones((2, 2)), op_type="ObserverBigTemp")
    assert float(z.asnumpy().sum()) == 4.0  # the engine is usable, the observer gone


def test_opprofs_own_observers_run_unguarded_and_others_behind_the_guard() -> None:
    from opprof.engine.observer import guarded

    base = EngineObserver()
    assert guarded(base) is base  # the base's run calls fn first
    bad = _RunFailsFirst(True)
    wrapped = guarded(bad)
    assert wrapped is not bad and wrapped.reports_to is bad
    rec = Recorder()
    assert guarded(rec.hot_path) is rec.hot_path
