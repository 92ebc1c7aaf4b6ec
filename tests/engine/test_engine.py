"""Tests for :mod:`opprof.engine`, through its public API only.

No test orders threads with sleeps: ordering is forced with ``threading.Event``/``Barrier`` gates, and
every blocking call has a timeout so an engine bug fails the test instead of hanging it. The only
timed waits are short *negative* checks ("this has not started yet"), which cannot make a correct
engine fail.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opprof.engine import (
    Engine,
    EngineError,
    NaiveEngine,
    ThreadedEngine,
    Var,
    get_engine,
    handoff,
    make_engine,
    set_engine,
    use,
)

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 5.0  # upper bound for anything that must happen; only reached when the engine is broken
SETTLE = 0.05  # how long a negative check ("has not started") gives a broken engine to misbehave


# ---------------------------------------------------------------------------- helpers
def waited(fn: Callable[..., Any], *args: Any, timeout: float = TIMEOUT) -> Any:
    """Call ``fn(*args)`` on a helper thread; fail (instead of hanging) if it does not return in time.

    An exception from ``fn`` is re-raised here as the same object, with its traceback intact.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:
            box["exc"] = e

    t = threading.Thread(target=target, name="test-waiter", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not return within {timeout} s: deadlock")
    if "exc" in box:
        raise box["exc"]
    return box.get("value")


def wait_until(pred: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Poll ``pred`` until true (a state check, not an ordering device)."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        tick.wait(0.001)


def opprof_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("opprof-")}


class Log:
    """A thread-safe list of events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[Any] = []

    def add(self, item: Any) -> None:
        with self._lock:
            self.items.append(item)


class Harness:
    """Engines and gates a test makes; teardown opens every gate, then shuts every engine down."""

    def __init__(self) -> None:
        self.engines: list[Engine] = []
        self.gates: list[threading.Event] = []

    def threaded(self, **kwargs: Any) -> ThreadedEngine:
        e = ThreadedEngine(**kwargs)
        self.engines.append(e)
        return e

    def engine(self, spec: tuple[str, int | None]) -> Engine:
        kind, workers = spec
        e = make_engine(kind, workers=workers)
        self.engines.append(e)
        return e

    def gate(self) -> threading.Event:
        g = threading.Event()
        self.gates.append(g)
        return g

    def close(self) -> None:
        for g in self.gates:
            g.set()
        for e in self.engines:
            waited(_shutdown_quietly, e)


def _shutdown_quietly(e: Engine) -> None:
    try:
        e.wait_for_all()
    except BaseException:
        pass
    e.shutdown()


@pytest.fixture
def h():
    harness = Harness()
    yield harness
    harness.close()


def gated(gate: threading.Event, started: threading.Event | None = None, log: Log | None = None, label: str = ""):
    """An op body that blocks until ``gate`` opens (failing, not hanging, if it never does)."""

    def body() -> None:
        if log is not None:
            log.add(f"{label}-start")
        if started is not None:
            started.set()
        if not gate.wait(TIMEOUT):
            raise AssertionError("gate never opened")
        if log is not None:
            log.add(f"{label}-end")

    return body


ALL_ENGINES = [("naive", None), ("threaded", 1), ("threaded", 2), ("threaded", 8)]
ENGINE_IDS = ["naive", "threaded1", "threaded2", "threaded8"]


# ---------------------------------------------------------------------------- 1. ordering
def _push_kind(e: Engine, kind: str, fn: Callable[[], None], v: Var) -> None:
    if kind == "read":
        e.push(fn, reads=[v], writes=[e.new_var()])
    else:
        e.push(fn, writes=[v])


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize(
    ("first", "second"),
    [("write", "read"), ("read", "write"), ("write", "write")],
    ids=["read-after-write", "write-after-read", "write-after-write"],
)
def test_conflicting_op_never_starts_before_earlier_one_ends(h, workers, first, second):
    e = h.threaded(workers=workers)
    v = e.new_var("v")
    log = Log()
    gate, first_started, second_started = h.gate(), threading.Event(), threading.Event()

    _push_kind(e, first, gated(gate, first_started, log, "first"), v)
    assert first_started.wait(TIMEOUT)

    def second_op() -> None:
        log.add("second-start")
        second_started.set()

    _push_kind(e, second, second_op, v)
    # A correct engine holds the second op back as long as the first one is blocked.
    assert not second_started.wait(SETTLE), f"{second} started while the earlier {first} was still running"
    gate.set()
    waited(e.wait_for_all)
    assert log.items == ["first-start", "first-end", "second-start"]


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_long_chains_run_in_push_order(h, workers):
    e = h.threaded(workers=workers)
    v, w = e.new_var(), e.new_var()
    cell: list[int] = []
    snapshots: list[list[int]] = []
    for i in range(300):
        e.push(lambda i=i: cell.append(i), writes=[v])
        if i % 50 == 49:
            # A read sees exactly the writes pushed before it.
            e.push(lambda: snapshots.append(list(cell)), reads=[v], writes=[w])
    waited(e.wait_for_var, v)
    waited(e.wait_for_var, w)
    assert cell == list(range(300))
    assert snapshots == [list(range(n)) for n in range(50, 301, 50)]


@pytest.mark.parametrize("workers", [2, 4])
def test_concurrent_reads_of_one_var_overlap(h, workers):
    e = h.threaded(workers=workers)
    v, out1, out2 = e.new_var(), e.new_var(), e.new_var()
    cell = [0]
    e.push(lambda: cell.__setitem__(0, 42), writes=[v])
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen: list[int] = []

    def reader() -> None:
        barrier.wait()  # BrokenBarrierError unless the other reader runs at the same time
        seen.append(cell[0])

    e.push(reader, reads=[v], writes=[out1])
    e.push(reader, reads=[v], writes=[out2])
    waited(e.wait_for_var, out1)
    waited(e.wait_for_var, out2)
    assert seen == [42, 42]


@pytest.mark.parametrize("workers", [2, 4])
def test_independent_ops_run_concurrently(h, workers):
    e = h.threaded(workers=workers)
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    a, b = e.new_var(), e.new_var()
    e.push(barrier.wait, writes=[a])
    e.push(barrier.wait, writes=[b])
    waited(e.wait_for_all)


# ---------------------------------------------------------------------------- 2. argument checks
@pytest.mark.parametrize("spec", [("naive", None), ("threaded", 2)], ids=["naive", "threaded2"])
def test_push_rejects_bad_vars(h, spec):
    e = h.engine(spec)
    v, w = e.new_var(), e.new_var()
    ran = []
    body = lambda: ran.append(1)
    with pytest.raises(ValueError, match="both reads and writes"):
        e.push(body, reads=[v], writes=[w, v])
    with pytest.raises(ValueError, match="both reads and writes"):
        e.push_async(lambda done: done(), reads=[v, w], writes=[v])
    with pytest.raises(TypeError, match="Var"):
        e.push(body, reads=[v, object()])
    with pytest.raises(TypeError, match="Var"):
        e.push(body, writes=["not a var"])
    # Rejected pushes leave no trace: nothing ran, nothing is pending, the vars are still usable.
    waited(e.wait_for_all)
    assert ran == [] and e.pending == 0
    e.push(body, reads=[v], writes=[w])
    waited(e.wait_for_var, w)
    assert ran == [1]


@pytest.mark.parametrize("spec", [("naive", None), ("threaded", 2)], ids=["naive", "threaded2"])
def test_push_on_deleted_var_raises(h, spec):
    e = h.engine(spec)
    v, other = e.new_var(), e.new_var()
    ran = []
    e.push(lambda: ran.append("before"), writes=[v])
    e.delete_var(v)
    waited(e.wait_for_all)
    assert ran == ["before"]  # delete_var lets the ops pushed earlier finish
    with pytest.raises(EngineError, match="deleted"):
        e.push(lambda: ran.append("after"), writes=[v])
    with pytest.raises(EngineError, match="deleted"):
        e.push(lambda: ran.append("after"), reads=[v], writes=[other])
    with pytest.raises(EngineError, match="deleted"):
        e.push_async(lambda done: done(), writes=[v])
    waited(e.wait_for_all)
    assert ran == ["before"] and e.pending == 0


def test_delete_var_waits_for_earlier_ops(h):
    e = h.threaded(workers=2)
    v = e.new_var()
    gate, started = h.gate(), threading.Event()
    e.push(gated(gate, started), writes=[v])
    assert started.wait(TIMEOUT)
    e.delete_var(v)
    assert e.pending == 2  # the delete is queued behind the running write
    gate.set()
    waited(e.wait_for_all)
    with pytest.raises(EngineError):
        e.push(lambda: None, writes=[v])


# ---------------------------------------------------------------------------- 3. push_async
@pytest.mark.parametrize("workers", [1, 2])
def test_async_op_completes_only_when_on_complete_is_called(h, workers):
    e = h.threaded(workers=workers)
    v, out = e.new_var(), e.new_var()
    cell: list[str] = []
    completions: list[Callable[..., None]] = []
    fn_returned, dep_started = threading.Event(), threading.Event()

    def async_body(on_complete: Callable[..., None]) -> None:
        completions.append(on_complete)
        fn_returned.set()

    def dependent() -> None:
        dep_started.set()
        cell.append(f"saw {cell[0]}")

    e.push_async(async_body, writes=[v])
    e.push(dependent, reads=[v], writes=[out])
    assert fn_returned.wait(TIMEOUT)

    # fn has returned, but the op is not complete: the dependent op and a waiter stay blocked.
    waiter_done = threading.Event()
    waiter = threading.Thread(target=lambda: (e.wait_for_var(v), waiter_done.set()), daemon=True)
    waiter.start()
    assert not dep_started.wait(SETTLE)
    assert not waiter_done.is_set()
    assert e.pending >= 2

    # The async op does not occupy a worker while it is outstanding: unrelated work still runs.
    other_ran = threading.Event()
    e.push(other_ran.set, writes=[e.new_var()])
    assert other_ran.wait(TIMEOUT)

    def finish_later() -> None:
        cell.append("result")
        completions[0]()

    threading.Thread(target=finish_later, daemon=True).start()
    assert waiter_done.wait(TIMEOUT)
    waited(e.wait_for_var, out)
    assert cell == ["result", "saw result"]
    waited(e.wait_for_all)
    assert e.pending == 0


@pytest.mark.parametrize("spec", ALL_ENGINES, ids=ENGINE_IDS)
def test_async_op_completed_from_another_thread(h, spec):
    e = h.engine(spec)
    v, out = e.new_var(), e.new_var()
    log = Log()
    push_returned = threading.Event()

    def async_body(on_complete: Callable[..., None]) -> None:
        def later() -> None:
            # Completes once push_async has returned, or after SETTLE if push_async is waiting for it.
            push_returned.wait(SETTLE)
            log.add("complete")
            on_complete()

        threading.Thread(target=later, daemon=True).start()

    e.push_async(async_body, writes=[v])
    if isinstance(e, NaiveEngine):
        # Naive means inline: push_async returns only once the op is complete.
        assert log.items == ["complete"] and e.pending == 0
    push_returned.set()
    e.push(lambda: log.add("dependent"), reads=[v], writes=[out])
    waited(e.wait_for_var, out)
    assert log.items == ["complete", "dependent"]


@pytest.mark.parametrize("spec", ALL_ENGINES, ids=ENGINE_IDS)
def test_async_on_complete_with_error_stores_it(h, spec):
    e = h.engine(spec)
    v, out = e.new_var(), e.new_var()
    err = KeyError("async failure")
    ran = []

    def async_body(on_complete: Callable[..., None]) -> None:
        threading.Thread(target=on_complete, args=(err,), daemon=True).start()

    e.push_async(async_body, writes=[v])
    e.push(lambda: ran.append(1), reads=[v], writes=[out])
    with pytest.raises(KeyError) as ei:
        waited(e.wait_for_var, out)
    assert ei.value.__cause__ is err
    with pytest.raises(KeyError) as ei:
        waited(e.wait_for_var, v)
    assert ei.value.__cause__ is err
    assert ran == []
    waited(e.wait_for_all)  # already raised: not raised again


def test_on_complete_twice_raises(h):
    e = h.threaded(workers=1)
    v = e.new_var()
    completions = []
    e.push_async(completions.append, writes=[v])
    wait_until(lambda: bool(completions))
    completions[0]()
    with pytest.raises(EngineError, match="twice"):
        completions[0]()
    waited(e.wait_for_all)


# ---------------------------------------------------------------------------- 4. exceptions
@pytest.mark.parametrize("spec", ALL_ENGINES, ids=ENGINE_IDS)
def test_error_is_raised_at_wait_with_original_traceback(h, spec):
    e = h.engine(spec)
    a = e.new_var()
    err = ValueError("boom 42")

    def failing_op() -> None:
        raise err

    e.push(failing_op, writes=[a])
    with pytest.raises(ValueError, match="boom 42") as ei:
        waited(e.wait_for_var, a)
    assert ei.value.__cause__ is err
    frames = [f.name for f in traceback.extract_tb(ei.value.__traceback__)]
    assert "failing_op" in frames

    # Raising cleared it: the engine and the var stay usable, and nothing is raised twice.
    waited(e.wait_for_var, a)
    waited(e.wait_for_all)
    cell = []
    e.push(lambda: cell.append("ok"), writes=[a])
    waited(e.wait_for_var, a)
    waited(e.wait_for_all)
    assert cell == ["ok"]


@pytest.mark.parametrize("spec", ALL_ENGINES, ids=ENGINE_IDS)
def test_error_propagates_to_readers_which_are_skipped(h, spec):
    e = h.engine(spec)
    a, b, c, d, unrelated = (e.new_var(n) for n in "abcdu")
    err = ArithmeticError("first failure")
    ran = Log()

    def failing_op() -> None:
        raise err

    e.push(failing_op, writes=[a])
    e.push(lambda: ran.add("a->b"), reads=[a], writes=[b])
    e.push(lambda: ran.add("b->c,d"), reads=[b, unrelated], writes=[c, d])
    e.push_async(lambda done: (ran.add("async a->d"), done()), reads=[a], writes=[d])
    e.push(lambda: ran.add("write a"), writes=[a])  # touches the failed var: skipped too
    e.push(lambda: ran.add("unrelated"), writes=[unrelated])

    for var in (d, c, b, a):  # waited downstream first, so every op above has finished
        with pytest.raises(ArithmeticError) as ei:
            waited(e.wait_for_var, var)
        assert ei.value.__cause__ is err
    waited(e.wait_for_var, unrelated)
    assert ran.items == ["unrelated"]
    waited(e.wait_for_all)  # every affected var was waited on: nothing left to raise

    e.push(lambda: ran.add("again"), reads=[a], writes=[b])
    waited(e.wait_for_var, b)
    assert ran.items == ["unrelated", "again"]


@pytest.mark.parametrize("spec", ALL_ENGINES, ids=ENGINE_IDS)
def test_wait_for_all_raises_first_unraised_error(h, spec):
    e = h.engine(spec)
    a, x, b, y, c = (e.new_var() for _ in range(5))
    e1, e2, e3 = RuntimeError("e1"), RuntimeError("e2"), RuntimeError("e3")

    def raiser(exc: BaseException) -> Callable[[], None]:
        def failing_op() -> None:
            raise exc

        return failing_op

    # no_skip links run even after a failure, so e1 then e2 then e3 happen in this order.
    e.push(raiser(e1), writes=[a])
    e.push(lambda: None, reads=[a], writes=[x], no_skip=True)
    e.push(raiser(e2), reads=[x], writes=[b])
    e.push(lambda: None, reads=[b], writes=[y], no_skip=True)
    e.push(raiser(e3), reads=[y], writes=[c])

    with pytest.raises(RuntimeError) as ei:
        waited(e.wait_for_var, a)
    assert ei.value.__cause__ is e1
    with pytest.raises(RuntimeError) as ei:
        waited(e.wait_for_all)
    assert ei.value.__cause__ is e2  # the first error no wait has raised yet
    # wait_for_all cleared every stored error: nothing is raised again.
    waited(e.wait_for_all)
    for var in (a, b, c):
        waited(e.wait_for_var, var)

    done = []
    e.push(lambda: done.append(1), reads=[a, b], writes=[c])
    waited(e.wait_for_all)
    assert done == [1]


@pytest.mark.parametrize("workers", [1, 2])
def test_reader_pushed_before_a_wait_is_still_skipped(h, workers):
    e = h.threaded(workers=workers)
    a, b = e.new_var("a"), e.new_var("b")
    err = RuntimeError("boom")
    ran = []
    completions: list[Callable[..., None]] = []
    e.push_async(completions.append, writes=[b])  # holds b until we complete it

    def failing_op() -> None:
        raise err

    e.push(failing_op, writes=[a])
    e.push(lambda: ran.append("reader"), reads=[a], writes=[b])  # must be skipped
    with pytest.raises(RuntimeError):
        waited(e.wait_for_var, a)
    wait_until(lambda: bool(completions))
    completions[0]()
    with pytest.raises(RuntimeError) as ei:
        waited(e.wait_for_var, b)
    assert ei.value.__cause__ is err
    assert ran == []


# ---------------------------------------------------------------------------- 5. waits inside ops
@pytest.mark.parametrize("spec", ALL_ENGINES, ids=ENGINE_IDS)
@pytest.mark.parametrize("which", ["wait_for_var", "wait_for_all"])
def test_wait_inside_op_raises_engine_error(h, spec, which):
    e = h.engine(spec)
    v, out = e.new_var(), e.new_var()
    e.push(lambda: None, writes=[v])
    after = []

    def op_that_waits() -> None:
        if which == "wait_for_var":
            e.wait_for_var(v)
        else:
            e.wait_for_all()
        after.append("returned")

    e.push(op_that_waits, writes=[out])
    with pytest.raises(EngineError, match=which):
        waited(e.wait_for_var, out)
    assert after == []
    # Still usable afterwards.
    e.push(lambda: after.append("next"), reads=[v], writes=[out])
    waited(e.wait_for_var, out)
    waited(e.wait_for_all)
    assert after == ["next"]


@pytest.mark.parametrize(
    "spec",
    [
        ("naive", None),
        ("threaded", 1),
        ("threaded", 2),
    ],
    ids=["naive", "threaded1", "threaded2"],
)
def test_wait_for_all_inside_async_op_body_raises_engine_error(h, spec):
    e = h.engine(spec)
    out = e.new_var()
    completions: list[Callable[..., None]] = []
    rescued = threading.Event()

    def async_body(on_complete: Callable[..., None]) -> None:
        completions.append(on_complete)
        e.wait_for_all()
        if not rescued.is_set():
            on_complete()

    pusher = threading.Thread(target=e.push_async, args=(async_body,), kwargs={"writes": [out]}, daemon=True)
    pusher.start()
    pusher.join(1.0)
    if pusher.is_alive():  # the naive engine blocks in push_async: rescue it, then fail
        rescued.set()
        completions[0]()
        pusher.join(TIMEOUT)
        pytest.fail("wait_for_all inside an async op body deadlocked")
    with pytest.raises(EngineError):
        waited(e.wait_for_var, out)


# ---------------------------------------------------------------------------- 6. differential
N_VARS = 4
MODULUS = 1_000_003


class OpFailed(Exception):
    def __init__(self, index: int) -> None:
        super().__init__(f"op {index} failed")
        self.index = index


@dataclass(frozen=True)
class Op:
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    mode: str  # "sync", "async_inline" (on_complete inside fn) or "async_thread" (from a helper thread)
    fail: bool


def new_values(index: int, op: Op, read_vals: list[int], old_vals: list[int]) -> list[int]:
    base = sum((k + 3) * r for k, r in enumerate(read_vals)) + 7 * index
    return [(old * 31 + base + pos) % MODULUS for pos, old in enumerate(old_vals)]


@dataclass
class Outcome:
    cells: list[int]
    var_errors: list[int | None]  # per var: index of the op whose error its wait raised
    applied: list[int]  # ops whose body ran to completion (sorted)
    leftover: set[int]  # errors stored on no var any more, which only wait_for_all raises
    wait_for_all_raised: int | None = None


def run_sequential(program: list[Op]) -> Outcome:
    """The plain-Python meaning of a program: the second oracle."""
    cells = list(range(1, N_VARS + 1))
    err: list[int | None] = [None] * N_VARS
    unraised: dict[int, None] = {}
    applied = []
    for i, op in enumerate(program):
        error = next((err[v] for v in op.reads + op.writes if err[v] is not None), None)
        if error is None:
            if op.fail:
                error = i
            else:
                vals = new_values(i, op, [cells[r] for r in op.reads], [cells[w] for w in op.writes])
                for w, val in zip(op.writes, vals, strict=True):
                    cells[w] = val
                applied.append(i)
        if error is not None:
            unraised.setdefault(error, None)
            for w in op.writes:
                err[w] = error
    for e in err:
        if e is not None:
            unraised.pop(e, None)
    leftover = list(unraised)
    return Outcome(cells, err, applied, set(leftover), leftover[0] if leftover else None)


class UseTracker:
    """Detects an op touching a cell that a conflicting op is using at the same moment."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.readers = [0] * N_VARS
        self.writers = [0] * N_VARS
        self.violations: list[str] = []

    def enter(self, i: int, op: Op) -> None:
        with self.lock:
            for r in op.reads:
                if self.writers[r]:
                    self.violations.append(f"op {i} reads v{r} during a write")
                self.readers[r] += 1
            for w in op.writes:
                if self.writers[w] or self.readers[w]:
                    self.violations.append(f"op {i} writes v{w} while it is in use")
                self.writers[w] += 1

    def exit(self, op: Op) -> None:
        with self.lock:
            for r in op.reads:
                self.readers[r] -= 1
            for w in op.writes:
                self.writers[w] -= 1


def run_on_engine(engine: Engine, program: list[Op]) -> Outcome:
    cells = list(range(1, N_VARS + 1))
    vars_ = [engine.new_var(f"v{k}") for k in range(N_VARS)]
    applied = Log()
    tracker = UseTracker()
    helpers: list[threading.Thread] = []

    def work(i: int, op: Op) -> None:
        tracker.enter(i, op)
        try:
            vals = new_values(i, op, [cells[r] for r in op.reads], [cells[w] for w in op.writes])
            for w, val in zip(op.writes, vals, strict=True):
                cells[w] = val
            applied.add(i)
        finally:
            tracker.exit(op)

    for i, op in enumerate(program):
        reads = [vars_[r] for r in op.reads]
        writes = [vars_[w] for w in op.writes]
        if op.mode == "sync":

            def body(i: int = i, op: Op = op) -> None:
                if op.fail:
                    raise OpFailed(i)
                work(i, op)

            engine.push(body, reads, writes, name=f"op{i}")
            continue

        def async_body(on_complete: Callable[..., None], i: int = i, op: Op = op) -> None:
            if op.fail and op.mode == "async_inline":
                raise OpFailed(i)  # raised by fn itself, before on_complete

            def finish() -> None:
                if op.fail:
                    on_complete(OpFailed(i))
                else:
                    work(i, op)
                    on_complete()

            if op.mode == "async_inline":
                finish()
            else:
                t = threading.Thread(target=finish, daemon=True)
                helpers.append(t)
                t.start()

        engine.push_async(async_body, reads, writes, name=f"op{i}")

    # Every op writes a var, so a no_skip read of all vars runs after every op: nothing is raised yet.
    all_done = threading.Event()
    engine.push(all_done.set, reads=vars_, name="barrier", no_skip=True)
    assert all_done.wait(TIMEOUT), "program did not finish: deadlock"
    for t in helpers:
        t.join(TIMEOUT)

    var_errors: list[int | None] = []
    for v in vars_:
        try:
            engine.wait_for_var(v)
            var_errors.append(None)
        except OpFailed as exc:
            var_errors.append(exc.index)
    raised = None
    try:
        engine.wait_for_all()
    except OpFailed as exc:
        raised = exc.index
    engine.wait_for_all()  # nothing is raised twice
    assert engine.pending == 0
    assert tracker.violations == []
    return Outcome(cells, var_errors, sorted(applied.items), set(), raised)


@st.composite
def ops(draw: st.DrawFn) -> Op:
    writes = draw(st.lists(st.integers(0, N_VARS - 1), min_size=1, max_size=2, unique=True))
    others = [k for k in range(N_VARS) if k not in writes]
    reads = draw(st.lists(st.sampled_from(others), max_size=3, unique=True))
    mode = draw(st.sampled_from(["sync", "sync", "async_inline", "async_thread"]))
    fail = draw(st.integers(0, 9)) == 0
    return Op(tuple(reads), tuple(writes), mode, fail)


def random_program(rng: random.Random, n: int) -> list[Op]:
    program = []
    for _ in range(n):
        writes = rng.sample(range(N_VARS), rng.randint(1, 2))
        others = [k for k in range(N_VARS) if k not in writes]
        reads = rng.sample(others, rng.randint(0, min(3, len(others))))
        mode = rng.choice(["sync", "sync", "sync", "async_inline", "async_thread"])
        program.append(Op(tuple(reads), tuple(writes), mode, rng.random() < 0.05))
    return program


def check_program(program: list[Op]) -> None:
    expected = run_sequential(program)
    for spec in [("naive", None), ("threaded", 1), ("threaded", 2), ("threaded", 8)]:
        engine = make_engine(spec[0], workers=spec[1])
        try:
            got = run_on_engine(engine, program)
        finally:
            engine.shutdown()
        label = f"{spec[0]}({spec[1]})"
        assert got.cells == expected.cells, label
        assert got.var_errors == expected.var_errors, label
        assert got.applied == expected.applied, label
        if spec[0] == "naive":
            # The oracle engine runs ops in push order, so "first" is well defined.
            assert got.wait_for_all_raised == expected.wait_for_all_raised, label
        elif expected.leftover:
            # Independent errors may happen in either order on worker threads.
            assert got.wait_for_all_raised in expected.leftover, label
        else:
            assert got.wait_for_all_raised is None, label


@pytest.mark.e2e  # 60 programs, ~1.5 s
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops(), min_size=1, max_size=25))
def test_threaded_engine_matches_naive_and_sequential(program):
    check_program(program)


@pytest.mark.parametrize("seed", range(4))
def test_long_random_programs_match(seed):
    check_program(random_program(random.Random(seed), 250))


# ---------------------------------------------------------------------------- 7. threads
def test_threaded_engine_names_and_joins_its_threads():
    before = opprof_threads()
    e = ThreadedEngine(workers=3, custom_workers=2)
    try:
        mine = opprof_threads() - before
        # The custom-op pool's own threads start with the engine, as its workers do.
        assert sorted(t.name for t in mine) == [
            "opprof-custom-0",
            "opprof-custom-1",
            "opprof-engine-0",
            "opprof-engine-1",
            "opprof-engine-2",
        ]

        on_thread: list[tuple[str, bool]] = []
        custom_ran = threading.Event()

        def task() -> None:
            on_thread.append((threading.current_thread().name, e.on_custom_thread()))
            custom_ran.set()

        e.run_custom(task)
        assert custom_ran.wait(TIMEOUT)
        name, flag = on_thread[0]
        assert re.fullmatch(r"opprof-custom-\d+", name) and flag
        assert not e.on_custom_thread()
        mine = opprof_threads() - before

        names = []
        e.push(lambda: names.append(threading.current_thread().name), writes=[e.new_var()])
        waited(e.wait_for_all)
        assert re.fullmatch(r"opprof-engine-[0-2]", names[0])
    finally:
        waited(e.shutdown)
    assert [t.name for t in mine if t.is_alive()] == []
    assert opprof_threads() - before == set()
    with pytest.raises(EngineError):
        e.push(lambda: None)
    waited(e.shutdown)  # a second shutdown is harmless


def test_shutdown_finishes_pending_work_first(h):
    e = h.threaded(workers=2)
    gate, started = h.gate(), threading.Event()
    v = e.new_var()
    log = Log()
    e.push(gated(gate, started, log, "op"), writes=[v])
    e.push(lambda: log.add("after"), writes=[v])
    assert started.wait(TIMEOUT)
    finished = threading.Event()
    stopper = threading.Thread(target=lambda: (e.shutdown(), finished.set()), daemon=True)
    stopper.start()
    assert not finished.wait(SETTLE)
    gate.set()
    assert finished.wait(TIMEOUT)
    assert log.items == ["op-start", "op-end", "after"]


def test_set_engine_switch_stops_the_old_engines_threads():
    before = opprof_threads()
    original = get_engine()
    try:
        e1 = set_engine("threaded", workers=2, custom_workers=1)
        assert get_engine() is e1 and isinstance(e1, ThreadedEngine) and e1.workers == 2
        if original is not e1:
            with pytest.raises(EngineError):  # the old engine was shut down
                original.push(lambda: None)
        custom_ran = threading.Event()
        e1.run_custom(custom_ran.set)
        assert custom_ran.wait(TIMEOUT)
        e1_threads = opprof_threads() - before
        assert {t.name for t in e1_threads} >= {"opprof-engine-0", "opprof-engine-1"}
        assert any(t.name.startswith("opprof-custom-") for t in e1_threads)

        ran = []
        e1.push(lambda: ran.append(1), writes=[e1.new_var()])
        e2 = waited(set_engine, "naive")
        assert ran == [1]  # the old engine finished its work before stopping
        assert isinstance(e2, NaiveEngine) and get_engine() is e2
        assert [t.name for t in e1_threads if t.is_alive()] == []
        assert opprof_threads() - before == set()
    finally:
        waited(set_engine, "threaded")
    assert isinstance(get_engine(), ThreadedEngine)


def test_set_engine_raises_errors_the_old_engine_still_held():
    before = opprof_threads()
    try:
        e1 = set_engine("threaded", workers=1)
        err = OSError("unwaited")

        def failing_op() -> None:
            raise err

        e1.push(failing_op, writes=[e1.new_var()])
        with pytest.raises(OSError) as ei:
            waited(set_engine, "naive")
        assert ei.value.__cause__ is err
        assert isinstance(get_engine(), NaiveEngine)
        assert opprof_threads() - before == set()
        with pytest.raises(EngineError):
            e1.push(lambda: None)
    finally:
        waited(set_engine, "threaded")


# ---------------------------------------------------------------------------- 8. back-pressure
def test_back_pressure_blocks_a_pusher_that_runs_ahead(h):
    e = h.threaded(workers=2, max_pending=8)
    v = e.new_var()
    gate, started = h.gate(), threading.Event()
    order: list[int] = []
    pending_seen: list[int] = []
    e.push(gated(gate, started), writes=[v])
    assert started.wait(TIMEOUT)

    def op(i: int) -> None:
        pending_seen.append(e.pending)
        order.append(i)

    pushed = [0]
    pusher_done = threading.Event()

    def pusher() -> None:
        for i in range(1, 101):
            e.push(lambda i=i: op(i), writes=[v])
            pushed[0] = i
            pending_seen.append(e.pending)
        pusher_done.set()

    t = threading.Thread(target=pusher, daemon=True)
    t.start()
    # With the gate shut nothing completes: the pusher gets to 8 pending ops, and then it blocks.
    wait_until(lambda: e.pending >= 8)
    assert not pusher_done.wait(SETTLE)
    assert pushed[0] == 7 and e.pending == 8
    gate.set()
    assert pusher_done.wait(TIMEOUT)
    t.join(TIMEOUT)
    waited(e.wait_for_var, v)
    assert order == list(range(1, 101))
    assert max(pending_seen) <= 8


def test_back_pressure_does_not_apply_inside_engine_ops(h):
    # A worker that pushed into a full engine and waited for room would wait for itself.
    e = h.threaded(workers=1, max_pending=4)
    v, out = e.new_var(), e.new_var()
    cell: list[int] = []

    def fan_out() -> None:
        for i in range(50):
            e.push(lambda i=i: cell.append(i), writes=[v])

    e.push(fan_out, writes=[out])
    waited(e.wait_for_all)
    assert cell == list(range(50))


@pytest.mark.parametrize("bad", [1, 0, -5])
def test_max_pending_below_two_is_rejected(bad):
    before = opprof_threads()
    with pytest.raises(ValueError, match="max_pending"):
        ThreadedEngine(workers=1, max_pending=bad)
    assert opprof_threads() - before == set()


# ---------------------------------------------------------------------------- 9. make_engine / env
def test_make_engine_arguments():
    with pytest.raises(ValueError, match="bogus"):
        make_engine("bogus")
    with pytest.raises(ValueError):
        make_engine("naive", workers=2)
    with pytest.raises(ValueError):
        make_engine("naive", custom_workers=2)
    current = get_engine()
    n = make_engine("naive")
    assert isinstance(n, NaiveEngine) and get_engine() is current
    t = make_engine("threaded", workers=3, custom_workers=1)
    try:
        assert isinstance(t, ThreadedEngine) and t.workers == 3 and t.custom_workers == 1
        assert get_engine() is current  # made, not made current
        assert t.spin_us == handoff.SPIN_US  # polls before parking by default
    finally:
        waited(t.shutdown)
    for bad in (-5, float("inf"), "fast"):
        with pytest.raises(ValueError, match="spin_us"):
            make_engine("threaded", spin_us=bad)
    with pytest.raises(ValueError, match="spin"):
        make_engine("naive", spin_us=10)
    t = make_engine("threaded", spin_us=0)
    try:
        assert t.spin_us == 0.0
    finally:
        waited(t.shutdown)


@pytest.mark.skipif(not handoff.AVAILABLE, reason=f"no polling queue here: {handoff.WHY_NOT}")
def test_an_idle_engine_stops_polling():
    """Known answer: once a chain of custom ops has run, the engine's threads poll their queues for
    at most about twice SPIN_US (10 ms here, on purpose) and then park: over the next 300 ms they
    take (almost) no CPU, however long the poll they were allowed."""
    import opprof as mx

    class Echo(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] + 1)

    @mx.operator.register("IdlePollEcho")
    class EchoProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):
            return Echo()

    e = make_engine("threaded", workers=2, custom_workers=1, spin_us=10_000)
    try:
        with use(e):
            a = mx.nd.ones((2, 2))
            for _ in range(30):
                a = mx.nd.Custom(a, op_type="IdlePollEcho")
            mx.nd.waitall()
            assert float(a.asnumpy()[0, 0]) == 31.0
        mine = [t for t in threading.enumerate() if t.name.startswith(("opprof-engine-", "opprof-custom-")) and t.ident]
        clocks = {t.name: time.pthread_getcpuclockid(t.ident) for t in mine if t.is_alive()}

        def cpu_ns() -> int:
            return sum(time.clock_gettime_ns(c) for c in clocks.values())

        time.sleep(0.1)  # past any poll (at most ~2 x 10 ms each)
        before = cpu_ns()
        time.sleep(0.3)
        assert cpu_ns() - before < 3_000_000, (len(clocks), cpu_ns() - before)
    finally:
        waited(e.shutdown)


def _run_with_env(env_vars: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPPROF_")}
    env.update(env_vars)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.e2e  # fresh interpreters in subprocesses
def test_engine_kind_from_environment():
    code = "import opprof; e = opprof.get_engine(); print(type(e).__name__, getattr(e, 'workers', '-'))"
    r = _run_with_env({"OPPROF_ENGINE": "naive"}, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["NaiveEngine", "-"]
    r = _run_with_env({"OPPROF_ENGINE": "threaded", "OPPROF_ENGINE_THREADS": "3"}, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ThreadedEngine", "3"]
    r = _run_with_env({"OPPROF_ENGINE": "bogus"}, code)
    assert r.returncode != 0 and "bogus" in r.stderr
    spin = "import opprof; print(opprof.get_engine().spin_us)"
    r = _run_with_env({"OPPROF_ENGINE_SPIN_US": "0"}, spin)
    assert r.returncode == 0 and r.stdout.split() == ["0.0"], r.stderr
    r = _run_with_env({"OPPROF_ENGINE_SPIN_US": "soon"}, spin)
    assert r.returncode != 0 and "OPPROF_ENGINE_SPIN_US='soon'" in r.stderr


# ---------------------------------------------------------------------------- 10. custom pool
def test_custom_pool_grows_when_its_worker_blocks(h):
    e = h.threaded(workers=2, custom_workers=1)
    v, w = e.new_var("v"), e.new_var("w")
    cell: list[str] = []
    completions: list[Callable[..., None]] = []
    # An outstanding async write on v: only the op that task B pushes completes it.
    e.push_async(completions.append, writes=[v])
    wait_until(lambda: bool(completions))

    a_done, b_done = threading.Event(), threading.Event()
    seen: list[list[str]] = []
    threads: list[str] = []

    def task_a() -> None:
        threads.append(threading.current_thread().name)
        e.wait_for_var(v)  # blocks the only pool worker until task B has run
        seen.append(list(cell))
        a_done.set()

    def task_b() -> None:
        threads.append(threading.current_thread().name)

        def write_v() -> None:
            cell.append("written by B")
            completions[0]()

        e.push(write_v, writes=[w])
        b_done.set()

    e.run_custom(task_a)
    e.run_custom(task_b)
    ok = a_done.wait(TIMEOUT)
    if not ok:
        completions[0]()  # unblock task A so teardown can finish, then report the deadlock
        a_done.wait(TIMEOUT)
        pytest.fail("custom pool deadlocked: task B never ran while task A waited")
    assert b_done.is_set()
    assert seen == [["written by B"]]
    assert len(set(threads)) == 2 and all(n.startswith("opprof-custom-") for n in threads)
    waited(e.wait_for_all)


def test_waits_from_custom_tasks_are_allowed(h):
    e = h.threaded(workers=1, custom_workers=1)
    v = e.new_var()
    cell: list[int] = []
    e.push(lambda: cell.append(1), writes=[v])
    results: list[Any] = []
    done = threading.Event()

    def task() -> None:
        try:
            e.wait_for_var(v)
            results.append(list(cell))
        except BaseException as exc:
            results.append(exc)
        done.set()

    e.run_custom(task)
    assert done.wait(TIMEOUT)
    assert results == [[1]]


def test_naive_engine_runs_custom_tasks_inline():
    e = NaiveEngine()
    ran = []
    e.run_custom(lambda: ran.append(threading.current_thread()))
    assert ran == [threading.current_thread()]


@pytest.mark.timeout(60)
def test_back_pressure_never_blocks_a_custom_ops_python() -> None:
    """A chain of custom ops longer than max_pending: the backlog is exactly the ops waiting for the
    custom op whose Python is pushing, so throttling that Python would deadlock."""
    import opprof as mx

    class AddOne(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] + 1)

    @mx.operator.register("BackPressureAddOne")
    class AddOneProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, in_shapes, in_dtypes):
            return AddOne()

    mx.set_engine(ThreadedEngine(workers=2, custom_workers=1, max_pending=4))
    try:
        a = mx.nd.ones((3, 3))
        for _ in range(200):
            a = mx.nd.Custom(a, op_type="BackPressureAddOne")
        assert a.asnumpy()[0, 0] == 201
    finally:
        mx.set_engine("threaded")
