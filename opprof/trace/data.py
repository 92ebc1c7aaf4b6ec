""":class:`TraceData`: a trace's records, held as columns, with lists of records as a view.

Readers, writers and analyses read :attr:`TraceData.table` and :attr:`TraceData.flow_table` (NumPy
columns, :mod:`.columns`). :attr:`TraceData.spans` and :attr:`TraceData.flows` are the same records
as :class:`~.records.Span` and :class:`~.records.Flow` objects, for users who iterate or edit: the
first access builds the list (about 1 µs and 400 bytes per span) and from then on *the list* is the
trace (edits to it, or to its spans, are what every analysis sees; the columns are rebuilt from it
at each analysis). A trace that is never asked for its list never builds one: the profiler, the
file readers and the timeline do not.

A trace may span several processes (one per Dask worker, merged on the client): each thread's
:attr:`~.records.ThreadInfo.pid` says which, and :attr:`TraceData.processes` names them. Thread ids
stay unique across the whole trace, so every analysis keys threads by tid alone and only the
formats and the timeline look at pids. A trace of one process has pid 0 on every thread and an
empty :attr:`~TraceData.processes`, as every trace had before.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence, Sized
from typing import Any, Generic, TypeVar, cast

import numpy as np

from .columns import FlowTable, SpanTable
from .memory import COLUMNS as MEMORY_COLUMNS
from .memory import MemoryEvents
from .ops import OpTable
from .records import CounterSample, Flow, Instant, Span, ThreadInfo
from .threadstates import ThreadStates

__all__ = ["TraceData"]


C = TypeVar("C", bound=Sized)  # the columns: SpanTable or FlowTable
R = TypeVar("R")  # a row: Span or Flow


class _Held(Generic[C, R]):
    """One kind of record, held as its columns or, once the list is asked for, as that list.

    Spans and flows are held alike (see the module docstring): while ``rows`` is None the columns
    are the records; after :meth:`as_list` the list is, and :meth:`as_columns` rebuilds from it.
    """

    __slots__ = ("columns", "kind", "rows", "to_columns", "to_rows")

    def __init__(self, kind: type[C], to_columns: Callable[[list[R]], C], to_rows: Callable[[C], list[R]]) -> None:
        self.kind, self.to_columns, self.to_rows = kind, to_columns, to_rows
        self.columns: C = to_columns([])
        self.rows: list[R] | None = None

    def set(self, value: Sequence[R] | C | None) -> None:
        if isinstance(value, self.kind):
            self.columns, self.rows = value, None
        elif value is None:
            self.columns, self.rows = self.to_columns([]), None
        else:
            # Kept as given while it is a list the caller may still edit (tests and users do).
            rows = cast("Sequence[R]", value)
            self.columns, self.rows = self.to_columns([]), rows if isinstance(rows, list) else list(rows)

    def as_columns(self) -> C:
        return self.to_columns(self.rows) if self.rows is not None else self.columns

    def as_list(self) -> list[R]:
        if self.rows is None:
            self.rows = self.to_rows(self.columns)
            self.columns = self.to_columns([])  # the list is the records now: free the columns
        return self.rows

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else len(self.columns)


class TraceData:
    """Threads, spans, instants, counters, flows and metadata (see the module docstring)."""

    def __init__(
        self,
        threads: list[ThreadInfo] | None = None,
        spans: Sequence[Span] | SpanTable | None = None,
        instants: list[Instant] | None = None,
        counters: list[CounterSample] | None = None,
        flows: Sequence[Flow] | FlowTable | None = None,
        metadata: dict[str, Any] | None = None,
        ops: OpTable | None = None,
        processes: dict[int, str] | None = None,
        thread_states: ThreadStates | None = None,
        memory: MemoryEvents | None = None,
    ) -> None:
        self.threads: list[ThreadInfo] = threads if threads is not None else []
        #: The engine's side: pushes, ready times, enabling edges, vars (None for other tools' traces).
        self.ops: OpTable | None = ops
        self.instants: list[Instant] = instants if instants is not None else []
        self.counters: list[CounterSample] = counters if counters is not None else []
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}
        #: pid -> the process's display name (``{0: "client", 1: "worker tcp://…"}``); empty for a
        #: trace of one process. A pid without an entry is named by :meth:`process_name`.
        self.processes: dict[int, str] = processes if processes is not None else {}
        #: Each thread's state over time with respect to the GIL (:mod:`.threadstates`); None where
        #: the GIL was not sampled (``metadata["gil"]["why_not"]`` says why).
        self.thread_states: ThreadStates | None = thread_states
        #: Every allocation and free of an array's storage (:mod:`.memory`); None where memory was
        #: not recorded (``metadata["memory"]["why_not"]`` says why, where opprof knows).
        self.memory: MemoryEvents | None = memory
        self._span_store: _Held[SpanTable, Span] = _Held(SpanTable, SpanTable.from_spans, SpanTable.to_spans)
        self._flow_store: _Held[FlowTable, Flow] = _Held(FlowTable, FlowTable.from_flows, FlowTable.to_flows)
        self._names: tuple[int, int, dict[int, str]] | None = None
        #: The analysis kept for these records (:func:`opprof.trace.analysis.analysis_of`).
        self._analysis: object | None = None
        self._span_store.set(spans)
        self._flow_store.set(flows)

    @property
    def ran_inline(self) -> bool:
        """Whether every op ran inline on the thread that pushed it (opprof's naive engine, as
        MXNet's NaiveEngine, for the whole recording): then no time is spent waiting for a
        thread, and what the analyses call "queued" is the engine's own bookkeeping."""
        return self.metadata.get("engine") == "naive" and not self.metadata.get("engine_switches")

    # ------------------------------------------------------------------ spans and flows
    @property
    def table(self) -> SpanTable:
        """The spans as columns (rebuilt from :attr:`spans` once that list has been asked for)."""
        return self._span_store.as_columns()

    @property
    def spans(self) -> list[Span]:
        """The spans as :class:`~.records.Span` objects; from now on this list is the trace."""
        return self._span_store.as_list()

    @spans.setter
    def spans(self, value: Sequence[Span] | SpanTable | None) -> None:
        self._span_store.set(value)

    def set_table(self, table: SpanTable) -> None:
        """Make ``table`` the trace's spans (drops any list view)."""
        self._span_store.set(table)

    @property
    def has_span_list(self) -> bool:
        """Whether :attr:`spans` has been built (then that list is the trace's spans)."""
        return self._span_store.rows is not None

    @property
    def n_spans(self) -> int:
        """How many spans, without building the list view."""
        return len(self._span_store)

    @property
    def flow_table(self) -> FlowTable:
        return self._flow_store.as_columns()

    @property
    def flows(self) -> list[Flow]:
        return self._flow_store.as_list()

    @flows.setter
    def flows(self, value: Sequence[Flow] | FlowTable | None) -> None:
        self._flow_store.set(value)

    @property
    def has_flow_list(self) -> bool:
        return self._flow_store.rows is not None

    @property
    def n_flows(self) -> int:
        return len(self._flow_store)

    # ------------------------------------------------------------------ threads
    def thread_names(self) -> dict[int, str]:
        """tid -> name, built once per thread list (a linear search per lookup was quadratic at 10k threads)."""
        key = (id(self.threads), len(self.threads))
        if self._names is None or self._names[:2] != key:
            self._names = (*key, {t.tid: t.name for t in self.threads})
        return self._names[2]

    def thread_name(self, tid: int) -> str:
        return self.thread_names().get(tid, f"thread {tid}")

    # ------------------------------------------------------------------ processes
    def process_name(self, pid: int) -> str:
        """The display name of process ``pid``: its :attr:`processes` entry, else what Chrome export
        has always called the one process of a trace (``metadata["process_name"]``, "opprof") for
        pid 0, and ``"process N"`` for another."""
        name = self.processes.get(pid)
        if name is not None:
            return name
        return str(self.metadata.get("process_name", "opprof")) if pid == 0 else f"process {pid}"

    def process_ids(self) -> list[int]:
        """The pids of the trace's threads and of its named processes, ascending ([0] when it has
        neither: a trace of no threads is still one process)."""
        return sorted({t.pid for t in self.threads} | set(self.processes)) or [0]

    def pids_of(self, tids: np.ndarray) -> np.ndarray:
        """The pid of each thread id in ``tids`` (int64; 0 for a tid the trace does not list):
        for writers that put a pid on each of a million events."""
        tids = np.asarray(tids, dtype=np.int64)
        known = np.array([t.tid for t in self.threads], dtype=np.int64)
        pids = np.array([t.pid for t in self.threads], dtype=np.int64)
        if not len(known) or not pids.any():
            return np.zeros(len(tids), dtype=np.int64)
        order = np.argsort(known, kind="stable")
        known, pids = known[order], pids[order]
        at = np.minimum(np.searchsorted(known, tids), len(known) - 1)
        return np.where(known[at] == tids, pids[at], 0)

    def families(self) -> dict[int, list[Span]]:
        """Spans of each custom-op invocation, keyed by invocation id (parent included).

        The spans of the list view when there is one (so edits to them are edits to the trace).
        """
        rows = self._span_store.rows
        if rows is not None:
            groups: dict[int, list[Span]] = defaultdict(list)
            for s in rows:
                inv = s.invocation
                if inv is not None:
                    groups[inv].append(s)
            return dict(groups)
        t = self.table
        idx = np.flatnonzero(t.inv >= 0)
        fam: dict[int, list[Span]] = defaultdict(list)
        for inv, s in zip(t.inv[idx].tolist(), t.take(idx).to_spans(), strict=True):
            fam[inv].append(s)
        return dict(fam)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TraceData):
            return NotImplemented
        return (
            self.threads == other.threads
            and self.spans_equal(other)
            and self.instants == other.instants
            and self.counters == other.counters
            and self.flows_equal(other)
            and self.metadata == other.metadata
            and self.processes == other.processes
            and _same_states(self.thread_states, other.thread_states)
            and _same_memory(self.memory, other.memory)
        )

    __hash__ = None  # type: ignore[assignment]

    def spans_equal(self, other: TraceData) -> bool:
        """The same spans in the same order (compared as columns, then by their args)."""
        a, b = self.table, other.table
        if len(a) != len(b):
            return False
        for col in ("start", "end", "tid", "role", "inv", "backward"):
            if not np.array_equal(getattr(a, col), getattr(b, col)):
                return False
        for col in ("name", "cat", "op_type"):
            if a.strs(getattr(a, col)).tolist() != b.strs(getattr(b, col)).tolist():
                return False
        return a.all_args() == b.all_args()

    def flows_equal(self, other: TraceData) -> bool:
        return self.flow_table.to_flows() == other.flow_table.to_flows()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.n_spans} spans on {len(self.threads)} threads, {self.n_flows} flows)"


def _same_states(a: ThreadStates | None, b: ThreadStates | None) -> bool:
    if a is None or b is None:
        return a is b
    cols = ("tid", "state", "start", "end", "holder")
    return a.period_ns == b.period_ns and all(np.array_equal(getattr(a, c), getattr(b, c)) for c in cols)


def _same_memory(a: MemoryEvents | None, b: MemoryEvents | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.sites == b.sites and all(np.array_equal(getattr(a, c), getattr(b, c)) for c in MEMORY_COLUMNS)
