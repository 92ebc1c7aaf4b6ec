"""One analysis per trace: every derived fact computed on first use and shared by every reader.

A ``%%opprof`` cell's report reads the same facts many times: the summary line, the split table,
the why-text, the widget's hover and split bars, Chrome export, compare. Each used to compute the
waiting causes and the family split afresh (~0.9 s each at 1M spans). :func:`analysis_of` keeps
one :class:`Analysis` on the trace and hands the same one to every reader until the trace
changes; each fact in it (the family split, the causes, the rows, the sums per op type, the
critical path, the stats) is a lazy attribute, computed once, when first asked for.

"Changes" means the trace's records were replaced: its span columns, flow columns, engine table,
thread list, thread states or metadata are other objects than the ones the analysis was made from
(or the thread list has another length). A trace whose spans are held as an editable list
(:attr:`~opprof.trace.TraceData.spans`) cannot tell an edit from no edit cheaply, so each
:func:`analysis_of` call on such a trace makes a fresh one; a reader that takes one analysis and
passes it on still computes each fact once.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import numpy as np

from ..columns import ROLE_CODE, SpanTable
from ..data import TraceData
from ..ops import OpKind, OpTable
from ..records import CUSTOM_POOL, ENGINE_POOL, CustomOpRow, Role
from ..threadstates import STATES, PoolCondition, ThreadState, ThreadStates
from .causes import Causes, has_edges, pool_busy_with, waiting_causes, workers_busy_with
from .critical import CriticalPath, critical_path, mark_collections, mark_held_back, refine_by_thread_states
from .gil import GilHolder, PythonGil, python_gil, queue_holders
from .memory import MemoryAnalysis, invocation_memory, memory_analysis
from .split import callers, family_members, family_splits
from .stats import StatRow, span_stats
from .summary import OpTypeSummary, op_type_summary

__all__ = ["Analysis", "analysis_of"]


class Analysis:
    """Every analysis of one trace (see the module docstring); get it with :func:`analysis_of`."""

    def __init__(self, data: TraceData) -> None:
        self.data = data
        #: The span columns every fact here was computed from (built once, also for a list view).
        self.table: SpanTable = data.table
        self.ops: OpTable | None = data.ops
        self.made_from: tuple[object, ...] | None = None
        self.n_threads = len(data.threads)

    # ------------------------------------------------------------------ custom-op families
    @cached_property
    def _families(self) -> tuple[np.ndarray, np.ndarray]:
        return family_splits(self.table)

    @property
    def parents(self) -> np.ndarray:
        """Span index of each custom-op invocation's parent, ascending: the row order of
        :attr:`split` and :attr:`causes`."""
        return self._families[0]

    @property
    def split(self) -> np.ndarray:
        """(invocations, 3) int64: each invocation's python, sub-ops and waiting ns."""
        return self._families[1]

    @cached_property
    def members(self) -> tuple[np.ndarray, np.ndarray]:
        """The family index: (span index of every member of an invocation, its row in
        :attr:`parents`), parents themselves excluded (:func:`~.split.family_members`)."""
        return family_members(self.table, self.parents)

    @cached_property
    def span_op_rows(self) -> np.ndarray:
        """The span→op join: each span's row in the engine's table (:attr:`ops`), -1 for none."""
        if self.ops is None or not len(self.ops):
            return np.full(len(self.table), -1, dtype=np.int64)
        return self.ops.rows_of(self.table.op)

    @cached_property
    def thread_states(self) -> ThreadStates | None:
        """The trace's thread states, each wait's named holder kept only where the holder's own runs
        allow it (:meth:`~opprof.trace.threadstates.ThreadStates.holders_checked`): what every
        reader of the GIL's holders here and in the timeline takes. None where the
        trace holds none."""
        states = self.data.thread_states
        return None if states is None else states.holders_checked()

    @cached_property
    def pool_conditions(self) -> tuple[PoolCondition | None, PoolCondition | None]:
        """The custom-op pool's and the engine workers' condition over time (busy, idle: a hand-off,
        or a thread waiting for the GIL), where the trace holds thread states and engine edges;
        (None, None) where not. The queued causes split by them (:data:`.causes.QUEUE_PARTS`)."""
        states = self.thread_states
        if states is None or not has_edges(self.table, self.ops):
            return None, None
        custom, engine = self.pool_tids
        # A call queued for a custom-op thread first needs an engine worker to run its engine op,
        # then a custom-op thread: either pool's thread waiting for the GIL holds it up, but
        # only an idle custom-op thread means a hand-off (idle engine workers cannot run it).
        both = np.concatenate([custom, engine])
        t = self.table
        # The pools' work: blocked inside it is busy. Not a custom op's parent span: it is the
        # invocation's window drawn on the engine worker that started it, not work that worker ran
        # (a worker parked between two sub-ops under it is idle: a pure-path CI run, 2026-12-04,
        # called 11.5 ms of sub-ops queued behind such idle workers "every worker busy").
        on = np.flatnonzero(np.isin(t.tid, both) & (t.role != ROLE_CODE[Role.PARENT]))
        busy = (t.tid[on], t.start[on], t.end[on])
        return (
            states.pool_condition(custom, busy, waiters=both) if len(custom) else None,
            states.pool_condition(engine, busy) if len(engine) else None,
        )

    @cached_property
    def causes(self) -> Causes:
        """Every invocation's waiting by cause and what blocked it (:mod:`.causes`)."""
        edges = has_edges(self.table, self.ops)
        conditions = self.pool_conditions
        pools = conditions if any(c is not None for c in conditions) else None
        return waiting_causes(
            self.table,
            self.ops,
            families=self._families,
            family_index=self.members if len(self.parents) else None,
            span_rows=self.span_op_rows if edges else None,
            pools=pools,
        )

    @cached_property
    def pool_tids(self) -> tuple[np.ndarray, np.ndarray]:
        """The tids of the custom-op pool's threads and of the engine workers (by their names'
        prefixes, :data:`~opprof.trace.records.CUSTOM_POOL` / ``ENGINE_POOL``)."""
        threads = self.data.threads
        return tuple(  # type: ignore[return-value]
            np.array([t.tid for t in threads if t.name.startswith(p.thread_prefix)], dtype=np.int64)
            for p in (CUSTOM_POOL, ENGINE_POOL)
        )

    @cached_property
    def queue_gil_holders(self) -> dict[str, dict[str, list[GilHolder]]]:
        """Per queued cause (``custom_pool``, ``subop_queue``) and op type: who held the GIL while
        the pool's threads waited for it during the type's calls (:func:`.gil.queue_holders`)."""
        states = self.thread_states
        if states is None:
            return {}
        custom, engine = self.pool_tids
        return {
            cause: queue_holders(self.data, self.table, states, self.parents, tids)
            for cause, tids in (("custom_pool", np.concatenate([custom, engine])), ("subop_queue", engine))
        }

    @cached_property
    def callers(self) -> np.ndarray:
        """Per invocation row: the invocation id whose Python called it, -1 for none
        (:func:`.split.callers`)."""
        caller, rows = callers(self.table, self.ops)
        out = np.full(len(self.parents), -1, dtype=np.int64)
        if len(rows) and len(self.parents):
            order = np.argsort(self.parents, kind="stable")
            sorted_rows = self.parents[order]
            pos = np.minimum(np.searchsorted(sorted_rows, rows), len(sorted_rows) - 1)
            hit = sorted_rows[pos] == rows
            out[order[pos[hit]]] = caller[hit]
        return out

    @cached_property
    def custom_ops(self) -> list[CustomOpRow]:
        """One row per invocation in start order (shared: readers do not edit it)."""
        return _custom_op_rows(self)

    @cached_property
    def op_types(self) -> OpTypeSummary:
        """The invocations summed per op type (forward and backward apart): the one home of the
        per-op-type sums that the split table, the why-text, the split bars and compare read."""
        return op_type_summary(self.table, self.parents, self.split, self.causes)

    @cached_property
    def top_blocker(self) -> np.ndarray:
        """Per invocation row: index into ``causes.blocked_*`` of the op that held it up longest
        (the first such, as :meth:`Causes.all_blockers` orders them), -1 for none."""
        c = self.causes
        top = np.full(len(self.parents), -1, dtype=np.int64)
        first = c.top_blockers(1)  # the same order as all_blockers and the per-type sums
        top[c.blocked_fam[first]] = first
        return top

    @cached_property
    def n_blockers(self) -> np.ndarray:
        """Per invocation row: how many ops held it up."""
        bf, k = self.causes.blocked_fam, len(self.parents)
        return np.bincount(bf, minlength=k)[:k] if len(bf) else np.zeros(k, dtype=np.int64)

    @cached_property
    def pool_busy(self) -> dict[str, dict[str, int]]:
        """Per op type: what the custom-op threads ran while its calls queued for one (ns by name)."""
        return pool_busy_with(self.table, self.causes) if "custom_pool" in self.causes.keys else {}

    @cached_property
    def workers_busy(self) -> dict[str, dict[str, int]]:
        """Per op type: what the engine workers ran while its calls' ready sub-ops queued for one
        (ns by span name): the "with what" of "every engine worker busy"."""
        return workers_busy_with(self.table, self.causes, self.pool_tids[1])

    @cached_property
    def span_gil_wait(self) -> np.ndarray:
        """Per span: the ns its thread waited for the GIL while it ran (0 without thread states; a
        custom-op parent, on no single thread, 0). A sub-op that lasted 3 ms while doing µs of work
        says so in its hover."""
        t, states = self.table, self.thread_states
        out = np.zeros(len(t), dtype=np.int64)
        if states is None or not len(states) or not len(t):
            return out
        on = np.flatnonzero(t.role != ROLE_CODE[Role.PARENT])
        col = list(STATES).index(ThreadState.WAIT)
        out[on] = states.overlap(t.tid[on], t.start[on], t.end[on])[:, col]
        return out

    @cached_property
    def python_gil(self) -> PythonGil | None:
        """Each invocation's Python time by GIL state and who held the GIL while it waited
        (:mod:`.gil`); None where the trace holds no thread states (:func:`.gil.no_gil_evidence` says why)."""
        states = self.thread_states
        if states is None:
            return None
        return python_gil(self.data, self.table, states, self.parents, self.members)

    @cached_property
    def python_gil_by_type(self) -> dict[str, tuple[np.ndarray, list[GilHolder]]]:
        """Per op type (the parents' names): its calls' Python time by GIL state summed, and the
        GIL's holders while they waited, summed by thread and most first. Empty without evidence."""
        pg = self.python_gil
        if pg is None or not len(self.parents):
            return {}
        t = self.table
        out: dict[str, tuple[np.ndarray, dict[int, GilHolder]]] = {}
        for name, ns, holders in zip(t.str_list(t.name[self.parents]), pg.ns, pg.holders, strict=True):
            parts, by_tid = out.setdefault(name, (np.zeros(len(ns), dtype=np.int64), {}))
            parts += ns
            for h in holders:
                prev = by_tid.get(h.tid)
                by_tid[h.tid] = h if prev is None else replace(prev, ns=prev.ns + h.ns, off_cpu_ns=prev.off_cpu_ns + h.off_cpu_ns)
        return {n: (p, sorted(b.values(), key=lambda h: -h.ns)) for n, (p, b) in out.items()}

    # ------------------------------------------------------------------ the run as a whole
    @cached_property
    def critical_path(self) -> CriticalPath:
        """The critical path and every op's slack (:mod:`.critical`); where the GIL held it back (a
        pool's threads, a woken thread or the path's own thread waiting for it), the path steps
        across to the GIL's holder, and where the program was blocked between its pushes it says
        so (:func:`.critical.refine_by_thread_states`), on either engine; the program's time in a
        garbage collection is named after it (:func:`.critical.mark_collections`)."""
        path = critical_path(self.data, table=self.table)
        states = self.thread_states
        custom, engine = self.pool_conditions
        if states is not None and not path.approximate:
            path = refine_by_thread_states(path, self.table, states, custom, engine)
        return mark_collections(mark_held_back(path, self.table), self.table)

    @cached_property
    def memory(self) -> MemoryAnalysis | None:
        """Live bytes over time, each op's allocations, what was alive at the end (:mod:`.memory`);
        None where memory was not recorded."""
        m = self.data.memory
        if m is None:
            return None
        return memory_analysis(m, self.table, self.ops, self.span_op_rows)

    @cached_property
    def invocation_memory(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per invocation (rows of :attr:`parents`): bytes its sub-ops allocated, and its peak."""
        m = self.memory
        if m is None:
            return None
        pids = self.data.pids_of(self.table.tid[self.parents])
        return invocation_memory(m, self.table, self.parents, self.span_op_rows, pids)

    @cached_property
    def stats(self) -> list[StatRow]:
        """Count, total, min and max per (category, name), largest total first; with memory
        recorded, also the bytes their outputs allocated."""
        rows = span_stats(self.table)
        m = self.memory
        if m is None:
            return rows
        t = self.table
        op_rows = np.flatnonzero(m.op_span >= 0)  # each op once, by its span (a custom op's: its parent)
        spans = m.op_span[op_rows]
        alloc: dict[tuple[str, str], int] = {}
        for c, n, b in zip(t.cat[spans].tolist(), t.name[spans].tolist(), m.op_alloc[op_rows].tolist(), strict=True):
            key = (t.strings[n], t.strings[c])
            alloc[key] = alloc.get(key, 0) + int(b)
        return [replace(r, allocated_bytes=alloc.get((r.name, r.cat), 0)) for r in rows]

    # ------------------------------------------------------------------ lookups
    def sites(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(code into ``ops.strings`` of the user's "file:line" that pushed or waited, -1 none;
        whether it is a wait) for the spans ``idx``."""
        ops = self.ops
        none = np.full(len(idx), -1, dtype=np.int64)
        if ops is None or not len(ops) or not np.any(ops.site >= 0):
            return none, np.zeros(len(idx), dtype=bool)
        rows = self.span_op_rows[idx]
        r = np.maximum(rows, 0)
        return np.where(rows >= 0, ops.site[r], -1), (rows >= 0) & (ops.kind[r] == OpKind.WAIT)


def _custom_op_rows(a: Analysis) -> list[CustomOpRow]:
    t, parents = a.table, a.parents
    if not len(parents):
        return []
    causes = a.causes
    op_codes = t.op_type[parents]
    names = t.str_list(t.name[parents])
    ops = [names[k] if c < 0 else t.strings[c] for k, c in enumerate(op_codes.tolist())]
    errors = [t.error_of(i) for i in parents.tolist()] if len(t.args_at) else [None] * len(parents)
    by_cause = [dict(zip(causes.keys, row, strict=True)) for row in causes.ns.tolist()]
    cpu = [None if c < 0 else c for c in causes.cpu.tolist()]
    mem = a.invocation_memory
    allocated = mem[0].tolist() if mem is not None else [None] * len(parents)
    peak = mem[1].tolist() if mem is not None else [None] * len(parents)
    np_peak = _numpy_peaks(t, a.members, len(parents))
    rows = [
        CustomOpRow(op, bw == 1, inv, st, wall, py, sub, wait, err, bc, c, blk, None if by < 0 else by, al, pk, npk)
        for op, bw, inv, st, wall, (py, sub, wait), err, bc, c, blk, by, al, pk, npk in zip(
            ops,
            t.backward[parents].tolist(),
            t.inv[parents].tolist(),
            t.start[parents].tolist(),
            (t.end[parents] - t.start[parents]).tolist(),
            a.split.tolist(),
            errors,
            by_cause,
            cpu,
            causes.all_blockers(t),
            a.callers.tolist(),
            allocated,
            peak,
            np_peak,
            strict=True,
        )
    ]
    rows.sort(key=lambda r: (r.start_ns, r.invocation))
    return rows


def _numpy_peaks(t: SpanTable, members: tuple[np.ndarray, np.ndarray], k: int) -> list[int | None]:
    """Each invocation's Python's NumPy peak (its Python span's ``numpy_peak``), None where not measured."""
    idx, fam = members
    peak = np.full(k, -1, dtype=np.int64)
    np.maximum.at(peak, fam, t.numpy_peak[idx])
    return [None if p < 0 else p for p in peak.tolist()]


def _made_from(data: TraceData) -> tuple[object, ...] | None:
    """The records an analysis of ``data`` is made from; None when an edit could not be told
    (spans or flows held as an editable list)."""
    if data.has_span_list or data.has_flow_list:
        return None
    return (data.table, data.flow_table, data.ops, data.threads, data.thread_states, data.memory, data.metadata)


def analysis_of(data: TraceData) -> Analysis:
    """The trace's :class:`Analysis`: the one kept on it while its records are the same objects
    (and its thread list the same length)."""
    made_from = _made_from(data)
    kept = data._analysis
    if made_from is not None and isinstance(kept, Analysis) and kept.made_from is not None:
        same = all(x is y for x, y in zip(kept.made_from, made_from, strict=True))
        if same and kept.n_threads == len(data.threads):
            return kept
    a = Analysis(data)
    a.made_from = made_from
    data._analysis = a if made_from is not None else None
    return a
