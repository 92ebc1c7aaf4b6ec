"""Recording: cheap capture on the hot path, the :class:`~opprof.trace.Trace` built only at the end.

The recorder is an engine observer (:class:`~opprof.engine.EngineObserver`). While it runs, each thread appends flat tuples to its
own list (no lock, no dict, no string formatting): one ``perf_counter_ns`` pair and an append per
op. Names such as ``MyAddOne::_plus_scalar``, roles, custom-op families, the python / sub-ops /
waiting split and flow arrows are all worked out in :meth:`Recorder.build`.

What is recorded, and on which thread:

* every engine op, on the thread that executed it (not the pusher);
* every blocking wait (``WaitForVar``, ``WaitForAll``) on the thread that blocked;
* per custom-op invocation: its Python (``Type::pure_python``) on the custom-op worker, its
  sub-operators (``Type::op``, pushed while that Python ran), waits inside the Python
  (``Type::WaitForVar``), ``Type::Dummy_Wait``, and a ``parent`` span from the moment its engine op
  started to the end of its ``Dummy_Wait``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from ..engine import (
    CUSTOM_THREAD_PREFIX,
    ENGINE_THREAD_PREFIX,
    INTERNAL,
    Engine,
    EngineObserver,
    Invocation,
    Opr,
    current_invocation,
    get_engine,
)
from ..engine.state import thread_state
from ..trace import CUSTOM_OP, CounterSample, Flow, Instant, Role, Span, ThreadInfo, Trace
from ..trace.records import OPERATOR, WAIT
from ..trace.split import split_invocation

__all__ = ["Recorder", "ProfilerError"]

# Kinds of record (first field of each tuple).
_OP, _WAIT, _PYTHON, _ERROR, _USER, _INSTANT, _COUNTER = 0, 1, 2, 3, 4, 5, 6
_PLAIN_PUSH = (0, 0, None)  # (push time, pushing thread, invocation) of a push outside custom ops


class ProfilerError(RuntimeError):
    """The profiler was used in a way that would lose or mix up data."""


class Recorder(EngineObserver):
    """Engine observer that records spans; one per profiling session."""

    def __init__(self, max_events: int = 5_000_000, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, got {max_events}")
        self.max_events = int(max_events)
        self.clock = clock
        self._local = threading.local()
        self._buffers: list[tuple[int, str, list[tuple[Any, ...]]]] = []
        self._lock = threading.Lock()
        self._count = itertools.count()
        self.recording = True  # False while paused
        self.full = False  # an event was dropped at the cap
        self.engine: Engine | None = None
        self.t_start = clock()
        self.t_stop: int | None = None

    # ------------------------------------------------------------------ attach / detach
    def attach(self, engine: Engine | None = None) -> Recorder:
        engine = engine or get_engine()
        if any(isinstance(o, Recorder) and o is not self for o in engine.observers):
            raise ProfilerError("another profiler is already recording this engine; stop it first")
        self.engine = engine
        self.t_start = self.clock()
        if self not in engine.observers:
            engine.add_observer(self)
        return self

    def detach(self) -> None:
        if self.engine is not None:
            self.engine.remove_observer(self)
        self.t_stop = self.clock()

    # ------------------------------------------------------------------ hot path
    # Every call here runs once per engine op, so each attribute lookup counts: thread identity is
    # the C-level ``get_ident()`` (mapped to a small tid at build time), and a thread's buffer is
    # found with one thread-local lookup.
    def _buf(self) -> list[tuple[Any, ...]]:
        try:
            return self._local.buf
        except AttributeError:
            buf: list[tuple[Any, ...]] = []
            with self._lock:
                self._buffers.append((threading.get_ident(), threading.current_thread().name, buf))
            self._local.buf = buf
            return buf

    def _admit(self) -> bool:
        if not self.recording:
            return False
        if next(self._count) < self.max_events:
            return True
        self.full = True
        return False

    def on_push(self, opr: Opr) -> None:
        if self.recording and opr.info is not INTERNAL:
            inv = thread_state.invocation
            # Only a push inside a custom op's Python needs its time and thread (for its flow arrow).
            # The pusher is named by its buffer, not its thread ident: Linux reuses the ident of a
            # finished thread, which would move the arrow to another thread.
            opr.prof = _PLAIN_PUSH if inv is None else (self.clock(), self._buf(), inv)

    def run(self, opr: Opr, fn: Callable[..., Any], *args: Any) -> None:
        prof = opr.prof
        if prof is None:  # pushed before recording started, or internal
            fn(*args)
            return
        clock = self.clock
        t0 = clock()
        try:
            fn(*args)
        finally:
            t1 = clock()
            if self.recording:
                if next(self._count) < self.max_events:
                    try:
                        buf = self._local.buf
                    except AttributeError:
                        buf = self._buf()
                    buf.append((_OP, t0, t1, opr.name, opr.info, prof, opr.is_async))
                else:
                    self.full = True

    def on_wait(self, name: str, t0: int, t1: int) -> None:
        if self._admit():
            buf = self._buf()
            buf.append((_WAIT, t0, t1, name, current_invocation()))

    def on_python(self, inv: Invocation, t0: int, t1: int) -> None:
        # Takes no slot under the cap (its family's Dummy_Wait, recorded after it, may still fit),
        # but once the cap is reached the family is incomplete anyway: keeping it would let memory
        # grow with every custom-op call.
        if self.recording and not self.full:
            buf = self._buf()
            buf.append((_PYTHON, t0, t1, inv))

    def on_error(self, inv: Invocation, error: BaseException) -> None:
        if not self.full:
            buf = self._buf()
            buf.append((_ERROR, 0, 0, inv, f"{type(error).__name__}: {error}"))

    def on_user_span(self, name: str, cat: str, t0: int, t1: int) -> None:
        """A span the user marked (``mx.profiler.Task``/``Frame``/``Event``)."""
        if self._admit():
            buf = self._buf()
            buf.append((_USER, t0, t1, name, cat))

    def on_instant(self, name: str, cat: str, ts: int) -> None:
        if self._admit():
            buf = self._buf()
            buf.append((_INSTANT, ts, ts, name, cat))

    def on_counter(self, name: str, ts: int, value: float) -> None:
        if self._admit():
            buf = self._buf()
            buf.append((_COUNTER, ts, ts, name, value))

    @property
    def events(self) -> int:
        return sum(len(b) for _, _, b in self._buffers)

    # ------------------------------------------------------------------ building the trace
    def build(self, metadata: dict[str, Any] | None = None, *, live: bool = False) -> Trace:
        """Turn the raw records into a validated-shape :class:`Trace` (call after the work is done).

        ``live``: while recording goes on (``mx.profiler.dumps()`` and ``dump(False)`` while
        running): each thread's records as they are now; families not finished yet are left out.
        """
        with self._lock:
            buffers = sorted(self._buffers, key=lambda b: _thread_order(b[1]))
        if live:  # threads append as we read: a copy of each list is consistent
            buffers = [(ident, name, list(buf)) for ident, name, buf in buffers]
        threads = [ThreadInfo(i + 1, name) for i, (_, name, _) in enumerate(buffers)]
        b = _Build({id(buf): i + 1 for i, (_, _, buf) in enumerate(buffers)})
        for tid, (_, _, buf) in enumerate(buffers, start=1):
            b.read(tid, buf)
        incomplete = b.families()
        flows = b.flows()
        b.spans.sort(key=lambda s: (s.start, -s.end))
        dropped = max(0, next(self._count) - self.max_events)  # attempts past the cap
        meta = {
            "clock": "perf_counter_ns",
            "t_start_ns": self.t_start,
            "t_stop_ns": self.t_stop,
            "max_events": self.max_events,
            "dropped_events": dropped,
            "incomplete_invocations": incomplete,
            "engine": getattr(self.engine, "kind", None),
            "producer": "opprof",
        }
        if metadata:
            meta.update(metadata)
        b.instants.sort(key=lambda i: i.ts)
        b.counters.sort(key=lambda c: c.ts)
        return Trace(threads=threads, spans=b.spans, flows=flows, instants=b.instants, counters=b.counters, metadata=meta)


class _Build:
    """The trace being built from the records: spans, then families and flows."""

    def __init__(self, tid_of: dict[int, int]) -> None:
        self.tid_of = tid_of  # id(buffer) -> small tid: names the thread that pushed a sub-op
        self.spans: list[Span] = []
        self.instants: list[Instant] = []
        self.counters: list[CounterSample] = []
        self.starts: dict[Invocation, tuple[int, int]] = {}  # the custom op's engine op: (start, tid)
        self.ends: dict[Invocation, int] = {}  # its Dummy_Wait's end
        self.errors: dict[Invocation, str] = {}
        self.children: dict[Invocation, list[Span]] = {}
        self.pending_flows: list[tuple[Span, int, int]] = []  # (sub-op, pushing tid, push time)

    def child(self, inv: Invocation, name: str, tid: int, t0: int, t1: int, role: Role) -> Span:
        s = Span(f"{inv.name}::{name}", CUSTOM_OP, tid, t0, t1, {"op_type": inv.op_type, "role": role})
        self.children.setdefault(inv, []).append(s)
        return s

    def read(self, tid: int, buf: list[tuple[Any, ...]]) -> None:
        """One thread's records as spans (families get their ids later)."""
        spans, child = self.spans, self.child
        dummy_wait, subop, wait, python = Role.DUMMY_WAIT, Role.SUBOP, Role.WAIT, Role.PYTHON  # locals: see Role
        for rec in buf:
            kind = rec[0]
            if kind == _OP:
                _, t0, t1, name, info, prof, is_async = rec
                pushed_in = prof[2]
                if isinstance(info, Invocation) and is_async:
                    self.starts[info] = (t0, tid)  # the custom op's engine op: the family starts here
                    continue
                if isinstance(info, Invocation) and name == "Dummy_Wait":
                    s = child(info, "Dummy_Wait", tid, t0, t1, dummy_wait)
                    self.ends[info] = t1
                elif pushed_in is not None:
                    s = child(pushed_in, name, tid, t0, t1, subop)
                    src_tid = self.tid_of.get(id(prof[1]))
                    if src_tid is not None:  # sub-ops are pushed inside the Python span: the arrow starts there
                        self.pending_flows.append((s, src_tid, prof[0]))
                else:
                    s = Span(name, OPERATOR, tid, t0, t1)
                spans.append(s)
            elif kind == _WAIT:
                _, t0, t1, name, inv = rec
                spans.append(child(inv, name, tid, t0, t1, wait) if inv is not None else Span(name, WAIT, tid, t0, t1))
            elif kind == _PYTHON:
                _, t0, t1, inv = rec
                spans.append(child(inv, "pure_python", tid, t0, t1, python))
            elif kind == _ERROR:
                self.errors[rec[3]] = rec[4]
            elif kind == _USER:
                spans.append(Span(rec[3], rec[4], tid, rec[1], rec[2]))
            elif kind == _INSTANT:
                self.instants.append(Instant(rec[3], rec[4], tid, rec[1]))
            elif kind == _COUNTER:
                self.counters.append(CounterSample(rec[3], rec[1], {"value": rec[4]}))

    def families(self) -> int:
        """Number invocations 1..n in start order and give each its parent; return how many were dropped.

        A family that the cap or a pause left without its start, its Python or its Dummy_Wait is
        dropped whole: a partial family would mislead.
        """
        children, starts, ends = self.children, self.starts, self.ends
        python = Role.PYTHON
        has_python = {inv for inv, kids in children.items() if any(k.role == python for k in kids)}
        complete = sorted((inv for inv in starts if inv in ends and inv in has_python), key=lambda inv: starts[inv][0])
        ids = {inv: i for i, inv in enumerate(complete, start=1)}
        incomplete = {inv for inv in children if inv not in ids}
        if incomplete:
            orphans = {id(s) for inv in incomplete for s in children[inv]}
            self.spans = [s for s in self.spans if id(s) not in orphans]
        for inv, i in ids.items():
            family = children.get(inv, [])
            for s in family:
                assert s.args is not None
                s.args["invocation"] = i
                s.args["backward"] = inv.backward
            t0, tid = starts[inv]
            args: dict[str, Any] = {"op_type": inv.op_type, "role": Role.PARENT, "invocation": i, "backward": inv.backward}
            parent = Span(inv.name, CUSTOM_OP, tid, t0, ends[inv], args)
            py, sub, wait = split_invocation(parent, family)
            args.update(python_us=py / 1e3, subops_us=sub / 1e3, waiting_us=wait / 1e3)
            if inv in self.errors:
                args["error"] = self.errors[inv]
            self.spans.append(parent)
        return len(incomplete)

    def flows(self) -> list[Flow]:
        """An arrow from each kept sub-op's push to its start."""
        kept = {id(s) for s in self.spans}
        live = (f for f in self.pending_flows if id(f[0]) in kept)
        return [Flow(n, s.name, "push", tid, min(ts, s.start), s.tid, s.start) for n, (s, tid, ts) in enumerate(live, 1)]


def _thread_order(name: str) -> tuple[int, int, str]:
    """Main thread first, then engine workers, then custom-op workers, each in number order."""
    for rank, prefix in enumerate(("MainThread", ENGINE_THREAD_PREFIX, CUSTOM_THREAD_PREFIX), start=0):
        if name.startswith(prefix):
            tail = name[len(prefix) :]
            return (rank, int(tail) if tail.isdigit() else 0, name)
    return (3, 0, name)
