"""Several traces as one, each in a process of its own: the workers of a Dask cluster merged on the
client (:mod:`opprof.dask.merge`), or two runs side by side on one time axis (:func:`side_by_side`).

What must change for records of different recordings to share a trace, and nothing else:

* **Thread ids** are per recording. A lane is (process, thread name), so the segments of one
  worker's recording (its engine's records, sent a piece at a time) land on the same lanes, and a
  tid is unique in the whole trace.
* **Times** move onto one clock: each part's ``shift_ns`` is subtracted (a worker's clock offset;
  for runs side by side, their starts, so both begin at 0).
* **Invocation ids** are renumbered part by part (a custom-op family is one invocation id).
* **The engine's ids** (:class:`~.ops.OpTable`): op ids (push order) and var ids are per process,
  so parts of one ``group`` (one process) keep one offset and one var map; wait ids count from
  :data:`~.ops.WAIT_ID_BASE` in each recording, so each part gets its own. The sites' strings merge.

Spans a caller builds on the combined lanes (a Dask task's) join through :meth:`Combiner.add_spans`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from typing import Any

import numpy as np

from .columns import FlowTable, SpanTable, StringTable
from .data import TraceData
from .memory import MemoryEvents
from .ops import WAIT_ID_BASE, OpTable
from .records import CounterSample, Instant, ThreadInfo
from .threadstates import CPU_WAIT_METADATA, GIL_METADATA, ThreadStates, cpu_outside_python, cpu_wait_ns
from .trace import Trace

__all__ = ["Combiner", "Lanes"]

_I64 = np.int64


class Lanes:
    """(process, thread name) -> a tid unique in the combined trace, and its ThreadInfo, in first-seen order."""

    def __init__(self) -> None:
        self.next = 1
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
        """The lane of each name (a million of them in a Dask merge: a dict lookup each, in C,
        rather than ``np.unique``, which sorts Python strings: 0.3 s a million here)."""
        st = StringTable()
        codes = st.codes(names)
        return np.array([self.tid(pid, n) for n in st.strings], dtype=_I64)[codes]


class _EngineIds:
    """The engine's ids made unique (see the module docstring)."""

    def __init__(self) -> None:
        self.strings = StringTable()
        self.op_next, self.wait_next, self.var_next = 0, 0, 1
        self.groups: dict[Hashable, tuple[int, dict[int, int]]] = {}  # group -> (op base, var map)

    def remap(self, ops: OpTable, group: Hashable, span_ops: np.ndarray) -> tuple[OpTable, np.ndarray]:
        """``ops`` and a span table's ``op`` column with this part's ids."""
        op_base, var_map = self.groups.setdefault(group, (self.op_next, {}))
        wait_base = self.wait_next

        def op_ids(col: np.ndarray) -> np.ndarray:
            return np.where(col >= WAIT_ID_BASE, col + wait_base, np.where(col >= 0, col + op_base, -1)).astype(_I64)

        new_ops = op_ids(ops.op)
        plain, waits = new_ops[new_ops < WAIT_ID_BASE], new_ops[new_ops >= WAIT_ID_BASE]
        if len(plain):
            self.op_next = max(self.op_next, int(plain.max()) + 1)
        if len(waits):
            self.wait_next = max(self.wait_next, int(waits.max()) - WAIT_ID_BASE + 1)
        remap = np.array([self.strings.code(s) for s in ops.strings] + [-1], dtype=np.int32)
        table = replace(
            ops,
            op=new_ops,
            by=op_ids(ops.by),
            var=self._vars(ops.var, var_map),
            site=remap[ops.site],
            acc_var=self._vars(ops.acc_var, var_map),
        )
        return table, op_ids(span_ops)

    def _vars(self, col: np.ndarray, var_map: dict[int, int]) -> np.ndarray:
        if not len(col):
            return col.astype(_I64)
        uniq, inverse = np.unique(col, return_inverse=True)
        new = []
        for v in uniq.tolist():
            if v < 0:
                new.append(v)
                continue
            code = var_map.get(v)
            if code is None:
                code = var_map[v] = self.var_next
                self.var_next += 1
            new.append(code)
        return np.array(new, dtype=_I64)[inverse.ravel()]


#: A process numbers its storages from 0 (:mod:`.memory`); in a merge each group's are shifted by
#: its index times 2^40 (a trillion arrays a process), so they never meet.
STORAGE_BITS = 40


def _lane_names(names: list[str]) -> list[str]:
    """The lane name of each of one part's threads: its name, and for the second and later threads
    of one name (a process's threads are not named uniquely: the GIL's evidence brings every Python
    thread of a Dask worker) the name with its number, ``"Thread-1 (2)"``, so that two threads never
    share a lane (their states would overlap) while a process's parts still meet on theirs."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        n = seen[name] = seen.get(name, 0) + 1
        out.append(name if n == 1 else f"{name} ({n})")
    return out


class Combiner:
    """Builds one trace from parts (see the module docstring): :meth:`add` each part, then :meth:`build`."""

    def __init__(self) -> None:
        self.lanes = Lanes()
        self._ids = _EngineIds()
        self._inv_next = 0
        self._tables: list[SpanTable] = []
        self._flows: list[FlowTable] = []
        self._ops: list[OpTable] = []
        self._instants: list[Instant] = []
        self._counters: list[CounterSample] = []
        self._states: list[ThreadStates] = []
        self._gil_meta: dict[str, Any] | None = None  # the first part's that sampled the GIL
        self._cpu_wait: dict[int, int] | None = None  # each lane's wait for a CPU, of the parts that counted it
        #: Per process (group): its parts' threads outside Python, (ns ran, summed; threads, the most
        #: any part counted: a process's segments see the same native pool).
        self._outside: dict[Hashable, tuple[int, int]] = {}
        self._memory: list[MemoryEvents] = []
        self._storage_base: dict[Hashable, int] = {}  # group -> what its storage numbers are shifted by

    def add(self, trace: TraceData, pid: int, *, shift_ns: int = 0, group: Hashable = None) -> None:
        """Every record of ``trace``, its threads in process ``pid``, its times minus ``shift_ns``.
        Parts of one ``group`` (default: the pid) come from one process's engine."""
        group = pid if group is None else group
        t = trace.table
        names = trace.thread_names()
        known = sorted({int(x) for x in np.unique(t.tid).tolist()} | {th.tid for th in trace.threads})
        keys = np.array(known, dtype=_I64)
        lanes = _lane_names([names.get(k, f"thread {k}") for k in known])
        vals = np.array([self.lanes.tid(pid, lane) for lane in lanes], dtype=_I64)

        def tid(col: np.ndarray) -> np.ndarray:  # 0 ("unknown", an op's pusher) stays 0
            if not len(col) or not len(keys):
                return col.astype(_I64)
            at = np.minimum(np.searchsorted(keys, col), len(keys) - 1)
            return np.where(keys[at] == col, vals[at], 0)

        inv = np.where(t.inv >= 0, t.inv + self._inv_next, -1)
        if len(inv) and bool(np.any(t.inv >= 0)):
            self._inv_next = int(inv.max()) + 1
        op_col = t.op
        if trace.ops is not None and len(trace.ops):
            ops, op_col = self._ids.remap(trace.ops, group, t.op)
            self._ops.append(
                replace(
                    ops,
                    push=np.where(ops.push >= 0, ops.push - shift_ns, -1),
                    pusher=tid(ops.pusher),
                    ready=np.where(ops.ready >= 0, ops.ready - shift_ns, -1),
                )
            )
        elif bool(np.any(op_col >= 0)):
            op_col = np.broadcast_to(_I64(-1), (len(t),))  # ids without their table name nothing
        if len(t):
            self._tables.append(replace(t, start=t.start - shift_ns, end=t.end - shift_ns, tid=tid(t.tid), inv=inv, op=op_col))
        f = trace.flow_table
        if len(f):
            self._flows.append(
                replace(f, src_tid=tid(f.src_tid), src_ts=f.src_ts - shift_ns, dst_tid=tid(f.dst_tid), dst_ts=f.dst_ts - shift_ns)
            )
        lut = dict(zip(keys.tolist(), vals.tolist(), strict=True))
        self._instants.extend(
            replace(i, tid=lut.get(i.tid) or self.lanes.tid(pid, f"thread {i.tid}"), ts=i.ts - shift_ns) for i in trace.instants
        )
        self._counters.extend(replace(c, ts=c.ts - shift_ns) for c in trace.counters)
        ts = trace.thread_states
        if ts is not None and len(ts):  # each part's GIL evidence on its own threads' lanes
            holder = np.where(ts.holder >= 0, tid(np.maximum(ts.holder, 0)), -1)
            self._states.append(ThreadStates(tid(ts.tid), ts.state, ts.start - shift_ns, ts.end - shift_ns, holder, ts.period_ns))
            gil = trace.metadata.get(GIL_METADATA)
            if self._gil_meta is None and isinstance(gil, dict) and "period_ns" in gil:
                self._gil_meta = gil
        waited = cpu_wait_ns(trace.metadata)
        if waited is not None:  # each part's threads' waits for a CPU, on their lanes
            pairs = list(waited.items())
            lanes = tid(np.array([k for k, _ in pairs], dtype=_I64)).tolist()
            acc = self._cpu_wait = self._cpu_wait if self._cpu_wait is not None else {}
            for lane, (_, ns) in zip(lanes, pairs, strict=True):
                if lane:
                    acc[lane] = acc.get(lane, 0) + ns
        outside = cpu_outside_python(trace.metadata)
        if outside is not None:  # each process's own native threads (they have no lanes)
            ran, threads = self._outside.get(group, (0, 0))
            self._outside[group] = (ran + outside[0], max(threads, outside[1]))
        m = trace.memory
        if m is not None:  # each part's memory in its own process, its vars as its ops' (remapped alike)
            var_map = self._ids.groups.setdefault(group, (self._ids.op_next, {}))[1]
            # Storage numbers run per process: a group's parts (a Dask worker's segments) share theirs,
            # so a free in one pairs with its allocation in another; groups stay apart.
            base = self._storage_base.setdefault(group, len(self._storage_base) << STORAGE_BITS)
            pids = np.full(len(m), pid, dtype=_I64)
            self._memory.append(
                MemoryEvents(m.ts - shift_ns, m.storage + base, self._ids._vars(m.var, var_map), m.nbytes, pids, m.site, m.sites)
            )

    def add_spans(self, table: SpanTable) -> None:
        """Spans already on the combined lanes and clock (tids from :attr:`lanes`)."""
        if len(table):
            self._tables.append(table)

    def add_flows(self, flows: FlowTable) -> None:
        if len(flows):
            self._flows.append(flows)

    def build(self, processes: dict[int, str], metadata: dict[str, Any]) -> Trace:
        spans = SpanTable.concat(self._tables).sorted_by_start() if self._tables else SpanTable.empty()
        # One string table for the sites: every part's, added as their ops were.
        ops = OpTable.concat([replace(o, strings=self._ids.strings.strings) for o in self._ops]) if self._ops else None
        states = None
        if self._states:  # the coarsest part's period bounds every edge
            tid, state, start, end, holder = (
                np.concatenate([getattr(x, c) for x in self._states]) for c in ("tid", "state", "start", "end", "holder")
            )
            states = ThreadStates(tid, state, start, end, holder, max(x.period_ns for x in self._states))
            gil = metadata.get(GIL_METADATA)
            if self._gil_meta is not None and not (isinstance(gil, dict) and "period_ns" in gil):
                metadata = {**metadata, GIL_METADATA: {**self._gil_meta, "period_ns": states.period_ns}}
        if self._cpu_wait is not None:
            source = "the OS's run-queue time per thread (/proc/self/task/<tid>/schedstat), of each process"
            record: dict[str, Any] = {"source": source, "ns": {str(k): v for k, v in self._cpu_wait.items()}}
            if self._outside:
                ran_threads = list(self._outside.values())
                record["outside_python"] = {"ns": sum(r for r, _ in ran_threads), "threads": sum(n for _, n in ran_threads)}
            metadata = {**metadata, CPU_WAIT_METADATA: record}
        memory = None
        for m in self._memory:
            memory = m if memory is None else memory.concat_with(m)
        return Trace(
            list(self.lanes.threads),
            spans,
            sorted(self._instants, key=lambda i: i.ts),
            self._counters,
            _concat_flows(self._flows),
            metadata,
            ops,
            processes,
            thread_states=states,
            memory=memory,
        )


def _concat_flows(tables: list[FlowTable]) -> FlowTable:
    """Flows of several tables, strings merged and ids renumbered (each table's ids are its own)."""
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
