"""Memory, derived from the recorded allocations and frees (:mod:`opprof.trace.memory`) and the
engine's edges: what each op's outputs allocated, live bytes over time, and what was still alive.

**When storage counts.** An array's storage counts from the start of the op that first wrote it
(its maker) until it was freed. opprof's NDArray asks NumPy for the storage when the op is
pushed, but nothing touches those pages until the op runs (NumPy's large buffers are untouched
``mmap`` pages: no memory), and MXNet allocates an output when its op runs: so a chain of five
ops on 4 MB arrays whose inputs are dropped as it goes holds two arrays at a time, as in MXNet
(4 MB -> 8 MB -> 4 MB at each op), not the five the program had pushed. An array no op wrote
counts from when it was made.

**From another tool.** A trace whose memory came as MXNet's ``Memory: cpu/0`` counter (its
``profile_memory``) has the live bytes but no makers: :func:`live_from_counters` reads those.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..columns import ROLE_CODE, SpanTable
from ..memory import MEMORY_COUNTER, MemoryEvents
from ..ops import OpTable
from ..records import CounterSample, Role

__all__ = ["AliveGroup", "MemoryAnalysis", "invocation_memory", "live_from_counters", "memory_analysis"]

_I64 = np.int64
_SUB = ROLE_CODE[Role.SUBOP]
_PARENT = ROLE_CODE[Role.PARENT]


@dataclass(frozen=True)
class AliveGroup:
    """Arrays still alive when the profile stopped, made by one op at one line."""

    op: str  # the maker's name ("?" where no op wrote them)
    # The user's line that made them, as the trace names it: recorded with the array where the
    # recording knew it, else the line that pushed the maker (custom ops' sub-ops); None neither.
    site: str | None
    count: int
    nbytes: int


@dataclass(frozen=True, eq=False)
class MemoryAnalysis:
    """Live bytes over time (a step function: ``live[k]`` from ``ts[k]`` on) and what made each
    change, the bytes each op's outputs allocated, and what was alive at the end."""

    ts: np.ndarray  # int64 ns of each change, ascending
    live: np.ndarray  # int64 live bytes after it
    delta: np.ndarray  # int64 the change (+ made, - freed)
    maker: np.ndarray  # int64 row in ``ops`` of the op that made the array changed (-1 none)
    op_alloc: np.ndarray  # int64 per row of ``ops``: bytes its outputs allocated
    alive: list[AliveGroup]  # largest first
    op_names: dict[int, str]  # a row of ``ops`` -> the op's name (its span's)
    pid: np.ndarray  # int64 the process of each change (``live`` is that process's)
    op_span: np.ndarray  # int64 per row of ``ops``: its span (a custom op's: its parent), -1 none

    @property
    def processes(self) -> list[int]:
        """The processes whose memory this holds (one, pid 0, for a trace of one process)."""
        return np.unique(self.pid).tolist() if len(self.pid) else [0]

    def of_process(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """(ns, live bytes) of one process's changes."""
        k = self.pid == pid
        return self.ts[k], self.live[k]

    def maker_name(self, k: int) -> str:
        """The name of the op that made the array of change ``k`` ("?" where no op wrote it)."""
        return self.op_names.get(int(self.maker[k]), "?")

    @property
    def peak(self) -> int:
        return int(self.live.max()) if len(self.live) else 0

    @property
    def allocated(self) -> int:
        """Bytes allocated over the whole profile."""
        return int(self.delta[self.delta > 0].sum())

    @property
    def alive_bytes(self) -> int:
        return sum(g.nbytes for g in self.alive)

    def peak_within(self, start: np.ndarray, end: np.ndarray, pids: np.ndarray | None = None) -> np.ndarray:
        """The most live bytes at any moment of each window ``[start, end]`` (in the process
        ``pids[k]`` of window ``k``, where given)."""
        start, end = np.asarray(start, dtype=_I64), np.asarray(end, dtype=_I64)
        out = np.zeros(len(start), dtype=_I64)
        groups = (
            [(None, np.arange(len(start)))] if pids is None else [(int(p), np.flatnonzero(pids == p)) for p in np.unique(pids)]
        )
        for pid, idx in groups:
            ts, live = (self.ts, self.live) if pid is None else self.of_process(pid)
            k = np.searchsorted(ts, start[idx], side="right") - 1  # live at the start (0 before any change)
            out[idx] = np.where(k >= 0, live[np.maximum(k, 0)], 0)
            a = np.searchsorted(ts, start[idx], side="right")
            b = np.searchsorted(ts, end[idx], side="right")
            # A running maximum per window: windows are few (one per invocation), changes many.
            for j in np.flatnonzero(b > a).tolist():
                out[idx[j]] = max(int(out[idx[j]]), int(live[a[j] : b[j]].max()))
        return out


def _makers(ops: OpTable, vars_: np.ndarray) -> np.ndarray:
    """The row of the first op (by push) that wrote each var, -1 none."""
    n = len(ops)
    counts = np.diff(ops.acc_at)
    rows = np.repeat(np.arange(n, dtype=_I64), counts)
    w = ops.acc_write.astype(bool)
    w_var, w_row = ops.acc_var[w], rows[w]
    order = np.lexsort((ops.push[w_row], w_var))  # by var, then push
    w_var, w_row = w_var[order], w_row[order]
    first = np.ones(len(w_var), dtype=bool)
    first[1:] = w_var[1:] != w_var[:-1]
    f_var, f_row = w_var[first], w_row[first]
    at = np.searchsorted(f_var, vars_)
    at_c = np.minimum(at, max(len(f_var) - 1, 0))
    hit = (at < len(f_var)) & (f_var[at_c] == vars_) if len(f_var) else np.zeros(len(vars_), dtype=bool)
    return np.where(hit, f_row[at_c], -1)


def memory_analysis(memory: MemoryEvents, table: SpanTable, ops: OpTable | None, span_op_rows: np.ndarray) -> MemoryAnalysis:
    """Everything above, from the recorded events (see the module docstring)."""
    alloc = memory.allocated
    pid = memory.pid if memory.pid is not None else np.zeros(len(memory), dtype=_I64)
    a_var, a_bytes, a_made, a_pid = memory.var[alloc], memory.nbytes[alloc], memory.ts[alloc], pid[alloc]
    f_ts = _frees(memory.storage[alloc], a_pid, memory.storage[~alloc], pid[~alloc], memory.ts[~alloc])
    n_ops = len(ops) if ops is not None else 0
    if ops is not None and n_ops:
        maker = _makers(ops, a_var)
        # Each op's start: its earliest span (a custom op's is its parent's).
        start = np.full(n_ops, np.iinfo(_I64).max, dtype=_I64)
        has = span_op_rows >= 0
        np.minimum.at(start, span_op_rows[has], table.start[has])
        ran = (maker >= 0) & (start[np.maximum(maker, 0)] < np.iinfo(_I64).max)
        counts_from = np.where(ran, np.maximum(a_made, start[np.maximum(maker, 0)]), a_made)
        op_alloc = np.bincount(maker[maker >= 0], weights=a_bytes[maker >= 0], minlength=n_ops).astype(_I64)
    else:
        maker = np.full(len(a_var), -1, dtype=_I64)
        counts_from = a_made
        op_alloc = np.zeros(n_ops, dtype=_I64)
    freed = f_ts >= 0
    counts_from = np.where(freed, np.minimum(counts_from, f_ts), counts_from)
    ts = np.concatenate([counts_from, f_ts[freed]])
    delta = np.concatenate([a_bytes, -a_bytes[freed]])
    who = np.concatenate([maker, maker[freed]])
    where = np.concatenate([a_pid, a_pid[freed]])
    order = np.lexsort((-delta, ts))  # at one moment, the making before the freeing
    ts, delta, who, where = ts[order], delta[order], who[order], where[order]
    op_span = _op_spans(table, span_op_rows, n_ops)
    named = np.flatnonzero(op_span >= 0)
    names = dict(zip(named.tolist(), table.str_list(table.name[op_span[named]]), strict=True))
    assert memory.site is not None
    made_at = [memory.sites[c] if c >= 0 else None for c in memory.site[alloc][~freed].tolist()]
    alive = _alive(ops, names, maker[~freed], a_bytes[~freed], made_at)
    return MemoryAnalysis(ts, _live_per_process(delta, where), delta, who, op_alloc, alive, names, where, op_span)


def _frees(a_st: np.ndarray, a_pid: np.ndarray, f_st: np.ndarray, f_pid: np.ndarray, f_at: np.ndarray) -> np.ndarray:
    """Each allocation's free time, -1 none: a storage is numbered within its process, so a sorted
    search on (process, number) pairs them."""
    if not len(f_st):
        return np.full(len(a_st), -1, dtype=_I64)
    order = np.lexsort((f_st, f_pid))
    f_st, f_pid, f_at = f_st[order], f_pid[order], f_at[order]
    # One sortable key per (process, number): processes apart by more than any number.
    span = int(max(int(a_st.max(initial=0)), int(f_st.max(initial=0)))) + 1
    base = int(min(int(a_pid.min(initial=0)), int(f_pid.min(initial=0))))
    f_key = (f_pid - base) * span + f_st
    a_key = (a_pid - base) * span + a_st
    k = np.minimum(np.searchsorted(f_key, a_key), len(f_key) - 1)
    return np.where(f_key[k] == a_key, f_at[k], -1)


def _live_per_process(delta: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Live bytes after each change, in the process of that change (a running sum per process)."""
    if not len(delta) or bool(np.all(pid == pid[0])):
        return np.cumsum(delta)
    order = np.lexsort((np.arange(len(pid)), pid))  # each process's changes, in time order
    run = np.cumsum(delta[order])
    starts = np.flatnonzero(np.r_[True, pid[order][1:] != pid[order][:-1]])
    before = np.repeat(np.r_[0, run[starts[1:] - 1]], np.diff(np.r_[starts, len(run)]))
    live = np.empty_like(run)
    live[order] = run - before
    return live


def _alive(
    ops: OpTable | None, names: dict[int, str], maker: np.ndarray, nbytes: np.ndarray, made_at: list[str | None]
) -> list[AliveGroup]:
    groups: dict[tuple[str, str | None], list[int]] = {}
    for row, b, site in zip(maker.tolist(), nbytes.tolist(), made_at, strict=True):
        name = names.get(row, "?")
        if site is None and row >= 0 and ops is not None and ops.site[row] >= 0:
            site = ops.strings[int(ops.site[row])]
        g = groups.setdefault((name, site), [0, 0])
        g[0] += 1
        g[1] += b
    out = [AliveGroup(op, site, c, b) for (op, site), (c, b) in groups.items()]
    out.sort(key=lambda g: (-g.nbytes, -g.count, g.op))
    return out


def _op_spans(table: SpanTable, span_op_rows: np.ndarray, n_ops: int) -> np.ndarray:
    """Each op row's span, -1 none: a custom op's row is its parent's (the span that names it)."""
    out = np.full(n_ops, -1, dtype=_I64)
    has = np.flatnonzero(span_op_rows >= 0)
    # Parents last, so a custom op's row ends up with its parent (a later store wins).
    has = has[np.argsort(table.role[has] == _PARENT, kind="stable")]
    out[span_op_rows[has]] = has
    return out


def invocation_memory(
    m: MemoryAnalysis, table: SpanTable, parents: np.ndarray, span_op_rows: np.ndarray, pids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per custom-op invocation (its parent span ``parents``, in process ``pids``): bytes its
    sub-ops' outputs allocated, and the most live bytes (of its process) while it ran."""
    inv = table.inv
    subs = np.flatnonzero((table.role == _SUB) & (span_op_rows >= 0) & (inv >= 0))
    by_inv: dict[int, int] = {}
    for i, row in zip(inv[subs].tolist(), span_op_rows[subs].tolist(), strict=True):
        by_inv[i] = by_inv.get(i, 0) + int(m.op_alloc[row])
    allocated = np.array([by_inv.get(i, 0) for i in inv[parents].tolist()], dtype=_I64)
    several = pids is not None and len(m.processes) > 1
    peak = m.peak_within(table.start[parents], table.end[parents], pids if several else None)
    return allocated, peak


def live_from_counters(counters: list[CounterSample], name: str = MEMORY_COUNTER) -> tuple[np.ndarray, np.ndarray]:
    """(ns, live bytes) of another tool's memory counter (MXNet's ``Memory: cpu/0``), by time."""
    rows = sorted(
        (c.ts, float(c.values.get(name, next(iter(c.values.values()), 0)))) for c in counters if c.name == name and c.values
    )
    ts = np.array([r[0] for r in rows], dtype=_I64)
    return ts, np.array([r[1] for r in rows], dtype=_I64)
