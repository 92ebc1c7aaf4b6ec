"""Recording: cheap capture on the hot path, the :class:`~opprof.trace.Trace` built only at the end.

The recorder is an engine observer (:class:`~opprof.engine.EngineObserver`). While it runs, each
thread appends flat tuples to lists of its own (no lock, no dict, no string formatting): one
``perf_counter_ns`` pair and an append per op. Names such as ``MyAddOne::_plus_scalar``, roles,
custom-op families, the python / sub-ops / waiting split and flow arrows are all worked out in
:meth:`Recorder.build`, with array operations (:mod:`.build`).

Where a C compiler built :mod:`._spanlog`, the hooks themselves are C (:class:`_CompiledRecorder`,
the default; ``Recorder(compiled=False)`` or ``OPPROF_PURE=1`` for this pure-Python one): the
same records, a plain op's as one fixed-size record of int64s instead of a tuple.

What is recorded, and on which thread:

* every engine op, on the thread that executed it (not the pusher);
* every blocking wait (``WaitForVar``, ``WaitForAll``) on the thread that blocked;
* per custom-op invocation: its Python (``Type::pure_python``) on the custom-op worker, its
  sub-operators (``Type::op``, pushed while that Python ran), waits inside the Python
  (``Type::WaitForVar``), ``Type::Dummy_Wait``, and a ``parent`` span from the moment its engine op
  started to the end of its ``Dummy_Wait``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from operator import attrgetter
from types import FrameType
from typing import Any

import numpy as np

from ..engine import (
    INTERNAL,
    CustomOpInfo,
    CustomPart,
    Engine,
    EngineObserver,
    Invocation,
    Opr,
    Var,
    current_invocation,
    get_engine,
)
from ..engine.gil import load_compiled
from ..engine.state import thread_state
from ..trace import Role, SpanTable, ThreadInfo, Trace
from ..trace.columns import ROLE_CODE
from ..trace.memory import MEMORY_METADATA
from ..trace.records import (
    BACKPRESSURE,
    CPUS_KEY,
    CUSTOM_POOL,
    CUSTOM_THREAD_PREFIX,
    ENGINE_CATEGORY,
    ENGINE_POOL,
    ENGINE_THREAD_PREFIX,
    GC_CATEGORY,
    MAX_PENDING_KEY,
)
from . import npmem as _npmem
from . import sites as _sites
from .build import (
    COUNTER,
    DEPS_SCHEMA,
    DUMMY,
    ERROR,
    FAM_SCHEMA,
    INSTANT,
    OP,
    PLAIN_SCHEMA,
    PYTHON,
    START,
    SUB_SCHEMA,
    USER,
    WAIT_REC,
    ThreadRecords,
    build_columns,
)
from .cpuwait import CpuWaitRecording
from .gcpause import GcRecording
from .gil import GilRecording
from .memory import PYTHON_UNSEEN, MemoryRecording

__all__ = ["COMPILED_WHY_NOT", "ProfilerError", "Recorder"]


_VAR_ID = attrgetter("id")
_INVOCATION = CustomPart.INVOCATION  # a module global: looking the member up costs ten times more


def _site(start: int) -> tuple[str, int] | None:
    """The user's line that pushed (or waited): the first frame outside opprof's own code.

    Only pushes and waits inside a custom op's Python pay for it (a walk of a few frames); a plain
    op never does.
    """
    # Straight to the ``start``-th frame up, the nearest the user's can be on the usual paths:
    # ``sys._getframe(n)`` makes a frame object for that frame only, while each ``f_back`` step
    # makes one (about 0.9 µs apiece in a custom op's thread: walking from the recorder cost 5.8
    # µs a push, from here 3.1). The engine's fast paths reach the observer in fewer frames than
    # its general one, so a guess that lands on a user frame steps back down to the nearest.
    own = _sites.NOT_USER  # opprof's own machinery, and what a front end added (see .sites)
    try:
        f: FrameType | None = sys._getframe(start)
    except ValueError:
        f = sys._getframe(2)
        start = 2
    if f is not None and not f.f_code.co_filename.startswith(own):
        while start > 2:
            below = sys._getframe(start - 1)
            if below.f_code.co_filename.startswith(own):
                break
            f, start = below, start - 1
        return (f.f_code.co_filename, f.f_lineno)
    while f is not None and f.f_code.co_filename.startswith(own):
        f = f.f_back
    return None if f is None else (f.f_code.co_filename, f.f_lineno)


class ProfilerError(RuntimeError):
    """The profiler was used in a way that would lose or mix up data."""


#: The threads ``threading`` has listed as started, by ident (``threading._active``, read without
#: its lock: a dict lookup; an interpreter without it lists none, and collections then get a span
#: only on threads that recorded something before).
_THREADS_STARTED: Any = getattr(threading, "_active", {})


class Recorder(EngineObserver):
    """Engine observer that records spans; one per profiling session."""

    def __new__(
        cls,
        max_events: int = 5_000_000,
        clock: Callable[[], int] = time.perf_counter_ns,
        *,
        compiled: bool | None = None,
        memory: bool = False,
        gil: bool = True,
    ) -> Recorder:
        """``compiled``: None (default) takes the compiled hot path where it is built and the clock is
        the one it reads (CLOCK_MONOTONIC, what perf_counter_ns reads on Linux); False the pure-Python
        recorder; True requires the compiled one (ProfilerError, saying why, where it is not)."""
        usable = _spanlog is not None and clock is time.perf_counter_ns
        if compiled and not usable:
            why = COMPILED_WHY_NOT or "the compiled recorder reads CLOCK_MONOTONIC: it takes clock=time.perf_counter_ns only"
            raise ProfilerError(f"no compiled recorder here: {why}")
        if cls is Recorder and usable and compiled is not False:
            cls = _CompiledRecorder
        return super().__new__(cls)

    def __init__(
        self,
        max_events: int = 5_000_000,
        clock: Callable[[], int] = time.perf_counter_ns,
        *,
        compiled: bool | None = None,
        memory: bool = False,
        gil: bool = True,
    ) -> None:
        """``memory``: also record every NDArray's storage (:mod:`.memory`). ``gil``: sample the GIL
        and time the engine's hand-offs (:mod:`.gil`); False leaves the trace without that evidence."""
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, got {max_events}")
        self.max_events = int(max_events)
        self.clock = clock
        self._local = threading.local()
        self._buffers: list[ThreadRecords] = []
        # Reentrant: a garbage collection can start at any allocation, inside this lock's holder too,
        # and its span may register the collecting thread (:meth:`_on_collection`). What the lock
        # guards stays whole either way: the list of threads is only appended to.
        self._lock = threading.RLock()
        #: Whether a live feed reads these records (:class:`~.live.LiveFeed`): its last poll, after
        #: stop(), brings stop()'s own final wait, so :meth:`release` leaves them to the collector.
        self.watched = False
        #: Each invocation's NumPy peak (:meth:`note_numpy_peak`): ``inv.id -> (t0 of its Python, bytes)``.
        self._numpy_peaks: dict[int, tuple[int, int]] = {}
        #: What measures the NumPy data a custom op's Python allocates (:mod:`.npmem`'s C part:
        #: ``enter()`` and ``leave(token)`` around the Python, on its thread), where this recorder
        #: records memory and it is available; else None. An attribute and the C functions, not a
        #: property and npmem's Python ones: 0.49 µs a call against 1.0. The custom-op machinery
        #: hands the peak to ``on_python`` (either recorder's, which keeps it as
        #: :meth:`note_numpy_peak` does).
        self.numpy_memory: Any = _npmem._npmem if memory and _npmem.AVAILABLE else None
        self._start_counting()
        self.engine: Engine | None = None
        self.t_start = clock()
        self.t_stop: int | None = None
        #: The GIL's evidence, sampled while attached (:mod:`.gil`).
        self.gil = GilRecording(clock, enabled=gil)
        #: How long the OS kept each thread waiting for a CPU while attached (:mod:`.cpuwait`).
        self.cpu_wait = CpuWaitRecording()
        #: Each collection of Python's garbage collector while attached (:mod:`.gcpause`).
        self.gc = GcRecording(clock, self._on_collection)
        #: Each NDArray's storage, made and freed, while attached (with ``memory=True``).
        self.memory = MemoryRecording(clock, compiled=False if compiled is False else None) if memory else None
        #: (when, engine kind) of each engine switch followed while recording.
        self.switches: list[tuple[int, str]] = []

    #: Which recorder this is: "compiled" (plain ops recorded in C, :mod:`._spanlog`) or "python".
    path = "python"

    def _start_counting(self) -> None:
        self._count: Any = itertools.count()
        self.recording = True  # False while paused
        self.full = False  # an event was dropped at the cap

    def _attempts(self) -> int:
        """Records attempted so far, read without taking a slot (a build, a live snapshot or
        ``dumps()`` while recording must neither drop a real event nor count itself as dropped).
        ``itertools.count`` has no peek: its repr is ``count(n)``."""
        return int(repr(self._count)[6:-1])

    # ------------------------------------------------------------------ attach / detach
    def attach(self, engine: Engine | None = None) -> Recorder:
        engine = engine or get_engine()
        self.t_start = self.clock()
        # One step: check that no other recorder is on the engine, and add this one.
        if not engine.add_observer(self, unless=lambda o: isinstance(o, Recorder)):
            raise ProfilerError("another profiler is already recording this engine; stop it first")
        self.engine = engine
        self.gil.start()
        self.cpu_wait.start()
        self.gc.start()
        if self.memory is not None:
            self.memory.start()
        return self

    def follow(self, engine: Engine) -> None:
        """The engine was switched mid-recording (``set_engine``, ``engine.use``): go on with the new
        one, and say so in the trace's metadata."""
        self.engine = engine
        self.switches.append((self.clock(), engine.kind))

    def detach(self) -> None:
        if self.engine is not None:
            self.engine.remove_observer(self)
        if self.memory is not None:
            self.memory.stop()
        self.gc.stop()
        self.t_stop = self.clock()
        self.gil.stop()
        self.cpu_wait.stop()

    # ------------------------------------------------------------------ hot path
    # Every call here runs once per engine op, so each attribute lookup counts: thread identity is
    # the C-level ``get_ident()`` (mapped to a small tid at build time), and a thread's buffer is
    # found with one thread-local lookup.
    def _buf(self) -> list[tuple[Any, ...]]:
        try:
            return self._local.buf
        except AttributeError:
            return self._register().buf

    def _fam(self) -> list[tuple[int, int, int, Invocation, int]]:
        try:
            return self._local.fam
        except AttributeError:
            return self._register().fam

    def _records(self) -> ThreadRecords:
        """This thread's lists, made on its first record."""
        try:
            return self._local.rec
        except AttributeError:
            return self._register()

    def _register(self) -> ThreadRecords:
        """This thread's lists (see :class:`~.build.ThreadRecords`), made on its first record."""
        local = self._local
        local.registering = True  # a garbage collection meanwhile must not register it a second time
        try:
            lists = ThreadRecords(threading.current_thread().name, threading.get_native_id())
            self._new_records(lists)
            with self._lock:
                lists.index = len(self._buffers)
                self._buffers.append(lists)
            local.rec, local.buf, local.fam = lists, lists.buf, lists.fam
        finally:
            local.registering = False
        return lists

    def _new_records(self, lists: ThreadRecords) -> None:
        """Ready a thread's new lists (the compiled recorder gives them its log for plain ops)."""

    def _admit(self) -> bool:
        if not self.recording:
            return False
        if next(self._count) < self.max_events:
            return True
        self.full = True
        return False

    def on_push(self, opr: Opr) -> None:
        if self.recording and opr.info is not INTERNAL:
            # Every op's push: when, and which thread's records (the pusher is named by its
            # records, not its thread ident: Linux reuses the ident of a finished thread). A push
            # inside a custom op's Python also keeps its invocation and the user's line that made it.
            # A plain tuple, its fields in build's NOTE_* order (ts, records, invocation, site).
            try:
                rec = self._local.rec
            except AttributeError:
                rec = self._register()
            inv = thread_state.invocation
            if inv is None:
                opr.prof = (self.clock(), rec.index, None, None)
            else:
                opr.prof = (self.clock(), rec.index, inv, _site(3) if opr.info is None else None)

    def run(self, opr: Opr, fn: Callable[..., Any], *args: Any) -> None:
        prof = opr.prof
        if prof is None:  # pushed before recording started, or internal
            fn(*args)
            return
        clock = self.clock
        t0 = clock()
        info = opr.info
        if opr.is_async and type(info) is CustomOpInfo and info.part is _INVOCATION:
            # A custom op's own engine op: recorded before it runs. It only hands its Python to the
            # custom-op pool, and the whole invocation can finish on other threads (the profile
            # stop, too) before this thread would get back here. Its start is what the parent uses.
            self._record(opr, prof, t0, t0)
            fn(*args)
            return
        try:
            fn(*args)
        finally:
            t1 = clock()
            # The push's note, unpacked in build's NOTE_* order: as fast as indexing it with
            # literals, where a named index (a global) costs ~2 ns more a read, three a span.
            push_ts, pusher, pushed_in, _ = prof
            if info is None and pushed_in is None and self.recording:
                # A plain op, recorded here rather than in _record: one frame less (0.1 µs a span).
                # Its record is a plain tuple, in build's order (T0, T1, NAME, SEQ, PUSH ... WRITES).
                if next(self._count) < self.max_events:
                    try:
                        rec = self._local.rec
                    except AttributeError:
                        rec = self._register()
                    r, w = opr.reads, opr.writes
                    rec.plain.append(
                        (
                            t0,
                            t1,
                            opr.name,
                            opr.seq,
                            push_ts,
                            pusher,
                            opr.ready_ns,
                            opr.by,
                            opr.by_var,
                            r[0].id if len(r) == 1 else tuple(map(_VAR_ID, r)),
                            w[0].id if len(w) == 1 else tuple(map(_VAR_ID, w)),
                        )
                    )
                else:
                    self.full = True
            else:
                self._record(opr, prof, t0, t1)

    def run_pushed(
        self, name: str, seq: int, reads: tuple[Var, ...], writes: tuple[Var, ...], fn: Callable[..., Any], *args: Any
    ) -> None:
        # The naive engine's plain op: its push and its start are one instant on one thread, so
        # one clock read and one frame serve both (on_push + run: two frames, three reads, an Opr).
        if not self.recording:  # paused: the op runs bare (on_push and run would note nothing)
            fn(*args)
            return
        if thread_state.invocation is not None:
            EngineObserver.run_pushed(self, name, seq, reads, writes, fn, *args)
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
                        rec = self._local.rec
                    except AttributeError:
                        rec = self._register()
                    rec.plain.append(
                        (
                            t0,
                            t1,
                            name,
                            seq,
                            t0,
                            rec.index,
                            0,
                            0,
                            0,
                            reads[0].id if len(reads) == 1 else tuple(map(_VAR_ID, reads)),
                            writes[0].id if len(writes) == 1 else tuple(map(_VAR_ID, writes)),
                        )
                    )
                else:
                    self.full = True

    def _record(self, opr: Opr, prof: Any, t0: int, t1: int) -> None:
        """Keep one op's span and edges (see :meth:`run`)."""
        if self.recording:
            if next(self._count) < self.max_events:
                try:
                    rec = self._local.rec
                except AttributeError:
                    rec = self._register()
                seq = opr.seq
                info = opr.info
                push_ts, pusher, pushed_in, site = prof  # the push's note, in build's NOTE_* order
                # With each op its edges: push, ready, what made it ready, and the ids of the
                # vars it touched. Only numbers (and the site's str/int pair): a record holding
                # objects stays tracked by the garbage collector, whose passes over a growing
                # profile then cost more than the record itself.
                r, w = opr.reads, opr.writes
                reads = r[0].id if len(r) == 1 else tuple(map(_VAR_ID, r))
                writes = w[0].id if len(w) == 1 else tuple(map(_VAR_ID, w))
                if info is None and pushed_in is None:  # a plain op: one record holds it all
                    rec.plain.append((t0, t1, opr.name, seq, push_ts, pusher, opr.ready_ns, opr.by, opr.by_var, reads, writes))
                else:
                    if info is None:  # pushed inside a custom op's Python: prof is its push
                        rec.sub.append((t0, t1, opr.name, seq, prof))
                    elif type(info) is CustomOpInfo:  # a custom op's own engine op, or its completion
                        kind = START if info.part is _INVOCATION else DUMMY
                        rec.fam.append((kind, t0, t1, info.invocation, seq))
                    else:  # an info outside OprInfo's kinds (INTERNAL ops are never recorded): an op span
                        rec.buf.append((OP, t0, t1, opr.name, info, pushed_in, seq))
                    rec.deps.append((seq, push_ts, pusher, opr.ready_ns, opr.by, opr.by_var, reads, writes, site))
            else:
                self.full = True

    def on_wait(self, name: str, t0: int, t1: int, by: int = 0, var: int = 0) -> None:
        if self._admit():
            inv = current_invocation()
            # Past wait_for_var and its wrapper. Every wait keeps its line, a program's too (a wait
            # blocks, so the few µs of the walk are small beside it): where a program that held
            # the GIL between its ops was in its code (analysis.gil.code_between).
            site = _site(4)
            self._buf().append((WAIT_REC, t0, t1, name, inv, None, (by, var, site)))

    def on_python(self, inv: Invocation, t0: int, t1: int, cpu_ns: int = -1, numpy_peak: int = -1) -> None:
        # Takes no slot under the cap (its family's Dummy_Wait, recorded after it, may still fit),
        # but once the cap is reached the family is incomplete anyway: keeping it would let memory
        # grow with every custom-op call.
        if self.recording and not self.full:
            self._fam().append((PYTHON, t0, t1, inv, cpu_ns))
        if numpy_peak >= 0:
            self.note_numpy_peak(inv, numpy_peak, t0)

    def note_numpy_peak(self, inv: Invocation, peak: int, t0: int) -> None:
        """Invocation ``inv``'s Python, started at ``t0`` (what ``on_python`` was told), allocated at
        most ``peak`` bytes of NumPy data itself (above what was live when it started); kept on that
        Python's span (``SpanTable.numpy_peak``), which the build finds by its start."""
        if self.recording and not self.full:
            self._numpy_peaks[inv.id] = (t0, peak)

    def on_error(self, inv: Invocation, error: BaseException) -> None:
        if not self.full:
            buf = self._buf()
            buf.append((ERROR, 0, 0, f"{type(error).__name__}: {error}", inv, None, None))

    def on_user_span(self, name: str, cat: str, t0: int, t1: int) -> None:
        """A span the user marked (``mx.profiler.Task``/``Frame``/``Event``)."""
        if self._admit():
            buf = self._buf()
            buf.append((USER, t0, t1, name, cat, None, None))

    def _on_collection(self, t0: int, t1: int, name: str) -> None:
        """A garbage collection ran on this thread (:mod:`.gcpause`): a span, the thread registered
        if it had recorded nothing yet (a custom op's Python, whose first record comes at its end).
        No slot of the cap (``max_events`` bounds the engine's records; collections of a
        millisecond or more are a few a second at most), so that a collection changes no count of
        dropped events; none once the cap is reached. Only counted: one inside this thread's
        registration (its allocations; registered again from here, the thread had two lanes), and
        one on a thread that ``threading`` does not list yet (a thread's start allocates before
        it is listed: ``current_thread()`` then named the lane "Dummy-1", and took a lock the
        start may hold)."""
        local = self._local
        buf = getattr(local, "buf", None)
        if buf is None and (getattr(local, "registering", False) or threading.get_ident() not in _THREADS_STARTED):
            return
        if not self.recording or self.full:
            return
        if buf is None:
            buf = self._register().buf
        buf.append((USER, t0, t1, name, GC_CATEGORY, None, None))

    def on_held_back(self, t0: int, t1: int, pending: int) -> None:
        """The engine's back-pressure held a push: a span on the pushing thread, so that the time
        is not left unexplained between its pushes (:data:`BACKPRESSURE`)."""
        self.on_user_span(BACKPRESSURE, ENGINE_CATEGORY, t0, t1)

    def on_instant(self, name: str, cat: str, ts: int) -> None:
        if self._admit():
            buf = self._buf()
            buf.append((INSTANT, ts, ts, name, cat, None, None))

    def on_counter(self, name: str, ts: int, value: float) -> None:
        if self._admit():
            buf = self._buf()
            buf.append((COUNTER, ts, ts, name, value, None, None))

    def thread_records(self) -> list[ThreadRecords]:
        """Every recording thread's lists so far, in the order they first recorded (a live view reads
        their tails: :class:`~.live.LiveFeed`)."""
        with self._lock:
            return list(self._buffers)

    def recorded_any(self) -> bool:
        """Whether a thread recorded anything but garbage collections: a Dask client whose engine
        ran nothing had collections of the suite's heap recorded, was then stopped with a final
        wait, and that wait, ending after every worker's work, started the critical path."""
        return any(
            r.plain or r.sub or r.fam or any(e[0] != USER or e[4] != GC_CATEGORY for e in r.buf) for r in self.thread_records()
        )

    @property
    def events(self) -> int:
        return sum(len(r) for r in self._buffers)

    # ------------------------------------------------------------------ building the trace
    def release(self) -> None:
        """Empty every thread's records once the final trace is built (:meth:`ThreadRecords.release`):
        their memory goes to the next recording. Nothing can be built from this recorder after. Not
        while a live feed reads them (:attr:`watched`)."""
        if self.watched:
            return
        with self._lock:
            buffers = list(self._buffers)
        for b in buffers:
            b.release()
        if self.memory is not None:
            self.memory.release()

    def build(self, metadata: dict[str, Any] | None = None, *, live: bool = False) -> Trace:
        """Turn the raw records into a validated-shape :class:`Trace` (call after the work is done).

        ``live``: while recording goes on (``mx.profiler.dumps()`` and ``dump(False)`` while
        running): each thread's records as they are now; families not finished yet are left out.
        """
        with self._lock:
            buffers = sorted(self._buffers, key=lambda b: _thread_order(b.name))
        if live:  # threads append as we read: a copy of each list is consistent
            buffers = [b.copy() for b in buffers]
        threads = [ThreadInfo(i + 1, b.name) for i, b in enumerate(buffers)]
        # The GIL's evidence once the recording stopped (a live build reads none: still sampling).
        states = None
        native = {b.native_id: i + 1 for i, b in enumerate(buffers)}
        # The final build's NumPy data through the recycling handler: its large blocks are kept for
        # the next build, where malloc maps them fresh and each page's first write faults (~1.8 µs):
        # 1,767 faults, ~3 ms of a 20,000-span stop()'s 9; 819 a 2,000-call custom-op build's in
        # the benchmark's process (its record arrays are several columns a block: 880 KB for 10,000
        # plain records). Whether malloc keeps such pages itself depends on the heap's history; the
        # handler's own cost is ~10 ns an allocation (a 2,000-call build where malloc did keep them:
        # 10.2 ms without it, 10.5 against).
        with _npmem.recycling() if not live else contextlib.nullcontext():
            if not live:
                states = self.gil.thread_states(threads, native, self.t_start, self.t_stop)
            built = build_columns(buffers)
        dropped = max(0, self._attempts() - self.max_events)  # attempts past the cap
        meta = {
            "clock": "perf_counter_ns",
            "t_start_ns": self.t_start,
            "t_stop_ns": self.t_stop,
            "max_events": self.max_events,
            "dropped_events": dropped,
            "incomplete_invocations": built.incomplete,
            "engine": getattr(self.engine, "kind", None),
            # The pools' sizes, which a what-if replay starts from (None for the naive engine).
            ENGINE_POOL.size_key: getattr(self.engine, "workers", None),
            CUSTOM_POOL.size_key: getattr(self.engine, "custom_workers", None),
            # Where it holds a pushing program back (None: never, as the naive engine).
            MAX_PENDING_KEY: m if isinstance(m := getattr(self.engine, "max_pending", None), int) else None,
            # The CPUs it could run on: a what-if's run cannot do its CPU work faster than on them.
            CPUS_KEY: len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
            "producer": "opprof",
            # Which recorder made it: "compiled" (plain ops in C) or "python" (and why not compiled).
            "recorder": {"path": self.path, **({"why_not": COMPILED_WHY_NOT} if self.path != "compiled" else {})},
            # The GIL's switch interval (s) while recording: a what-if replay's GIL hands over at it.
            "switch_interval": sys.getswitchinterval(),
            # Engines switched to while recording (the recording followed each): "engine" is the last.
            **({"engine_switches": [{"t_ns": t, "engine": kind} for t, kind in self.switches]} if self.switches else {}),
            **self.gil.metadata(),
            **self.gc.metadata(),
            **(self.cpu_wait.metadata(native) if not live else {}),
            **(self.memory.metadata() if self.memory is not None else {}),
        }
        if self.memory is not None:
            # NumPy temporaries: measured per invocation where _npmem is in use (a copy: live builds),
            # each kept on its Python's span (the span table's numpy_peak column).
            _numpy_peaks_onto(built.spans, list(self._numpy_peaks.values()))
            seen = {"python": _NUMPY_SEEN}
            unseen = {"python": f"{PYTHON_UNSEEN} ({_npmem.WHY_NOT})"}
            meta[MEMORY_METADATA] = {**meta[MEMORY_METADATA], **(seen if _npmem.AVAILABLE else unseen)}
        if metadata:
            meta.update(metadata)
        b = built
        return Trace(
            threads=threads,
            spans=b.spans,
            flows=b.flows,
            instants=b.instants,
            counters=b.counters,
            metadata=meta,
            ops=b.ops,
            thread_states=states,
            memory=self.memory.table() if self.memory is not None else None,
        )


#: ``metadata["memory"]["python"]`` where :mod:`.npmem` measures NumPy temporaries.
_NUMPY_SEEN = (
    "NDArrays, and per custom-op invocation the peak bytes of NumPy data its Python allocated itself "
    "(temporaries: each Python span's numpy_peak; on the naive engine its sub-ops' outputs too); "
    "arrays made before the profile are not counted"
)


def _numpy_peaks_onto(spans: SpanTable, peaks: list[tuple[int, int]]) -> None:
    """Set ``spans.numpy_peak`` of each Python span from ``(t0 of its Python, peak)`` pairs: each
    invocation has one Python span, starting at that t0 (invocations dropped at the cap or
    unfinished have none, and their peaks go)."""
    if not peaks:
        return
    py = np.flatnonzero(spans.role == ROLE_CODE[Role.PYTHON])
    row = dict(zip(spans.start[py].tolist(), py.tolist(), strict=True))
    column = np.full(len(spans), -1, dtype=np.int64)
    for t0, peak in peaks:
        k = row.get(t0)
        if k is not None:
            column[k] = peak
    spans.numpy_peak = column


def _thread_order(name: str) -> tuple[int, int, str]:
    """Main thread first, then engine workers, then custom-op workers, each in number order."""
    for rank, prefix in enumerate(("MainThread", ENGINE_THREAD_PREFIX, CUSTOM_THREAD_PREFIX), start=0):
        if name.startswith(prefix):
            tail = name[len(prefix) :]
            return (rank, int(tail) if tail.isdigit() else 0, name)
    return (3, 0, name)


#: The contract between this module and ``_spanlog.c`` (the hooks' arguments, ``Hot``'s): raised
#: with every change of it on both sides, so that a compiled part left from an older install (a
#: build that failed quietly keeps the old one) is not used but said, rather than failing a profile.
SPANLOG_API = 8


def compiled_mismatch(module: Any) -> str:
    """Why a compiled ``_spanlog`` cannot serve this recorder ("" where it can): another contract
    (:data:`SPANLOG_API`) or records of other shapes than :mod:`.build` reads."""
    name = getattr(module, "__name__", "opprof.profiler._spanlog")
    api = getattr(module, "API", 1)
    if api != SPANLOG_API:
        return f"{name} is of another opprof (its hooks' contract {api}, this one's {SPANLOG_API}): reinstall opprof"
    schemas = tuple(getattr(module, k, None) for k in ("PLAIN_SCHEMA", "SUB_SCHEMA", "FAM_SCHEMA", "DEPS_SCHEMA"))
    if schemas != (PLAIN_SCHEMA, SUB_SCHEMA, FAM_SCHEMA, DEPS_SCHEMA):
        return f"{name} writes records of other shapes than opprof.profiler.build reads: reinstall opprof"
    return ""


_spanlog, _why_not = load_compiled("_spanlog", 11 * 8, package="opprof.profiler")
if _spanlog is not None and (_mismatch := compiled_mismatch(_spanlog)):
    _spanlog, _why_not = None, _mismatch
if _spanlog is not None:
    _spanlog.bind(Opr, Var, ThreadRecords, CustomOpInfo, _INVOCATION, (START, DUMMY, PYTHON))
#: Why plain ops are recorded in Python here ("" where the compiled hot path is in use).
COMPILED_WHY_NOT: str = _why_not


class _CompiledRecorder(Recorder):
    """The recorder with its hot path in C (:mod:`opprof.profiler._spanlog`): the engine calls the C
    ``on_push``/``run``/``run_pushed``/``on_python``/``on_ready`` directly (instance attributes, found before
    the class's methods). Every push's note is made in C; a plain op's span is one fixed-size
    record in the thread's log; a sub-op's, a custom op's own ops' and its Python's records are
    the same tuples :class:`Recorder` appends, appended from C; anything else goes to
    :class:`Recorder`'s own methods. The pause flag, the cap's count and ``full`` live in the C
    object, shared by both lanes."""

    path = "compiled"

    def _start_counting(self) -> None:
        assert _spanlog is not None
        hot = _spanlog.Hot(
            max_events=self.max_events,
            register=self._records,
            run=Recorder.run.__get__(self),
            not_user=_sites.NOT_USER,
            thread_state=thread_state,
            internal=INTERNAL,
            numpy_peaks=self._numpy_peaks,
        )
        # The engine calls ``hot`` itself (:attr:`hot_path`): a C object, its hooks C methods found on
        # its type, where an instance attribute of this object cost a dict lookup a call.
        hot.reports_to, hot.clock, hot.numpy_memory = self, self.clock, self.numpy_memory
        self._hot = hot
        self._count = hot  # next(self._count) takes a slot in C, as next(itertools.count()) does
        self.on_push = hot.on_push  # type: ignore[method-assign]
        self.run = hot.run  # type: ignore[method-assign]
        self.run_pushed = hot.run_pushed  # type: ignore[method-assign]
        self.on_python = hot.on_python  # type: ignore[method-assign]
        self.on_ready = hot.on_ready  # type: ignore[method-assign]

    @property
    def hot_path(self) -> EngineObserver:
        """What the engine calls: the C object (``_spanlog.Hot``), which hands the rare hooks
        (``on_wait``, ``on_held_back``, ``on_error``, ``follow``) to this recorder."""
        return self._hot

    @property
    def recording(self) -> bool:
        return bool(self._hot.recording)

    @recording.setter
    def recording(self, value: bool) -> None:
        self._hot.recording = int(bool(value))

    @property
    def full(self) -> bool:
        return bool(self._hot.full)

    @full.setter
    def full(self, value: bool) -> None:
        self._hot.full = int(bool(value))

    def _attempts(self) -> int:
        return int(self._hot.count)

    def _new_records(self, lists: ThreadRecords) -> None:
        assert _spanlog is not None
        hot = self._hot
        lists.plain, lists.sub = _spanlog.Log(hot, PLAIN_SCHEMA), _spanlog.Log(hot, SUB_SCHEMA)
        lists.fam, lists.deps = _spanlog.Log(hot, FAM_SCHEMA), _spanlog.Log(hot, DEPS_SCHEMA)
