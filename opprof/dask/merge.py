"""The workers' records merged into one :class:`~opprof.trace.Trace` on the client.

Each worker is a process (``pid`` 1, 2, ... in the order the workers were first heard from; the
client is 0) with its threads as lanes: a lane is (process, thread name), so a worker's Dask
thread that ran tasks and also pushed engine ops is one lane, and a thread id is unique in the
whole trace. Every time is mapped onto the client's clock (the worker's offset from :mod:`.clock`).

Tasks become spans named by their key's prefix (category ``dask``, the full key in args, an
error's text too); Dask's other phases (``transfer``, ``disk-read``) go on a lane of their own per
worker, as they run on its event loop, not on a task thread. Each task's inputs become **flows**
from the task that made them (wherever it ran) to the task's start: the edges the critical path
and the widget follow across the cluster. The engine's records inside tasks keep everything but
the engine's op table, whose op ids are per process; the analyses that need it fall back to the
spans and flows (the critical path says it is then approximate).

Built from columns, with one Python loop over the tasks only where a dict is needed (their args,
and keys that are some task's input): 1,000,000 tasks merge in about a second (see the Dask rows
of ``python -m benchmarks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..trace import ThreadInfo, Trace
from ..trace.columns import FlowTable, SpanTable, StringTable
from ..trace.critical import EDGES_MISSING
from ..trace.records import CounterSample, Instant
from .clock import ClockEstimate
from .worker import Reply, TaskChunk

__all__ = ["DASK_CATEGORY", "WorkerRecords", "merge"]

DASK_CATEGORY = "dask"
DEPENDENCY = "dask dependency"
_I64 = np.int64


@dataclass
class WorkerRecords:
    """What the client has received from one worker (its replies, in order) and what it knows of it."""

    address: str
    name: str = ""
    pid: int = 0  # the worker's own OS pid
    chunks: list[TaskChunk] = field(default_factory=list)
    segments: list[Trace] = field(default_factory=list)
    sent: int = 0
    overflow: int = 0
    clock: ClockEstimate | None = None
    gone: str | None = None  # why it stopped answering (died, restarted), None while it answers
    engine_pending: bool = False  # its last reply said the engine held unsent records
    problems: list[str] = field(default_factory=list)

    def add(self, reply: Reply) -> None:
        self.name, self.pid = reply.name, reply.pid
        if len(reply.tasks):
            self.chunks.append(reply.tasks)
        if reply.engine is not None and reply.engine.n_spans:
            self.segments.append(reply.engine)
        self.sent, self.overflow, self.engine_pending = reply.sent, reply.overflow, reply.engine_pending
        self.problems.extend(reply.problems)

    @property
    def received(self) -> int:
        return sum(len(c) for c in self.chunks)


class _Lanes:
    """(process, thread name) -> a tid unique in the merged trace, and its ThreadInfo."""

    def __init__(self, first_tid: int) -> None:
        self.next = first_tid
        self.tids: dict[tuple[int, str], int] = {}
        self.threads: list[ThreadInfo] = []

    def tid(self, pid: int, name: str) -> int:
        t = self.tids.get((pid, name))
        if t is None:
            t = self.tids[pid, name] = self.next
            self.next += 1
            self.threads.append(ThreadInfo(t, name, pid))
        return t

    def tids_of(self, pid: int, names: list[str]) -> np.ndarray:
        uniq, inverse = np.unique(np.array(names, dtype=object), return_inverse=True)
        codes = np.array([self.tid(pid, str(n)) for n in uniq.tolist()], dtype=_I64)
        return codes[inverse.ravel()]


def _task_table(pid: int, chunks: list[TaskChunk], shift: int, lanes: _Lanes) -> tuple[SpanTable, list[str], np.ndarray]:
    """The tasks' spans (and, for the flows, their keys and each one's deps offsets)."""
    keys = [k for c in chunks for k in c.keys]
    n = len(keys)
    tid = lanes.tids_of(pid, [t for c in chunks for t in c.threads]) if n else np.zeros(0, _I64)
    start = np.concatenate([c.start for c in chunks]) - shift if n else np.zeros(0, _I64)
    end = np.concatenate([c.stop for c in chunks]) - shift if n else np.zeros(0, _I64)
    args: list[dict[str, Any]] = [{"key": k} for k in keys]
    base = 0
    for c in chunks:
        for i, text in c.errors.items():
            args[base + i]["error"] = text
        base += len(c)
    table = _dask_spans(start, end, tid, [p for c in chunks for p in c.prefixes], args)
    return table, keys, tid


def _phase_table(pid: int, chunks: list[TaskChunk], keys: list[str], shift: int, lanes: _Lanes) -> SpanTable:
    actions = [a for c in chunks for a in c.phase_action]
    m = len(actions)
    if not m:
        return SpanTable.empty()
    base = np.cumsum([0] + [len(c) for c in chunks])[:-1]
    task = np.concatenate([c.phase_task + b for c, b in zip(chunks, base.tolist(), strict=True)])
    sources = [s for c in chunks for s in c.phase_source]
    # A lane per kind of phase ("dask transfer", "dask disk-read"): they overlap one another.
    tid = lanes.tids_of(pid, [f"dask {a}" for a in actions])
    args = [
        {"key": keys[t], "from": s} if s else {"key": keys[t]}
        for t, s in zip(task.tolist(), sources, strict=True)
    ]
    start = np.concatenate([c.phase_start for c in chunks]) - shift
    return _dask_spans(start, np.concatenate([c.phase_stop for c in chunks]) - shift, tid, actions, args)


def _dask_spans(start: np.ndarray, end: np.ndarray, tid: np.ndarray, names: list[str], args: list[dict[str, Any]]) -> SpanTable:
    """Spans of category ``dask`` outside any custom op, each with its args (built as columns:
    ``SpanTable.from_rows`` would look in every args dict for custom-op fields)."""
    n = len(names)
    st = StringTable([DASK_CATEGORY])
    return SpanTable(
        strings=st.strings,
        start=start.astype(_I64),
        end=end.astype(_I64),
        tid=tid,
        name=st.codes(names),
        cat=np.zeros(n, np.int32),
        role=np.zeros(n, np.int8),
        inv=np.full(n, -1, _I64),
        op_type=np.full(n, -1, np.int32),
        backward=np.full(n, -1, np.int8),
        args_at=np.arange(n, dtype=_I64),
        args=args,
    )


def _segment(
    pid: int, seg: Trace, shift: int, inv_base: int, lanes: _Lanes
) -> tuple[SpanTable, FlowTable, list[Instant], int]:
    """One engine segment of a worker, on the merged lanes and clock (its invocations renumbered
    from ``inv_base``: ids are per process, and a trace's must be unique)."""
    t = seg.table
    names = seg.thread_names()
    tids = sorted({int(x) for x in np.unique(t.tid).tolist()} | {th.tid for th in seg.threads})
    lut = {old: lanes.tid(pid, names.get(old, f"thread {old}")) for old in tids}
    keys = np.array(sorted(lut), dtype=_I64)
    vals = np.array([lut[k] for k in keys.tolist()], dtype=_I64)

    def remap(col: np.ndarray) -> np.ndarray:
        return vals[np.searchsorted(keys, col)] if len(col) else col.astype(_I64)

    inv = np.where(t.inv >= 0, t.inv + inv_base, -1)
    next_base = int(inv.max()) + 1 if len(inv) and bool(np.any(t.inv >= 0)) else inv_base
    table = replace(t, start=t.start - shift, end=t.end - shift, tid=remap(t.tid), inv=inv, op=_no_ops(t))
    f = seg.flow_table
    flows = replace(f, src_tid=remap(f.src_tid), src_ts=f.src_ts - shift, dst_tid=remap(f.dst_tid), dst_ts=f.dst_ts - shift)
    instants = [replace(i, tid=lut.get(i.tid, lanes.tid(pid, f"thread {i.tid}")), ts=i.ts - shift) for i in seg.instants]
    return table, flows, instants, max(next_base, inv_base)


def _flows(
    keys: list[str], tid: np.ndarray, start: np.ndarray, end: np.ndarray, deps: list[str], dep_at: np.ndarray
) -> FlowTable:
    """A flow from each task's input's task (its end) to the task (its start), where both were recorded."""
    if not deps:
        return FlowTable.empty()
    wanted = set(deps)
    index = {k: i for i, k in enumerate(keys) if k in wanted}
    src, dst = [], []
    counts = np.diff(dep_at)
    owner = np.repeat(np.arange(len(counts)), counts)
    for dep, used_by in zip(deps, owner.tolist(), strict=True):
        made_by = index.get(dep)
        if made_by is not None:
            src.append(made_by)
            dst.append(used_by)
    if not src:
        return FlowTable.empty()
    s, d = np.array(src, dtype=_I64), np.array(dst, dtype=_I64)
    st = StringTable([DEPENDENCY, DASK_CATEGORY])
    m = len(s)
    return FlowTable(
        st.strings,
        np.arange(1, m + 1, dtype=_I64),
        np.zeros(m, np.int32),
        np.ones(m, np.int32),
        tid[s],
        end[s],
        tid[d],
        start[d],
    )


def _concat_flows(tables: list[FlowTable]) -> FlowTable:
    tables = [f for f in tables if len(f)]
    if not tables:
        return FlowTable.empty()
    st = StringTable()
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("name", "cat", "src_tid", "src_ts", "dst_tid", "dst_ts")}
    for f in tables:
        remap = np.array([st.code(s) for s in f.strings] + [-1], dtype=np.int32)
        cols["name"].append(remap[f.name])
        cols["cat"].append(remap[f.cat])
        for k in ("src_tid", "src_ts", "dst_tid", "dst_ts"):
            cols[k].append(getattr(f, k))
    n = sum(len(f) for f in tables)
    joined = {k: np.concatenate(v) for k, v in cols.items()}
    return FlowTable(st.strings, np.arange(1, n + 1, dtype=_I64), **joined)


def merge(client: Trace | None, workers: list[WorkerRecords], metadata: dict[str, Any] | None = None) -> Trace:
    """One trace of the client's own records (``client``, pid 0) and every worker's (see the module docstring)."""
    tables: list[SpanTable] = []
    flows: list[FlowTable] = []
    instants: list[Instant] = []
    counters: list[CounterSample] = []
    threads: list[ThreadInfo] = []
    processes: dict[int, str] = {}
    if client is not None:
        if client.n_spans:
            tables.append(replace(client.table, op=_no_ops(client.table)))  # op ids: see the module docstring
        flows.append(client.flow_table)
        instants.extend(client.instants)
        counters.extend(client.counters)
        threads = [ThreadInfo(th.tid, th.name, 0) for th in client.threads]
        processes[0] = "client"
    lanes = _Lanes(max((th.tid for th in threads), default=0) + 1)
    inv_base = int(client.table.inv.max()) + 1 if client is not None and client.n_spans else 0
    task_parts: list[tuple[list[str], np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray]] = []
    for k, w in enumerate(workers):
        pid = k + 1
        processes[pid] = f"worker {w.name}" if w.name and w.name != w.address else f"worker {w.address}"
        shift = w.clock.offset_ns if w.clock is not None else 0
        if not w.chunks and not w.segments:
            lanes.tid(pid, "dask tasks")  # an empty lane, so the worker still shows
        if w.chunks:
            table, keys, tid = _task_table(pid, w.chunks, shift, lanes)
            tables.append(table)
            deps = [d for c in w.chunks for d in c.deps]
            at = np.concatenate([[0]] + [c.dep_at[1:] + off for c, off in zip(w.chunks, _dep_offsets(w.chunks), strict=True)])
            task_parts.append((keys, tid, table.start, table.end, deps, at.astype(_I64)))
            phases = _phase_table(pid, w.chunks, keys, shift, lanes)
            if len(phases):
                tables.append(phases)
        for seg in w.segments:
            table, f, inst, inv_base = _segment(pid, seg, shift, inv_base, lanes)
            tables.append(table)
            flows.append(f)
            instants.extend(inst)
            counters.extend(replace(c, ts=c.ts - shift) for c in seg.counters)
    if task_parts:  # dependencies may cross workers: one key space for all
        keys = [k for p in task_parts for k in p[0]]
        tid = np.concatenate([p[1] for p in task_parts])
        start = np.concatenate([p[2] for p in task_parts])
        end = np.concatenate([p[3] for p in task_parts])
        deps = [d for p in task_parts for d in p[4]]
        offsets = np.cumsum([0] + [len(p[4]) for p in task_parts])[:-1]
        dep_at = np.concatenate([[0]] + [p[5][1:] + o for p, o in zip(task_parts, offsets.tolist(), strict=True)])
        flows.append(_flows(keys, tid, start, end, deps, dep_at))
    spans = SpanTable.concat(tables).sorted_by_start() if tables else SpanTable.empty()
    meta = dict(client.metadata) if client is not None else {}
    meta.update(metadata or {})
    meta[EDGES_MISSING] = (
        "a trace merged from a Dask cluster keeps no engine op table (op ids are per worker process); "
        "its flows are the task graph's dependencies"
    )
    trace = Trace(threads + lanes.threads, spans, sorted(instants, key=lambda i: i.ts), counters, _concat_flows(flows), meta)
    trace.processes = processes
    return trace


def _no_ops(t: SpanTable) -> np.ndarray:
    """The ``op`` column of a span table without the engine's op table (see the module docstring)."""
    return np.broadcast_to(_I64(-1), (len(t),))


def _dep_offsets(chunks: list[TaskChunk]) -> list[int]:
    return np.cumsum([0] + [int(c.dep_at[-1]) for c in chunks])[:-1].tolist()
