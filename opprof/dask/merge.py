"""The workers' records merged into one :class:`~opprof.trace.Trace` on the client.

Each worker is a process (``pid`` 1, 2, ... in the order the workers were first heard from; the
client is 0) with its threads as lanes: a lane is (process, thread name), so a worker's Dask
thread that ran tasks and also pushed engine ops is one lane, and a thread id is unique in the
whole trace. Every time is mapped onto the client's clock (the worker's offset from :mod:`.clock`).

Tasks become spans named by their key's prefix (category ``dask``, the full key in args, an
error's text too); Dask's other phases (``transfer``, ``disk-read``) go on a lane of their own per
worker, as they run on its event loop, not on a task thread. Each task's inputs become **flows**
from the task that made them (wherever it ran) to the task's start: the edges the critical path
and the widget follow across the cluster. The engine's records inside tasks keep the engine's op
table too, its ids made unique in the merged trace (op ids, var ids and wait ids are per process),
so the waiting causes of each worker's custom ops are told apart as in a local profile; the
critical path follows threads and the task graph (an engine's walk cannot cross a task), and says so.

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
from ..trace.critical import APPROXIMATE_PATH
from ..trace.ops import WAIT_ID_BASE, OpTable
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
        # A dict lookup per name (StringTable.codes, a loop in C): np.unique on a million strings
        # sorts Python objects, 0.3 s of a 1M-task merge here, for the handful of threads a worker has.
        st = StringTable()
        codes = st.codes(names)
        return np.array([self.tid(pid, n) for n in st.strings], dtype=_I64)[codes]


class _Ids:
    """Engine ids made unique in the merged trace. Op ids (the engine's push count) and var ids are
    per process: each worker's get a base of their own, kept across its segments (a var lives on in
    its process); wait ids count from :data:`WAIT_ID_BASE` in each recording, so each segment's get one."""

    def __init__(self, client_ops: OpTable | None) -> None:
        self.strings = StringTable(client_ops.strings if client_ops is not None else ())
        self.op_next, self.wait_next, self.var_next = 0, 0, 1
        if client_ops is not None and len(client_ops):
            self._grow(client_ops.op, np.concatenate([client_ops.var, client_ops.acc_var]))
        self.op_base, self.wait_base = self.op_next, self.wait_next
        self.vars: dict[int, int] = {}

    def _grow(self, ops: np.ndarray, var: np.ndarray) -> None:
        plain, waits = ops[(ops >= 0) & (ops < WAIT_ID_BASE)], ops[ops >= WAIT_ID_BASE]
        self.op_next = max(self.op_next, int(plain.max()) + 1 if len(plain) else 0)
        self.wait_next = max(self.wait_next, int(waits.max()) - WAIT_ID_BASE + 1 if len(waits) else 0)
        self.var_next = max(self.var_next, int(var.max()) + 1 if len(var) else 1)

    def next_worker(self) -> None:
        self.op_base, self.vars = self.op_next, {}

    def next_segment(self) -> None:
        self.wait_base = self.wait_next

    def op_ids(self, col: np.ndarray) -> np.ndarray:
        out = np.where(col >= WAIT_ID_BASE, col + self.wait_base, np.where(col >= 0, col + self.op_base, -1)).astype(_I64)
        self._grow(out, np.zeros(0, _I64))
        return out

    def var_ids(self, col: np.ndarray) -> np.ndarray:
        if not len(col):
            return col.astype(_I64)
        uniq, inverse = np.unique(col, return_inverse=True)
        new = []
        for v in uniq.tolist():
            if v < 0:
                new.append(v)
                continue
            code = self.vars.get(v)
            if code is None:
                code = self.vars[v] = self.var_next
                self.var_next += 1
            new.append(code)
        return np.array(new, dtype=_I64)[inverse.ravel()]

    def sites(self, col: np.ndarray, strings: list[str]) -> np.ndarray:
        remap = np.array([self.strings.code(x) for x in strings] + [-1], dtype=np.int32)
        return remap[col]


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
    pid: int, seg: Trace, shift: int, inv_base: int, lanes: _Lanes, ids: _Ids
) -> tuple[SpanTable, FlowTable, list[Instant], int, OpTable | None]:
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
    table = replace(t, start=t.start - shift, end=t.end - shift, tid=remap(t.tid), inv=inv, op=ids.op_ids(t.op))
    f = seg.flow_table
    flows = replace(f, src_tid=remap(f.src_tid), src_ts=f.src_ts - shift, dst_tid=remap(f.dst_tid), dst_ts=f.dst_ts - shift)
    instants = [replace(i, tid=lut.get(i.tid, lanes.tid(pid, f"thread {i.tid}")), ts=i.ts - shift) for i in seg.instants]
    ops = None
    if seg.ops is not None and len(seg.ops):
        o = seg.ops
        pusher = np.where(o.pusher > 0, remap(np.where(o.pusher > 0, o.pusher, keys[0] if len(keys) else 0)), 0)
        ops = replace(
            o,
            op=ids.op_ids(o.op),
            push=np.where(o.push >= 0, o.push - shift, -1),
            pusher=pusher,
            ready=np.where(o.ready >= 0, o.ready - shift, -1),
            by=ids.op_ids(o.by),
            var=ids.var_ids(o.var),
            site=ids.sites(o.site, o.strings),
            acc_var=ids.var_ids(o.acc_var),
            strings=ids.strings.strings,
        )
    ids.next_segment()
    return table, flows, instants, max(next_base, inv_base), ops


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
            tables.append(client.table)
        flows.append(client.flow_table)
        instants.extend(client.instants)
        counters.extend(client.counters)
        threads = [ThreadInfo(th.tid, th.name, 0) for th in client.threads]
        processes[0] = "client"
    lanes = _Lanes(max((th.tid for th in threads), default=0) + 1)
    ids = _Ids(client.ops if client is not None else None)
    op_tables: list[OpTable] = [client.ops] if client is not None and client.ops is not None and len(client.ops) else []
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
        ids.next_worker()
        for seg in w.segments:
            table, f, inst, inv_base, ops = _segment(pid, seg, shift, inv_base, lanes, ids)
            if ops is not None:
                op_tables.append(ops)
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
    meta[APPROXIMATE_PATH] = (
        "a Dask cluster's trace: its tasks are no engine ops, so the path follows each thread and the task "
        "graph's dependency arrows (the engine's edges inside each worker still explain its custom ops' waiting)"
    )
    # One string table for the sites: the client's, grown as the workers' were added.
    merged_ops = OpTable.concat([replace(o, strings=ids.strings.strings) for o in op_tables]) if op_tables else None
    trace = Trace(
        threads + lanes.threads,
        spans,
        sorted(instants, key=lambda i: i.ts),
        counters,
        _concat_flows(flows),
        meta,
        merged_ops,
        processes,
    )
    return trace


def _dep_offsets(chunks: list[TaskChunk]) -> list[int]:
    return np.cumsum([0] + [int(c.dep_at[-1]) for c in chunks])[:-1].tolist()
