"""Recording: cheap capture on the hot path, the :class:`~opprof.trace.Trace` built only at the end.

The recorder is the engine's ``observer``. While it runs, each thread appends flat tuples to its
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

from .engine import INTERNAL, Engine, get_engine
from .operator import Invocation, current_invocation
from .operator import _tls as _op_tls
from .trace import CounterSample, Flow, Instant, Span, ThreadInfo, Trace, split_invocation

__all__ = ["Recorder", "ProfilerError"]

# Kinds of record (first field of each tuple).
_OP, _WAIT, _PYTHON, _ERROR, _USER, _INSTANT, _COUNTER = 0, 1, 2, 3, 4, 5, 6
_PLAIN_PUSH = (0, 0, None)  # (push time, pushing thread, invocation) of a push outside custom ops


class ProfilerError(RuntimeError):
    """The profiler was used in a way that would lose or mix up data."""


class Recorder:
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
        if engine.observer is not None and engine.observer is not self:
            raise ProfilerError("another profiler is already recording this engine; stop it first")
        self.engine = engine
        self.t_start = self.clock()
        engine.observer = self
        return self

    def detach(self) -> None:
        if self.engine is not None and self.engine.observer is self:
            self.engine.observer = None
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

    def on_push(self, opr: Any) -> None:
        if self.recording and opr.info is not INTERNAL:
            inv = _op_tls.invocation
            # Only a push inside a custom op's Python needs its time and thread (for its flow arrow).
            # The pusher is named by its buffer, not its thread ident: Linux reuses the ident of a
            # finished thread, which would move the arrow to another thread.
            opr.prof = _PLAIN_PUSH if inv is None else (self.clock(), self._buf(), inv)

    def run(self, opr: Any, fn: Callable[..., Any], *args: Any) -> None:
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
    def build(self, metadata: dict[str, Any] | None = None) -> Trace:
        """Turn the raw records into a validated-shape :class:`Trace` (call after the work is done)."""
        with self._lock:
            buffers = sorted(self._buffers, key=lambda b: _thread_order(b[1]))
        threads = [ThreadInfo(i + 1, name) for i, (_, name, _) in enumerate(buffers)]
        tid_of = {id(buf): i + 1 for i, (_, _, buf) in enumerate(buffers)}
        spans: list[Span] = []
        flows: list[Flow] = []
        starts: dict[Invocation, tuple[int, int]] = {}
        ends: dict[Invocation, int] = {}
        errors: dict[Invocation, str] = {}
        children: dict[Invocation, list[Span]] = {}
        pending_flows: list[tuple[Span, int, int]] = []
        instants: list[Instant] = []
        counters: list[CounterSample] = []

        def child(inv: Invocation, name: str, tid: int, t0: int, t1: int, role: str) -> Span:
            s = Span(f"{inv.name}::{name}", "custom", tid, t0, t1, {"op_type": inv.op_type, "role": role})
            children.setdefault(inv, []).append(s)
            return s

        for tid, (_, _, buf) in enumerate(buffers, start=1):
            for rec in buf:
                kind = rec[0]
                if kind == _OP:
                    _, t0, t1, name, info, prof, is_async = rec
                    pushed_in = prof[2]
                    if isinstance(info, Invocation) and is_async:
                        starts[info] = (t0, tid)  # the custom op's engine op: the family starts here
                        continue
                    if isinstance(info, Invocation) and name == "Dummy_Wait":
                        s = child(info, "Dummy_Wait", tid, t0, t1, "dummy_wait")
                        ends[info] = t1
                    elif pushed_in is not None:
                        s = child(pushed_in, name, tid, t0, t1, "subop")
                    else:
                        spans.append(Span(name, "operator", tid, t0, t1))
                        continue
                    spans.append(s)
                    src_tid = tid_of.get(id(prof[1]))
                    if s.args is not None and s.args["role"] == "subop" and src_tid is not None:
                        # Sub-ops are pushed inside the Python span: the arrow starts there.
                        pending_flows.append((s, src_tid, prof[0]))
                elif kind == _WAIT:
                    _, t0, t1, name, inv = rec
                    if inv is not None:
                        spans.append(child(inv, name, tid, t0, t1, "wait"))
                    else:
                        spans.append(Span(name, "wait", tid, t0, t1))
                elif kind == _PYTHON:
                    _, t0, t1, inv = rec
                    spans.append(child(inv, "pure_python", tid, t0, t1, "python"))
                elif kind == _ERROR:
                    errors[rec[3]] = rec[4]
                elif kind == _USER:
                    spans.append(Span(rec[3], rec[4], tid, rec[1], rec[2]))
                elif kind == _INSTANT:
                    instants.append(Instant(rec[3], rec[4], tid, rec[1]))
                elif kind == _COUNTER:
                    counters.append(CounterSample(rec[3], rec[1], {"value": rec[4]}))

        # Families: number invocations 1..n in start order; drop any that the cap or a pause left
        # without its start, its Python or its Dummy_Wait (a partial family would mislead).
        has_python = {inv for inv, kids in children.items() if any(k.args and k.args["role"] == "python" for k in kids)}
        complete = sorted((inv for inv in starts if inv in ends and inv in has_python), key=lambda inv: starts[inv][0])
        ids = {inv: i for i, inv in enumerate(complete, start=1)}
        incomplete = {inv for inv in children if inv not in ids}
        if incomplete:
            orphans = {id(s) for inv in incomplete for s in children[inv]}
            spans = [s for s in spans if id(s) not in orphans]
        for inv, i in ids.items():
            for s in children.get(inv, ()):
                assert s.args is not None
                s.args["invocation"] = i
                s.args["backward"] = inv.backward
            t0, tid = starts[inv]
            parent = Span(
                inv.name,
                "custom",
                tid,
                t0,
                ends[inv],
                {"op_type": inv.op_type, "role": "parent", "invocation": i, "backward": inv.backward},
            )
            family = children.get(inv, [])
            py, sub, wait = split_invocation(parent, family)
            assert parent.args is not None
            parent.args.update(python_us=py / 1e3, subops_us=sub / 1e3, waiting_us=wait / 1e3)
            if inv in errors:
                parent.args["error"] = errors[inv]
            spans.append(parent)

        kept = {id(s) for s in spans}
        for n, (s, src_tid, src_ts) in enumerate((f for f in pending_flows if id(f[0]) in kept), start=1):
            flows.append(Flow(n, s.name, "push", src_tid, min(src_ts, s.start), s.tid, s.start))

        spans.sort(key=lambda s: (s.start, -s.end))
        dropped = max(0, next(self._count) - self.max_events)  # attempts past the cap
        meta = {
            "clock": "perf_counter_ns",
            "t_start_ns": self.t_start,
            "t_stop_ns": self.t_stop,
            "max_events": self.max_events,
            "dropped_events": dropped,
            "incomplete_invocations": len(incomplete),
            "engine": getattr(self.engine, "kind", None),
            "producer": "opprof",
        }
        if metadata:
            meta.update(metadata)
        instants.sort(key=lambda i: i.ts)
        counters.sort(key=lambda c: c.ts)
        return Trace(threads=threads, spans=spans, flows=flows, instants=instants, counters=counters, metadata=meta)


def _thread_order(name: str) -> tuple[int, int, str]:
    """Main thread first, then engine workers, then custom-op workers, each in number order."""
    for rank, prefix in enumerate(("MainThread", "opprof-engine-", "opprof-custom-"), start=0):
        if name.startswith(prefix):
            tail = name[len(prefix) :]
            return (rank, int(tail) if tail.isdigit() else 0, name)
    return (3, 0, name)
