"""The worker's half: a Dask ``WorkerPlugin`` that records each task the worker runs and profiles
the worker process's own opprof engine, and hands its records to the client in chunks.

Why a plugin and not Dask's task stream: the task stream keeps at most 100,000 tasks
(dask/distributed#4773) and no dependency edges. The plugin's ``transition`` hook sees each task
leave ``executing`` on the worker's event loop; it appends one tuple (start and stop of its
compute, the thread, the keys it depended on, its error) and nothing more, so a trivial task costs
a few µs more. The phases Dask records beside the compute (``transfer`` of its inputs from another
worker, ``disk-read``) come with it.

The client pulls (:func:`drain`, through ``Client.run``, which calls a plain function on the
worker's event loop) every second or so, at most ``max_tasks`` tasks a reply, so a long run never
builds one giant message, and a worker that dies loses only what it had not sent yet.

Inside tasks the worker process's opprof engine is recorded by an ordinary
:class:`~opprof.profiler.Profiler`. Its records are sent as a *segment*: the profiler is stopped,
its trace built and sent, and a new one started, only while no task is executing (a drain runs on
the event loop, where tasks start, so none can start meanwhile): a custom-op call is never cut in
two. A worker busy on one long task sends its engine records when it is next idle, or at the end.

Times: the worker's records are ns on its opprof clock (``perf_counter_ns``, plus an offset a test
injects on purpose); Dask's own stamps (``time()`` plus the scheduler's estimated delay) are mapped
onto it here, where both clocks can be read together. The client maps each worker's clock onto
its own (:mod:`.clock`).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import WorkerPlugin
from distributed.utils import key_split

from ..profiler import Profiler
from ..profiler.memory import MemoryRecording
from ..trace import Trace

__all__ = ["CLOCK_HANDLER", "PLUGIN_NAME", "OpprofWorkerPlugin", "TaskChunk", "drain"]

PLUGIN_NAME = "opprof"


def _installed_version() -> str:
    """opprof's version as installed (read from its metadata: the package's own ``__version__``
    lives in the top package, above this layer)."""
    try:
        return importlib.metadata.version("opprof")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


VERSION = _installed_version()
#: The worker's comm handler the client's clock exchanges call (see :meth:`OpprofWorkerPlugin.setup`).
CLOCK_HANDLER = "opprof_clock"

#: Dask's phases kept beside a task's compute; the rest of ``startstops`` (none today) is ignored.
PHASES = ("transfer", "disk-read", "disk-write", "deserialize")


@dataclass
class TaskChunk:
    """One reply's tasks and phases, as columns (ns on the worker's opprof clock)."""

    keys: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)  # the name of the thread that ran each
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stop: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    errors: dict[int, str] = field(default_factory=dict)  # task index -> its exception, as text
    dep_at: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # offsets into deps
    deps: list[str] = field(default_factory=list)  # keys of the tasks each one's inputs came from
    phase_task: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # index of its task
    phase_action: list[str] = field(default_factory=list)
    phase_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    phase_stop: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    phase_source: list[str] = field(default_factory=list)  # the worker a transfer came from, else ""

    def __len__(self) -> int:
        return len(self.keys)


@dataclass
class Reply:
    """What one :func:`drain` returns for one worker."""

    address: str
    name: str
    pid: int
    seq: int
    tasks: TaskChunk
    engine: Trace | None  # a segment of the engine's records (None: none this time)
    more: bool  # tasks left for the next drain (this one hit ``max_tasks``)
    sent: int  # tasks sent so far, this reply's included
    overflow: int  # tasks not recorded: past ``max_events``
    engine_pending: bool  # the engine profiler holds records not yet sent (a task was running)
    problems: list[str] = field(default_factory=list)


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else str(key)


class OpprofWorkerPlugin(WorkerPlugin):
    """Records tasks and the engine on each worker (see the module docstring).

    Only plain values are set in ``__init__``: Dask pickles the plugin to every worker, and the
    worker-side state is made in :meth:`setup`.
    """

    name = PLUGIN_NAME

    def __init__(
        self,
        *,
        max_events: int = 5_000_000,
        client_pid: int | None = None,
        client_host: str | None = None,
        clock_offsets_ns: dict[str, int] | None = None,
        engine: bool = True,
        client_version: str | None = None,
        memory: bool = False,
    ) -> None:
        self.max_events = max_events
        self.memory_wanted = memory
        self.client_version = client_version
        self.client_pid = client_pid
        self.client_host = client_host
        self.clock_offsets_ns = dict(clock_offsets_ns or {})
        self.engine = engine

    # ------------------------------------------------------------------ worker side
    def setup(self, worker: Any) -> None:
        self.worker = worker
        offset = int(self.clock_offsets_ns.get(str(worker.name), self.clock_offsets_ns.get(worker.address, 0)))
        self.offset_ns = offset
        self.clock = (lambda: time.perf_counter_ns() + offset) if offset else time.perf_counter_ns
        self.tasks: list[tuple[Any, ...]] = []
        self.delays: dict[Any, float] = {}  # executing task -> the scheduler delay it started with
        self.recorded = 0
        self.sent = 0
        self.overflow = 0
        self.seq = 0
        self.problems: list[str] = []
        if self.client_version is not None and self.client_version != VERSION:
            # Records of another release may not merge as this one's client expects: said, not refused.
            self.problems.append(f"worker {worker.name} runs opprof {VERSION}, the client {self.client_version}")
        self.profiler: Profiler | None = None
        # A worker in the client's own process (``processes=False``) shares the client's engine,
        # which the client records itself: recording it here too would draw every op twice.
        same_process = os.getpid() == self.client_pid and os.uname().nodename == self.client_host
        #: Each NDArray's storage, recorded for the whole session (not per segment: an array made in
        #: one segment and freed in the next would lose its free), shipped with each segment.
        self.memory: MemoryRecording | None = None
        self.memory_sent = 0
        if self.engine and not same_process:
            self.profiler = Profiler(self.max_events, clock=self.clock).start()
            if self.memory_wanted:
                self.memory = MemoryRecording(self.clock)
                self.memory.start()
        # The clock exchange's own handler: nothing to unpickle before the clock is read, which
        # ``Client.run`` would (its function), and one hop instead of two (no scheduler between):
        # a round trip of ~0.7 ms here instead of ~1.6 ms, and the asymmetry that is the error shrinks with it.
        worker.handlers[CLOCK_HANDLER] = self._clock_handler

    def _clock_handler(self) -> int:
        return int(self.clock())

    def teardown(self, worker: Any) -> None:
        if getattr(worker, "handlers", {}).get(CLOCK_HANDLER) == getattr(self, "_clock_handler", None):
            del worker.handlers[CLOCK_HANDLER]
        prof, self.profiler = getattr(self, "profiler", None), None
        if prof is not None and prof.running:
            try:
                prof.stop(wait=1.0)
            except BaseException:  # the worker is closing: detaching is what matters
                pass
        memory, self.memory = getattr(self, "memory", None), None
        if memory is not None:
            memory.stop()

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        # Called for every transition of every task: return as early as possible.
        if finish == "executing":
            # Dask adds its current estimate of the scheduler's clock offset to the compute stamps;
            # the estimate moves by milliseconds at each heartbeat, so keep the one the task ran with.
            self.delays[key] = self.worker.scheduler_delay
            return
        if start != "executing":
            return
        delay = self.delays.pop(key, self.worker.scheduler_delay)
        if finish != "memory" and finish != "error":  # cancelled, or handed back: no compute to show
            return
        ts = self.worker.state.tasks.get(key)
        if ts is None:
            return
        if self.recorded >= self.max_events:
            self.overflow += 1
            return
        self.recorded += 1
        compute = None
        phases = []
        for ss in ts.startstops:
            action = ss["action"]
            if action == "compute":
                compute = ss
            elif action in PHASES:
                # transfer stamps carry the scheduler's delay, like compute; disk ones do not
                d = delay if action == "transfer" else 0.0
                phases.append((action, ss["start"] - d, ss["stop"] - d, ss.get("source", "")))
        if compute is None:
            return
        error = (ts.exception_text or "error") if finish == "error" else None
        deps = [d.key for d in ts.dependencies] if ts.dependencies else ()
        # Wall-clock seconds onto this worker's opprof clock, read together now: wall time is slewed
        # by NTP (up to 0.5 ms a second), so a pair read at the next drain could be that far off.
        shift = self.clock() - time.time_ns()
        self.tasks.append(
            (key, compute["start"] - delay, compute["stop"] - delay, self.worker.threads.get(key), deps, error, phases, shift)
        )

    def drain(self, max_tasks: int, final: bool) -> Reply:
        """Up to ``max_tasks`` tasks recorded since the last drain, and, when no task is executing
        (or ``final``), the engine's records since the last segment."""
        batch = self.tasks[:max_tasks]
        del self.tasks[:max_tasks]
        self.sent += len(batch)
        self.seq += 1
        engine = None
        pending = False
        prof = self.profiler
        if prof is not None and prof.running:
            idle = not getattr(self.worker.state, "executing", ())
            if final or (idle and prof.recorded_any):
                try:
                    engine = prof.stop(wait=5.0)
                except BaseException as e:  # an op that raised: its trace is still built
                    engine = prof.trace
                    self.problems.append(f"the engine's final wait raised {type(e).__name__}: {e}")
                self.profiler = None if final else Profiler(self.max_events, clock=self.clock).start()
                if engine is not None and self.memory is not None:
                    self._ship_memory(engine, final)
            else:
                pending = prof.recorded_any
        problems, self.problems = self.problems, []
        return Reply(
            address=self.worker.address,
            name=str(self.worker.name),
            pid=os.getpid(),
            seq=self.seq,
            tasks=self._columns(batch),
            engine=engine,
            more=bool(self.tasks),
            sent=self.sent,
            overflow=self.overflow,
            engine_pending=pending,
            problems=problems,
        )

    def _ship_memory(self, engine: Trace, final: bool) -> None:
        """The memory events since the last segment, on this segment (the merge pairs a free with
        its allocation across segments: one process's storages and vars are numbered alike)."""
        memory = self.memory
        assert memory is not None
        if final:
            memory.stop()
            self.memory = None
        engine.memory = memory.table(self.memory_sent)
        self.memory_sent = memory.recorded()
        engine.metadata.update(memory.metadata())

    def _columns(self, batch: list[tuple[Any, ...]]) -> TaskChunk:
        names = {t.ident: _lane_name(t.name) for t in threading.enumerate()}
        c = TaskChunk()
        if not batch:
            return c
        starts, stops, shifts, dep_at = [], [], [], [0]
        p_task, p_start, p_stop, p_shift = [], [], [], []
        for i, (key, t0, t1, ident, deps, error, phases, shift) in enumerate(batch):
            shifts.append(shift)
            c.keys.append(_key_text(key))
            c.prefixes.append(key_split(key))
            c.threads.append(names.get(ident, f"thread {ident}") if ident is not None else "unknown thread")
            starts.append(t0)
            stops.append(t1)
            if error is not None:
                c.errors[i] = str(error)
            c.deps.extend(_key_text(d) for d in deps)
            dep_at.append(len(c.deps))
            for action, a, b, source in phases:
                p_task.append(i)
                c.phase_action.append(action)
                p_start.append(a)
                p_stop.append(b)
                p_shift.append(shift)
                c.phase_source.append(str(source))
        c.start = _ns(starts, shifts)
        c.stop = _ns(stops, shifts)
        c.dep_at = np.array(dep_at, dtype=np.int64)
        c.phase_task = np.array(p_task, dtype=np.int64)
        c.phase_start = _ns(p_start, p_shift)
        c.phase_stop = _ns(p_stop, p_shift)
        return c


_DASK_THREAD = re.compile(r"^(?:.*-)?Dask-(?P<executor>[A-Za-z]+)-Threads-\d+-(?P<n>\d+)$")


def _lane_name(name: str) -> str:
    """A Dask executor thread's name without the worker's name and pid it repeats
    (``0-Dask-Default-Threads-24611-0`` -> ``Dask-Default-0``): the lane already says its worker."""
    m = _DASK_THREAD.match(name)
    return f"Dask-{m['executor']}-{m['n']}" if m else name


def _ns(seconds: list[float], shifts: list[int]) -> np.ndarray:
    """Wall-clock seconds as ns on the worker's opprof clock (``shifts``: clock minus wall, ns)."""
    return np.round(np.array(seconds, dtype=np.float64) * 1e9).astype(np.int64) + np.array(shifts, dtype=np.int64)


# ---------------------------------------------------------------------- called through Client.run
def drain(name: str = PLUGIN_NAME, max_tasks: int = 100_000, final: bool = False, dask_worker: Any = None) -> Reply | None:
    """The worker's next chunk (None when the plugin is not installed there)."""
    plugin = dask_worker.plugins.get(name) if dask_worker is not None else None
    if not isinstance(plugin, OpprofWorkerPlugin) or not hasattr(plugin, "worker"):
        return None
    return plugin.drain(max_tasks, final)
