"""The critical path: the chain of work and waiting that determined a run's end-to-end time.

Walk backwards from the last thing to finish. An op ran for its span; before that it was *queued*
(ready, no engine worker yet) since its ready time; it became ready when its **enabling edge**'s
op completed (recorded by the engine, :mod:`.ops`), so the walk goes on from that op; an op ready
when pushed goes on from its pusher, at the push: the user's program (its own Python between its
pushes and waits), or a custom op's Python, which started once a custom-op thread took it
(``custom_pool``) after its custom op's own engine op started. A wait goes on from the op whose
completion ended it. The gaps between one op's completion and the next one's ready time are the
engine's ``handoff``. Every step moves the cursor back in time and every piece between is a
segment, so the segments tile ``[start, end]`` exactly.

**Slack** comes from the same graph, complete this time: every dependency through a var
(re-derived from the vars each op touched, in push order, as the engine orders them), each
program's order, each custom op's Python and its pushes, each wait. An op's slack is how much
later it could have completed without moving the end, other things staying as recorded: zero on
the path, the chain's length minus its own beside an independent chain.

A trace without edges (another tool's) gets a stated approximation instead, as Holistic Trace
Analysis does for PyTorch: each span depends on the one before it on its thread, and on the
source of a flow arrow arriving at its start.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..columns import ROLE_CODE, SpanTable
from ..data import TraceData
from ..ops import OpKind, OpTable
from ..records import Role
from ..threadstates import STATES, PoolCondition, ThreadState, ThreadStates
from .gil import between_ops, span_at

__all__ = [
    "BLOCKED_WORDS",
    "HELD_BACK_WORDS",
    "CriticalPath",
    "Segment",
    "SegmentKind",
    "critical_path",
    "mark_collections",
    "mark_held_back",
    "refine_by_thread_states",
    "thread_runs",
]


class SegmentKind(str, enum.Enum):
    """What a piece of the critical path was."""

    RUN = "run"  # an engine op executing (a sub-op, a plain op, a Dummy_Wait)
    PYTHON = "python"  # a custom op's Python (on a CPU or not)
    QUEUE = "queue"  # an op ready, waiting for an engine worker (or the hand-off to one)
    CUSTOM_POOL = "custom_pool"  # a custom op started, waiting for a custom-op thread
    HANDOFF = "handoff"  # an op completed; the engine making its dependents ready
    WAIT = "wait"  # a wait that ended without an op ending it
    PROGRAM = "program"  # the user's thread running its own Python between pushes and waits
    #: The op was ready but its pool's thread waited for the GIL (or a hand-off's woken thread
    #: did): the path steps across to the thread that held it (``tid``), and to the span it ran
    #: (``span``; -1: between its ops).
    GIL = "gil"
    #: The program's thread blocked between its pushes (a sleep, I/O, a lock, joining a thread),
    #: read from its sampled thread state: not its own Python, though both sit between its pushes.
    BLOCKED = "blocked"
    #: The program's push held by the engine's back-pressure (its ``Backpressure`` span: too many
    #: ops were pending, and it waited until half of them had run), on either path.
    HELD_BACK = "held_back"
    #: The op was ready and a thread of its pool sat parked, being handed it (woken by the OS, or
    #: not yet on a CPU): a ``queue`` or ``custom_pool`` piece that was a hand-off, not a busy pool.
    WAKE = "wake"


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of the critical path: ``[start, end]`` ns on thread ``tid``."""

    start: int
    end: int
    kind: SegmentKind
    tid: int
    name: str  # the span's name, or what the piece was ("queued for an engine worker")
    span: int  # index into the trace's spans, -1 for a gap
    invocation: int | None = None

    @property
    def dur(self) -> int:
        return self.end - self.start


#: What a ``blocked`` segment's thread may have been doing, in words (its label after the thread's name).
BLOCKED_WORDS = "blocked between its pushes (a sleep, I/O, a lock, a join)"
#: A ``held_back`` segment's words, after the thread's name.
HELD_BACK_WORDS = "held back by the engine: too many ops pending, its push waited for half of them to run"

_KINDS = list(SegmentKind)
_CODE = {k: i for i, k in enumerate(_KINDS)}
#: Kinds of segment that are a span running on its own thread (a queue, hand-off, pool wait or
#: program time is not, though it may name the span it concerns).
_ON_THREAD = np.array([k in (SegmentKind.RUN, SegmentKind.PYTHON, SegmentKind.WAIT, SegmentKind.GIL) for k in _KINDS])


@dataclass(eq=False)
class CriticalPath:
    """The segments, in time order, tiling ``[start, end]``, as columns; ``slack`` per span.

    ``seg_kind`` codes index :class:`SegmentKind` in declaration order; ``seg_span`` is the span a
    segment runs on (-1 for a queue, hand-off or program gap), ``seg_about`` the span it concerns
    (the op queued, the op whose completion is being handed on; -1 for program time).
    :attr:`segments` gives them as :class:`Segment` objects.
    """

    start: int
    end: int
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_kind: np.ndarray
    seg_tid: np.ndarray
    seg_span: np.ndarray
    seg_about: np.ndarray
    approximate: bool  # True: the trace had no engine edges (see ``note``)
    note: str
    _slack: np.ndarray | None = field(default=None, repr=False)
    _trace: TraceData | None = field(default=None, repr=False)
    _segments: list[Segment] | None = field(default=None, repr=False)

    @property
    def total(self) -> int:
        return self.end - self.start

    def __len__(self) -> int:
        return len(self.seg_start)

    @property
    def segments(self) -> list[Segment]:
        """The segments as objects (made on first use: ~1 µs each)."""
        if self._segments is None:
            self._segments = self._make_segments()
        return self._segments

    def _make_segments(self) -> list[Segment]:
        t = self._trace.table if self._trace is not None else None
        names = t.str_list(t.name) if t is not None else []
        invs = t.inv.tolist() if t is not None else []
        engine_users = _engine_users(self._trace)
        out = []
        for a, b, k, tid, s, about in zip(
            self.seg_start.tolist(),
            self.seg_end.tolist(),
            self.seg_kind.tolist(),
            self.seg_tid.tolist(),
            self.seg_span.tolist(),
            self.seg_about.tolist(),
            strict=True,
        ):
            kind = _KINDS[k]
            # The GIL's: its holder's span or none; with no holder known, the op that waited.
            ref = s if s >= 0 or (kind is SegmentKind.GIL and tid >= 0) else about
            name = _label(kind, names[ref] if ref >= 0 else "", self._trace, tid, engine_users)
            inv = invs[ref] if ref >= 0 else -1
            out.append(Segment(a, b, kind, tid, name, s, inv if inv >= 0 else None))
        return out

    @property
    def spans(self) -> np.ndarray:
        """Indices of the spans on the path (each once, in path order)."""
        s = self.seg_span[self.seg_span >= 0]
        _, first = np.unique(s, return_index=True)
        return s[np.sort(first)]

    def on_threads(self) -> np.ndarray:
        """Which segments are a span running on its thread (an op, a Python, a wait, the GIL's holder's)."""
        return (self.seg_span >= 0) & _ON_THREAD[self.seg_kind] & ~self._gil_unseen()

    def _gil_unseen(self) -> np.ndarray:
        """Which segments are a GIL wait whose holder no evidence names: kind ``gil`` on no thread
        (its span is the op that waited, not a holder's)."""
        return (self.seg_kind == _GIL) & (self.seg_tid < 0)

    @property
    def slack(self) -> np.ndarray:
        """Per span of the trace: ns it could have completed later without moving the end (-1 where
        it does not apply: spans that are no engine op or Python). Computed on first use."""
        if self._slack is None:
            assert self._trace is not None
            t = self._trace.table
            self._slack = _slack(t, self._trace.ops) if not self.approximate else _slack_by_thread(t, self.end)
        return self._slack

    def by_kind(self) -> dict[str, int]:
        """ns of the path per segment kind, largest first."""
        ns = np.bincount(self.seg_kind, weights=self.seg_end - self.seg_start, minlength=len(_KINDS))
        return {_KINDS[k].value: int(ns[k]) for k in np.argsort(-ns, kind="stable").tolist() if ns[k] > 0}

    def gil_holder_unseen(self) -> int:
        """ns of the path's GIL waits whose holder no evidence names (kind ``gil`` on no thread): the
        GIL changing hands, free while its next holder was still being woken or waited for a CPU."""
        unseen = self._gil_unseen()
        return int((self.seg_end[unseen] - self.seg_start[unseen]).sum())

    def by_name(self, top: int = 10) -> list[tuple[str, str, int]]:
        """(kind, name, ns) of the path's largest contributors, summed by kind and span name, and by
        thread where the name says whose (:data:`_NAMED_BY_THREAD`): two threads' GIL between their
        ops were one sum under the first one's name, a data loader's 200 ms "MainThread's" 1 ms."""
        if not len(self) or self._trace is None:
            return []
        t = self._trace.table
        ref = np.where((self.seg_span >= 0) | ((self.seg_kind == _GIL) & ~self._gil_unseen()), self.seg_span, self.seg_about)
        name = np.where(ref >= 0, t.name[np.maximum(ref, 0)], -1).astype(np.int64)
        whose = np.where(_NAMED_BY_THREAD[self.seg_kind], self.seg_tid, -1).astype(np.int64)
        keys = np.stack([self.seg_kind.astype(np.int64), name, whose], axis=1)
        uk, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.ravel()
        ns = np.bincount(inv, weights=self.seg_end - self.seg_start)
        first = np.full(len(uk), len(inv), dtype=np.int64)
        np.minimum.at(first, inv, np.arange(len(inv)))  # each group's first segment: its thread names it
        out = []
        engine_users = _engine_users(self._trace)
        for j in np.argsort(-ns, kind="stable")[:top].tolist():
            kind, c = _KINDS[int(uk[j, 0])], int(uk[j, 1])
            label = _label(kind, t.strings[c] if c >= 0 else "", self._trace, int(self.seg_tid[first[j]]), engine_users)
            out.append((kind.value, label, int(ns[j])))
        return out

    def check(self) -> list[str]:
        """What breaks the tiling (for :func:`~.validate.validate`)."""
        n = len(self)
        if not n:
            return [] if self.start == self.end else [f"critical path has no segments for [{self.start}, {self.end}]"]
        prev = np.concatenate([[self.start], self.seg_end[:-1]])
        bad = np.flatnonzero((self.seg_start != prev) | (self.seg_end < self.seg_start))
        if len(bad):
            i = int(bad[0])
            return [f"critical path segment {i} [{self.seg_start[i]}, {self.seg_end[i]}] does not follow {prev[i]}"]
        if int(self.seg_end[-1]) != self.end:
            return [f"critical path ends at {int(self.seg_end[-1])}, not at the run's end {self.end}"]
        return []


def _engine_users(trace: TraceData | None) -> frozenset[int]:
    """The threads with a span of their own (they pushed or waited for ops, or ran them): found once
    per call that names segments, not once per segment (a scan of the span table each)."""
    return frozenset(np.unique(trace.table.tid).tolist()) if trace is not None else frozenset()


def _label(kind: SegmentKind, name: str, trace: TraceData | None, tid: int, engine_users: frozenset[int]) -> str:
    """A segment's name in words, from the span it runs on or concerns (``engine_users``: see
    :func:`_engine_users`)."""
    inline = trace is not None and trace.ran_inline  # nothing waits for a thread: the engine's own bookkeeping
    if kind is SegmentKind.QUEUE:
        return f"{name}, the naive engine's bookkeeping before it ran" if inline else f"{name} queued"
    if kind is SegmentKind.HANDOFF:
        return f"after {name}"
    if kind is SegmentKind.CUSTOM_POOL:
        return f"{name}, the naive engine's bookkeeping before its Python" if inline else f"{name} queued for a custom-op thread"
    if kind is SegmentKind.WAKE:
        return f"{name} handed over: waking a thread"
    if kind is SegmentKind.PROGRAM:
        thread = (trace.thread_name(tid) if trace is not None else "") or f"thread {tid}"
        # On a span: a garbage collection it ran (:func:`mark_collections`), not its own Python.
        return f"{name} on {thread}" if name else f"{thread} (the program's own Python)"
    if kind is SegmentKind.BLOCKED:
        thread = (trace.thread_name(tid) if trace is not None else "") or f"thread {tid}"
        return f"{thread} {BLOCKED_WORDS}"
    if kind is SegmentKind.HELD_BACK:
        thread = (trace.thread_name(tid) if trace is not None else "") or f"thread {tid}"
        return f"{thread} {HELD_BACK_WORDS}"
    if kind is SegmentKind.GIL and tid < 0:
        return f"{name} waiting for the GIL, its holder not seen (the GIL changing hands)"
    if kind is SegmentKind.GIL:
        thread = (trace.thread_name(tid) if trace is not None else "") or f"thread {tid}"
        if name:
            return f"{name} on {thread}, holding the GIL"
        return f"{between_ops(thread, tid in engine_users)} holding the GIL"
    return name


def _path(
    trace: TraceData, start: int, end: int, segs: list[tuple[int, int, int, int, int, int]], approximate: bool, note: str
) -> CriticalPath:
    """A path from ``(start, end, kind code, tid, span, about)`` rows in time order."""
    cols = np.array(segs, dtype=np.int64).reshape(-1, 6)
    return CriticalPath(
        start, end, cols[:, 0], cols[:, 1], cols[:, 2].astype(np.int8), cols[:, 3], cols[:, 4], cols[:, 5],
        approximate, note, _trace=trace,
    )  # fmt: skip


def critical_path(trace: TraceData, *, table: SpanTable | None = None) -> CriticalPath:
    """The critical path of ``trace`` (see the module docstring). ``table``: the trace's span
    columns, when the caller has built them already (a list view's are built at each access)."""
    t, ops = (trace.table if table is None else table), trace.ops
    if not len(t):
        return _path(trace, 0, 0, [], True, "an empty trace has no critical path")
    if ops is None or not len(ops) or not bool(np.any(t.op >= 0)) or isinstance(trace.metadata.get(APPROXIMATE_PATH), str):
        return _by_thread(trace, t)
    return _walk(trace, t, ops)


#: Metadata key: why the path must be the approximate one although the trace has engine edges (a
#: merged Dask trace: its tasks are no engine ops, and only the approximation crosses them), as the note says.
APPROXIMATE_PATH = "critical_path_approximate"

_INF = np.int64(2**62)
_RUN, _PY, _QUEUE, _POOL, _HAND, _WAIT, _PROG, _GIL, _BLOCKED, _HELD, _WAKE = (
    _CODE[k]
    for k in (
        SegmentKind.RUN,
        SegmentKind.PYTHON,
        SegmentKind.QUEUE,
        SegmentKind.CUSTOM_POOL,
        SegmentKind.HANDOFF,
        SegmentKind.WAIT,
        SegmentKind.PROGRAM,
        SegmentKind.GIL,
        SegmentKind.BLOCKED,
        SegmentKind.HELD_BACK,
        SegmentKind.WAKE,
    )
)


#: The kinds whose words name the thread a segment is on (:func:`_label`): their contributors are
#: summed per thread as well as per name.
_NAMED_BY_THREAD = np.array(
    [k in (SegmentKind.GIL, SegmentKind.PROGRAM, SegmentKind.BLOCKED, SegmentKind.HELD_BACK) for k in _KINDS]
)


class _ByThread:
    """Spans ``idx`` keyed by (thread, ``time``): "the last one of thread ``tid`` at or before ``at``"
    for many queries in one sorted search (times run from ``lo``, below ``lo + width``)."""

    def __init__(self, t: SpanTable, idx: np.ndarray, time: np.ndarray, lo: int, width: int) -> None:
        self.tids, self.lo, self.width = t.tid, lo, width
        key = t.tid[idx] * width + (time[idx] - lo)
        order = np.argsort(key, kind="stable")
        self.idx, self.key = idx[order], key[order]

    def last(self, tid: np.ndarray, at: np.ndarray, side: str) -> np.ndarray:
        """The last span of ``tid`` at or before ``at`` (``side`` of ``np.searchsorted``), -1 none."""
        q = tid * self.width + (np.maximum(at, self.lo) - self.lo)
        out = np.full(len(q), -1, dtype=np.int64)
        if not len(self.idx):
            return out
        k = np.searchsorted(self.key, q, side=side) - 1  # type: ignore[call-overload]
        got = self.idx[np.maximum(k, 0)]
        same = (k >= 0) & (self.tids[got] == tid)
        out[same] = got[same]
        return out


def _span_of_row(t: SpanTable, ops: OpTable) -> np.ndarray:
    """The span that ran each op row (-1: none recorded)."""
    out = np.full(len(ops), -1, dtype=np.int64)
    has = np.flatnonzero(t.op >= 0)
    rows = ops.rows_of(t.op[has])
    ok = rows >= 0
    out[rows[ok]] = has[ok]
    return out


def _families(t: SpanTable, ops: OpTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the invocation ids, ascending; per id: its parent span; its ``Dummy_Wait``'s op row; -1:
    none), indexed by an id's position among the ids (:func:`_inv_code`). Ids are labels, never
    array sizes: an id of 10^9 once sized two arrays of 8 GB here."""
    ids = np.unique(t.inv[t.inv >= 0])
    parent_of = np.full(len(ids) + 1, -1, dtype=np.int64)  # the last entry: an id not among them
    idx = np.flatnonzero((t.role == ROLE_CODE[Role.PARENT]) & (t.inv >= 0))
    parent_of[_inv_code(ids, t.inv[idx])[::-1]] = idx[::-1]  # the first one wins
    dummy_of = np.full(len(ids) + 1, -1, dtype=np.int64)
    d = np.flatnonzero((t.role == ROLE_CODE[Role.DUMMY_WAIT]) & (t.inv >= 0) & (t.op >= 0))
    dr = ops.rows_of(t.op[d])
    dummy_of[_inv_code(ids, t.inv[d][dr >= 0])] = dr[dr >= 0]
    parent_of[-1] = dummy_of[-1] = -1
    return ids, parent_of, dummy_of


def _inv_code(ids: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Each invocation id's position in ``ids`` (``len(ids)`` for one not there, such as -1)."""
    if not len(ids):
        return np.zeros(len(inv), dtype=np.int64)
    pos = np.minimum(np.searchsorted(ids, inv), len(ids) - 1)
    return np.where(ids[pos] == inv, pos, len(ids))


class _Nodes:
    """The walk's graph, built with array operations: every node has one predecessor and up to
    four segments (latest first), each ``[a, b]`` with ``b`` clipped to where the walk came from.

    Nodes ``0..n-1``: op row ``r`` completed; ``n + r``: op ``r`` became ready (what made it so);
    ``2n + r``: custom op ``r`` started, its Python not yet running. -1 ends the walk.
    """

    def __init__(self, t: SpanTable, ops: OpTable, start: int) -> None:
        n = len(ops)
        self.n = n
        m = 3 * n
        self.pred = np.full(m, -1, dtype=np.int64)
        # Segments as rows (node, slot, a, b, kind, tid, span, about), one block per ``_add``.
        self.parts: list[np.ndarray] = []
        self.t, self.ops, self.start = t, ops, start
        self.fill = np.zeros(m, dtype=np.int64)  # slots used per node

        span_of = self.span_of = _span_of_row(t, ops)
        self.inv_ids, self.parent_of, dummy_of = _families(t, ops)
        self._thread_index()

        kind = ops.kind
        r_all = np.arange(n)
        sp = span_of
        with_span = sp >= 0
        s0 = np.maximum(sp, 0)
        by_row = np.where(ops.by >= 0, ops.rows_of(ops.by), -1)

        # Completion of a plain op, sub-op or Dummy_Wait: hand-off after it, it ran, it queued.
        r = np.flatnonzero(((kind == OpKind.OP) | (kind == OpKind.DUMMY)) & with_span)
        ss = sp[r]
        self._add(r, t.end[ss], _INF, _HAND, t.tid[ss], -1, ss)
        self._add(r, t.start[ss], t.end[ss], _RUN, t.tid[ss], ss, ss)
        self._add(r, ops.ready[r], t.start[ss], _QUEUE, t.tid[ss], -1, ss)
        self.pred[r] = n + r
        # A custom op completes when its Dummy_Wait runs (its parent ends with it).
        r = np.flatnonzero((kind == OpKind.CUSTOM) & with_span)
        dw = dummy_of[_inv_code(self.inv_ids, t.inv[sp[r]])]
        self.pred[r] = dw
        # A wait: after it ended; the op that ended it, else it and its thread before it.
        r = np.flatnonzero((kind == OpKind.WAIT) & with_span)
        ss = sp[r]
        self._add(r, t.end[ss], _INF, _HAND, t.tid[ss], -1, ss)
        ended = by_row[r] >= 0
        self.pred[r[ended]] = by_row[r[ended]]
        lone = r[~ended]
        self._add(lone, t.start[sp[lone]], t.end[sp[lone]], _WAIT, t.tid[sp[lone]], sp[lone], sp[lone])
        self._thread(lone, t.tid[sp[lone]], t.start[sp[lone]])
        # Ready: made so by an op's completion, else at its push, by its pusher.
        ready_by = r_all[(by_row >= 0)]
        self.pred[n + ready_by] = by_row[ready_by]
        pushed = r_all[(by_row < 0) & (ops.push >= 0)]
        self._add(n + pushed, ops.push[pushed], _INF, _QUEUE, t.tid[s0[pushed]], -1, np.where(with_span[pushed], sp[pushed], -1))
        self._thread(n + pushed, ops.pusher[pushed], ops.push[pushed])
        # A custom op started: its Python waited for a custom-op thread, and before that it queued.
        r = np.flatnonzero((kind == OpKind.CUSTOM) & with_span)
        ss = sp[r]
        self._add(2 * n + r, t.start[ss], _INF, _POOL, t.tid[ss], ss, ss)  # the custom op holds the path
        self._add(2 * n + r, ops.ready[r], t.start[ss], _QUEUE, t.tid[ss], -1, ss)
        self.pred[2 * n + r] = n + r

    def _add(self, nodes: np.ndarray, a: Any, b: Any, kind: int, tid: Any, span: Any, about: Any) -> None:
        """A segment for each of ``nodes`` (in their next free slot)."""
        if not len(nodes):
            return
        block = np.empty((len(nodes), 8), dtype=np.int64)
        block[:, 0] = nodes
        block[:, 1] = self.fill[nodes]
        block[:, 2], block[:, 3], block[:, 4] = a, b, kind
        block[:, 5], block[:, 6], block[:, 7] = tid, span, about
        self.parts.append(block)
        self.fill[nodes] += 1

    def segments_of(self, chain: np.ndarray) -> np.ndarray:
        """The segments of the nodes of ``chain``, in chain order, each node's latest first."""
        # Each block's rows of nodes on the chain, scattered straight to their place in the
        # result (the chain visits a node once): no sort, and no table of the nodes off it.
        count = self.fill[chain]
        start = np.full(len(self.fill), -1, dtype=np.int64)
        start[chain] = np.concatenate([[0], np.cumsum(count)[:-1]])
        out = np.empty((int(count.sum()), 8), dtype=np.int64)
        for block in self.parts:
            at = start[block[:, 0]]
            on = at >= 0
            out[at[on] + block[on, 1]] = block[on]
        return out

    def _thread_index(self) -> None:
        """Per thread, by end: the spans a thread's own work is read from (ops run inline, waits,
        Pythons) and, for inside a Python, its waits and sub-ops; Pythons by start."""
        t = self.t
        py_role = t.role == ROLE_CODE[Role.PYTHON]
        inner = (t.op >= 0) & ((t.role == ROLE_CODE[Role.WAIT]) | (t.role == ROLE_CODE[Role.SUBOP]))
        lo = int(min(int(t.start.min()), self.start))
        width = int(t.end.max()) - lo + 2
        self.prev = _ByThread(t, np.flatnonzero((t.op >= 0) | py_role), t.end, lo, width)
        self.inner = _ByThread(t, np.flatnonzero(inner), t.end, lo, width)
        self.pythons = _ByThread(t, np.flatnonzero(py_role), t.start, lo, width)

    def _thread(self, nodes: np.ndarray, tid: np.ndarray, at: np.ndarray, depth: int = 0) -> None:
        """What thread ``tid`` was doing just before ``at``: a node's last segments and predecessor."""
        if not len(nodes):
            return
        t, n = self.t, self.n
        tid = np.asarray(tid, dtype=np.int64)
        at = np.asarray(at, dtype=np.int64)
        py = self.pythons.last(tid, at, "left")  # starts before ``at``
        inside = py >= 0
        inside[inside] = t.end[py[inside]] >= at[inside]
        # Inside a Python: back to its last wait or sub-op that ended, else to its start.
        i = np.flatnonzero(inside)
        p = py[i]
        child = self.inner.last(tid[i], at[i], "right")
        has_child = child >= 0
        has_child[has_child] = t.start[child[has_child]] >= t.start[p[has_child]]
        c = i[has_child]
        ch = child[has_child]
        self._add(nodes[c], t.end[ch], _INF, _PY, tid[c], p[has_child], p[has_child])
        self.pred[nodes[c]] = self.ops.rows_of(t.op[ch])
        c = i[~has_child]
        pc = p[~has_child]
        self._add(nodes[c], t.start[pc], _INF, _PY, tid[c], pc, pc)
        parent = self.parent_of[_inv_code(self.inv_ids, t.inv[pc])]
        prow = np.where(parent >= 0, self.ops.rows_of(np.where(parent >= 0, t.op[np.maximum(parent, 0)], -1)), -1)
        self.pred[nodes[c]] = np.where(prow >= 0, 2 * n + prow, -1)
        # Outside: back to the last thing the thread did (a Python: into it, once).
        o = np.flatnonzero(~inside)
        prev = self.prev.last(tid[o], at[o], "right")
        none = prev < 0
        self._add(nodes[o[none]], np.full(int(none.sum()), self.start), _INF, _PROG, tid[o[none]], -1, -1)
        o2, prev2 = o[~none], prev[~none]
        self._add(nodes[o2], t.end[prev2], _INF, _PROG, tid[o2], -1, -1)
        is_py = t.role[prev2] == ROLE_CODE[Role.PYTHON]
        op_rows = self.ops.rows_of(t.op[prev2[~is_py]])
        self.pred[nodes[o2[~is_py]]] = op_rows
        if depth < 1 and np.any(is_py):
            self._thread(nodes[o2[is_py]], tid[o2[is_py]], t.end[prev2[is_py]], depth + 1)


def _walk(trace: TraceData, t: SpanTable, ops: OpTable) -> CriticalPath:
    """The path along the engine's edges: a graph made with arrays, then one pointer chase."""
    end = int(t.end.max())
    pushes = ops.push[ops.push >= 0]
    start = min(int(t.start.min()), int(pushes.min()) if len(pushes) else end)
    g = _Nodes(t, ops, start)
    # The last thing to finish: an engine op or wait. Where a span that is none ends later (a
    # garbage collection after the last op, a user's Task around the run), the walk starts from the
    # last op, and the path closes with the program's time on the thread whose span ended last:
    # taken from that span instead, the walk found no op to start from, and a run with a collection
    # at its end had a path of one "program" piece, no op on it.
    has_op = np.flatnonzero(t.op >= 0)
    walk_end = int(t.end[has_op].max()) if len(has_op) else end
    with_op = has_op[t.end[has_op] == walk_end]
    first_node = -1
    if len(with_op):
        first_node = int(ops.rows_of(t.op[with_op[:1]])[0])
    # Skip nodes without segments (an op made ready by another's completion, a custom op completed
    # by its Dummy_Wait): pointing past them halves the chase, the one loop in Python here.
    pv = g.pred
    empty = g.fill == 0
    for _ in range(4):
        via = (pv >= 0) & empty[np.maximum(pv, 0)]
        if not via.any():
            break
        pv = np.where(via, pv[np.maximum(pv, 0)], pv)
    hops = 0
    while first_node >= 0 and empty[first_node] and hops < 8:
        first_node, hops = int(pv[first_node]), hops + 1
    pred = pv.tolist()
    chain: list[int] = []
    x, limit = first_node, len(pred) + 1
    while x >= 0 and len(chain) < limit:
        chain.append(x)
        x = pred[x]
    note = "from the engine's recorded edges"
    c = np.array(chain, dtype=np.int64)
    if len(chain) >= limit:  # a cycle in the edges (a malformed file): the chain up to its first repeat
        _, first_seen = np.unique(c, return_index=True)
        seen = np.zeros(len(c), dtype=bool)
        seen[first_seen] = True
        c = c[: int(np.argmin(seen))] if not seen.all() else c
        note += "; the walk stopped at a cycle in the recorded edges"
    rows = g.segments_of(c)
    a, b, kind, tid, span, about = (rows[:, k] for k in range(2, 8))
    # Backwards from the end, each segment ends where the walk came from and starts no later.
    a = np.minimum(a, b)
    cursor = np.minimum.accumulate(np.concatenate([[walk_end], a]))
    b = np.minimum(b, cursor[:-1])
    a = np.maximum(np.minimum(a, b), start)
    b = np.maximum(b, start)
    keep = b > a
    a, b, kind, tid, span, about = a[keep], b[keep], kind[keep], tid[keep], span[keep], about[keep]
    # Time order, and the program before the first recorded event.
    a, b, kind, tid, span, about = a[::-1], b[::-1], kind[::-1], tid[::-1], span[::-1], about[::-1]
    if len(a) == 0 or a[0] > start:
        first = int(a[0]) if len(a) else walk_end
        a, b = np.concatenate([[start], a]), np.concatenate([[first], b])
        kind, tid = np.concatenate([[_PROG], kind]), np.concatenate([[0], tid])
        span, about = np.concatenate([[-1], span]), np.concatenate([[-1], about])
    # The chain is contiguous by construction (each node's first segment is open-ended); a hole
    # left by an out-of-order clock read becomes a hand-off of what came before it.
    hole = np.flatnonzero(a[1:] > b[:-1]) + 1
    if len(hole):
        order = np.argsort(np.concatenate([np.arange(len(a), dtype=np.float64), hole - 0.5]), kind="stable")
        a = np.concatenate([a, b[hole - 1]])[order]
        kind = np.concatenate([kind, np.full(len(hole), _HAND)])[order]
        tid = np.concatenate([tid, tid[hole - 1]])[order]
        span = np.concatenate([span, np.full(len(hole), -1)])[order]
        about = np.concatenate([about, about[hole - 1]])[order]
        b = np.concatenate([a[1:], [walk_end]])  # contiguous now: each ends where the next starts
    if walk_end < end:
        a, b = np.append(a, walk_end), np.append(b, end)
        kind, tid = np.append(kind, _PROG), np.append(tid, t.tid[int(np.argmax(t.end))])
        span, about = np.append(span, -1), np.append(about, -1)
    return CriticalPath(start, end, a, b, kind.astype(np.int8), tid, span, about, False, note, _trace=trace)


# ---------------------------------------------------------------------------- without edges
def _top_level(t: SpanTable) -> np.ndarray:
    """Spans not inside another span of their thread (the thread's own sequence of work).

    In (thread, start, longest first) order a span is nested when it ends no later than the
    latest end before it on its thread: a running maximum of ``thread * width + end``, whose
    thread offset keeps each thread's maximum from reaching the next thread's spans.
    """
    if not len(t):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-t.end, t.start, t.tid))
    lo = int(t.end.min())
    width = int(t.end.max()) - lo + 1
    key = t.tid[order] * width + (t.end[order] - lo)
    before = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(key)[:-1]])
    return order[key > before]


def _by_thread(trace: TraceData, t: SpanTable) -> CriticalPath:
    """The approximation for traces without edges: thread order plus flow arrows."""
    top = _top_level(t)
    f = trace.flow_table
    end = int(t.end.max())
    start = int(t.start.min())
    by_tid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    tids = t.tid[top]
    order = np.lexsort((t.end[top], tids))
    top = top[order]
    cut = np.flatnonzero(np.diff(t.tid[top])) + 1
    for chunk in np.split(top, cut):
        if len(chunk):
            by_tid[int(t.tid[chunk[0]])] = (t.end[chunk], chunk)
    # The flow arriving at each top-level span's start, if any: one sorted search for all of them.
    arrive: dict[int, tuple[int, int]] = {}
    if len(f):
        lo = min(int(f.dst_ts.min()), start)
        width = max(int(f.dst_ts.max()), end) - lo + 1
        fkey = f.dst_tid * width + (f.dst_ts - lo)
        forder = np.argsort(fkey, kind="stable")
        fkey = fkey[forder]
        skey = t.tid[top] * width + (t.start[top] - lo)
        at = np.minimum(np.searchsorted(fkey, skey), len(fkey) - 1)
        hit = fkey[at] == skey
        j = forder[at[hit]]
        arrive = dict(zip(top[hit].tolist(), zip(f.src_tid[j].tolist(), f.src_ts[j].tolist(), strict=True), strict=True))
    names = t.str_list(t.name)
    segs: list[tuple[int, int, SegmentKind, int, str, int]] = []
    cur = end
    # From the last span that is no garbage collection: a collection of the client's heap after
    # every worker's task started a Dask run's path, which then held that collection alone. The
    # time after it closes the path, the program's on the thread whose span ended last.
    work = top[~np.isin(top, t.collections())]
    if len(work) and int(t.end[work].max()) < end:
        cur = int(t.end[work].max())
        segs.append((cur, end, SegmentKind.PROGRAM, int(t.tid[int(np.argmax(t.end))]), "after the last work", -1))
    last = np.flatnonzero(t.end[work] == cur)
    s = int(work[last[0]]) if len(last) else int(np.argmax(t.end))
    tid = int(t.tid[s])
    steps, limit = 0, 4 * len(t) + 16
    while s >= 0 and cur > start and steps < limit:
        steps += 1
        a = min(int(t.start[s]), cur)
        if cur > a:
            segs.append((a, cur, SegmentKind.RUN, tid, names[s], s))
        cur = a
        src = arrive.get(s)
        ends, idx = by_tid[tid]
        k = int(np.searchsorted(ends, cur, side="right")) - 1
        prev = int(idx[k]) if k >= 0 and idx[k] != s else (int(idx[k - 1]) if k >= 1 else -1)
        prev_end = int(t.end[prev]) if prev >= 0 else start
        if src is not None and src[1] > prev_end and src[0] in by_tid:
            # Pushed from elsewhere after this thread was free: the pusher is what it waited for.
            segs.append((min(src[1], cur), cur, SegmentKind.QUEUE, tid, f"{names[s]} queued", -1))
            cur = min(src[1], cur)
            tid = src[0]
            e2, i2 = by_tid[tid]
            k2 = int(np.searchsorted(e2, cur, side="right"))
            cand = [int(i) for i in i2[max(0, k2 - 1) : k2 + 1] if t.start[int(i)] < cur]
            s = cand[-1] if cand else -1
            if s >= 0 and int(t.end[s]) < cur:
                segs.append((int(t.end[s]), cur, SegmentKind.PROGRAM, tid, "gap", -1))
                cur = int(t.end[s])
            continue
        if prev >= 0 and prev_end < cur:
            segs.append((prev_end, cur, SegmentKind.PROGRAM, tid, "gap on the thread", -1))
            cur = prev_end
        s = prev
    if cur > start:
        segs.append((start, cur, SegmentKind.PROGRAM, 0, "before the first span on the path", -1))
    rows = [(a, b, _CODE[k], tid_, sp, sp) for a, b, k, tid_, _name, sp in reversed(segs)]
    # A trace that knows why the engine's edges cannot give its path says so (see APPROXIMATE_PATH).
    why = trace.metadata.get(APPROXIMATE_PATH)
    note = (
        f"approximate: {why}, so each span is taken to depend on the one before it on its thread and on "
        "the source of a flow arrow arriving at its start"
        if isinstance(why, str)
        else "approximate: this trace has no recorded engine edges (another tool's, or Chrome JSON, which keeps "
        "none), so each span is taken to depend on the one before it on its thread and on the source of a "
        "flow arrow arriving at its start, as Holistic Trace Analysis assumes; record with opprof and save "
        ".opprof for the exact path"
    )
    return _path(trace, start, end, rows, True, note)


def _slack_by_thread(t: SpanTable, end: int) -> np.ndarray:
    """Without edges: the time to the next span on the same thread (or the end)."""
    out = np.full(len(t), -1, dtype=np.int64)
    top = _top_level(t)
    order = top[np.lexsort((t.start[top], t.tid[top]))]
    nxt = np.full(len(order), end, dtype=np.int64)
    same = t.tid[order[1:]] == t.tid[order[:-1]]
    nxt[:-1] = np.where(same, t.start[order[1:]], end)
    out[order] = np.maximum(0, nxt - t.end[order])
    return out


# ---------------------------------------------------------------------------- slack
def _slack(t: SpanTable, ops: OpTable | None) -> np.ndarray:
    """Total float of every op, wait and Python (see the module docstring), per span."""
    assert ops is not None
    out = np.full(len(t), -1, dtype=np.int64)
    n = len(ops)
    if not n:
        return out
    end_run = int(t.end.max())
    span_of_row = _span_of_row(t, ops)
    # Nodes: the op rows (0..n-1), then one per Python span.
    py_spans = np.flatnonzero(t.role == ROLE_CODE[Role.PYTHON])
    n_nodes = n + len(py_spans)
    comp = np.full(n_nodes, end_run, dtype=np.int64)  # when each node completed
    span_of = np.concatenate([span_of_row, py_spans])
    has_span = span_of >= 0
    comp[has_span] = t.end[span_of[has_span]]
    src_l: list[np.ndarray] = []
    dst_l: list[np.ndarray] = []

    # Through vars: in push order per var, a read follows the last write; a write follows the last
    # write and every read since.
    acc_row = np.repeat(np.arange(n), np.diff(ops.acc_at))
    var, wr = ops.acc_var, ops.acc_write
    kind = ops.kind
    if len(acc_row):  # waits too: a WaitForVar reads the var it waited on
        ar, av, aw = acc_row, var, wr
        o = np.lexsort((ar, ops.push[ar], av))  # in push order (a wait's id is not the engine's)
        ar, av, aw = ar[o], av[o], aw[o]
        pos = np.arange(len(ar))
        last_w = np.where(aw, pos, -1)
        last_w = np.maximum.accumulate(last_w)
        prev_w = np.full(len(ar), -1)
        prev_w[1:] = last_w[:-1]
        prev_w = np.where((prev_w >= 0) & (av[np.maximum(prev_w, 0)] == av), prev_w, -1)
        e = prev_w >= 0
        src_l.append(ar[prev_w[e]])
        dst_l.append(ar[e])
        # a write also follows the reads since the last write: each read -> the next write
        nxt_w = np.where(aw, pos, len(ar))
        nxt_w = np.minimum.accumulate(nxt_w[::-1])[::-1]
        nxt_after = np.full(len(ar), len(ar))
        nxt_after[:-1] = nxt_w[1:]
        rd = (~aw) & (nxt_after < len(ar))
        rd &= av[np.minimum(nxt_after, len(ar) - 1)] == av
        src_l.append(ar[rd])
        dst_l.append(ar[nxt_after[rd]])
    # Waits: the op that ended each one; a wait for all, every op pushed before it (its next one).
    w = np.flatnonzero((kind == OpKind.WAIT) & (ops.by >= 0))
    wr_rows = ops.rows_of(ops.by[w])
    ok = wr_rows >= 0
    src_l.append(wr_rows[ok])
    dst_l.append(w[ok])
    wait_all = np.flatnonzero((kind == OpKind.WAIT) & (np.diff(ops.acc_at) == 0))
    if len(wait_all):
        wa = wait_all[np.argsort(ops.push[wait_all], kind="stable")]
        engine_ops = np.flatnonzero((kind != OpKind.WAIT) & (ops.push >= 0))
        nxt = np.searchsorted(ops.push[wa], ops.push[engine_ops], side="left")
        has = nxt < len(wa)
        src_l.append(engine_ops[has])
        dst_l.append(wa[nxt[has]])
    var_src = np.concatenate(src_l) if src_l else np.zeros(0, np.int64)
    var_dst = np.concatenate(dst_l) if dst_l else np.zeros(0, np.int64)
    # Dependency edges: src may slip until dst's ready time (then dst moves along); along an
    # enabling edge not at all (the hand-off after it moves with it).
    ready = np.concatenate([ops.ready, np.full(len(py_spans), -1)])
    dst_by = np.where(ops.by[np.minimum(var_dst, n - 1)] >= 0, ops.rows_of(ops.by[np.minimum(var_dst, n - 1)]), -1)
    enabling = (var_dst < n) & (dst_by == var_src)
    # Another dependency may slip until the enabler completed (then it would have been the one);
    # with none (ready when pushed), until the push.
    bound = np.where(dst_by >= 0, comp[np.maximum(dst_by, 0)], ready[var_dst])
    dep_lag = np.where(enabling, 0, np.maximum(0, bound - comp[var_src]))

    # Program order: a pushing thread's items (pushes and waits) in time order; a wait completing
    # later moves every later item of its thread, until its next wait. Pushes from inside a
    # custom op's Python follow that Python instead.
    push, ready = ops.push, ops.ready
    items = np.flatnonzero((push >= 0) & (ops.pusher > 0))
    py_tids = np.unique(t.tid[py_spans])
    in_py_thread = np.isin(ops.pusher[items], py_tids)
    prog = items[~in_py_thread]
    prog = prog[np.lexsort((push[prog], ops.pusher[prog]))]
    is_w = kind[prog] == OpKind.WAIT
    pos = np.arange(len(prog))
    last = np.maximum.accumulate(np.where(is_w, pos, -1)) if len(prog) else pos
    before = np.full(len(prog), -1)
    before[1:] = last[:-1]
    ok = before >= 0
    ok[ok] = ops.pusher[prog[before[ok]]] == ops.pusher[prog[ok]]
    prog_src, prog_dst = prog[before[ok]], prog[ok]
    # Inside a Python: each push or wait follows the Python it was made in.
    inner = items[in_py_thread]
    lo = min(int(t.start.min()), int(push[push >= 0].min()))
    pythons = _ByThread(t, py_spans, t.start, lo, max(int(t.end.max()), int(push.max())) - lo + 2)
    cand = pythons.last(ops.pusher[inner], push[inner], "right")
    okp = cand >= 0
    okp[okp] = t.end[cand[okp]] >= push[inner][okp]
    node_of_py = np.full(len(t), -1, dtype=np.int64)
    node_of_py[py_spans] = n + np.arange(len(py_spans))
    py_src, py_dst = node_of_py[cand[okp]], inner[okp]
    # A custom op completes with its Dummy_Wait.
    _, parent_of, dummy_of = _families(t, ops)
    both = np.flatnonzero((parent_of >= 0) & (dummy_of >= 0))
    d_src = dummy_of[both]
    d_dst = ops.rows_of(t.op[parent_of[both]])
    okd2 = d_dst >= 0
    seq_src = np.concatenate([prog_src, py_src, d_src[okd2]])
    seq_dst = np.concatenate([prog_dst, py_dst, d_dst[okd2]])
    # A push (or wait) slipping moves its ready time (its end) once it passes it.
    seq_lag = np.where(seq_dst < n, np.maximum(0, ready[np.minimum(seq_dst, n - 1)] - push[np.minimum(seq_dst, n - 1)]), 0)
    seq_lag[len(prog_src) + len(py_src) :] = 0
    src = np.concatenate([var_src, seq_src])
    dst = np.concatenate([var_dst, seq_dst])
    lag = np.concatenate([dep_lag, seq_lag])
    # Backward pass: slack(x) = min(end - comp(x), min over edges x -> y of slack(y) + lag), nodes
    # latest first. Every edge points to a node that completes no earlier, except a Python's to its
    # pushes: a Python is ordered by its start, which its pushes follow; at a tie the custom op
    # (completed by its Dummy_Wait at the same instant) goes first.
    order_key = comp.copy()
    order_key[n:] = t.start[py_spans]
    tie = np.zeros(n_nodes, dtype=np.int8)
    tie[:n] = np.where(kind == OpKind.CUSTOM, 0, 1)
    order = np.lexsort((tie, -order_key)).tolist()
    slack = (end_run - comp).tolist()
    o = np.argsort(src, kind="stable")
    src, dst, lag = src[o], dst[o], lag[o]
    starts = np.searchsorted(src, np.arange(n_nodes + 1)).tolist()
    dst_l2, lag_l2 = dst.tolist(), lag.tolist()
    for x in order:
        best = slack[x]
        for j in range(starts[x], starts[x + 1]):
            v = slack[dst_l2[j]] + lag_l2[j]
            if v < best:
                best = v
        slack[x] = best
    sl = np.array(slack, dtype=np.int64)
    out[span_of[has_span]] = np.maximum(0, sl[has_span])
    return out


def refine_by_thread_states(
    path: CriticalPath, table: SpanTable, states: ThreadStates, custom: PoolCondition | None, engine: PoolCondition | None
) -> CriticalPath:
    """The path with what the threads' sampled states say about its pieces:

    **The GIL held it back**, and the piece becomes a ``gil`` segment on the thread that held the
    GIL (its ``HELD`` or ``HELD_OFF_CPU`` run, else the holder a wait names:
    :meth:`~opprof.trace.threadstates.ThreadStates.holder_runs`), running the span it ran then, where

    * a ``queue`` segment's engine workers (a ``custom_pool`` one's pool threads) waited for the GIL
      (:class:`~opprof.trace.threadstates.PoolCondition`);
    * a ``handoff`` segment's woken thread (the one the path goes on with: a program woken from its
      wait, a worker handed its next op) waited for it: a user's thread spinning while the program
      waited for its result made a 10 ms "handoff" that was all the GIL;
    * a piece on a thread of its own (an op's run, a custom op's Python, the program's Python, a
      wait) whose thread waited for it: a custom op's NumPy that released the GIL and wanted it back
      while the program spun.

    **The program was blocked** between its pushes (a ``program`` segment whose thread was
    ``BLOCKED``: a sleep, I/O, a lock, joining its own threads; a push the engine held back has a
    span of its own, which :func:`mark_held_back` reads), and the piece becomes a ``blocked``
    segment on that thread: a program that slept 30 ms after its pushes, or joined the threads that
    did the work, was called 100 % "the program's own Python".

    **A pool's thread sat parked**, being handed the ready op (woken by the OS, or not yet on a
    CPU), and a ``queue`` or ``custom_pool`` piece becomes a ``wake`` segment: what is left of those
    kinds is a pool whose threads were all busy. A demo run's path was 58 % "queue" and
    "custom_pool" (72 % another's) where no pool was busy a microsecond of it: 23 % waking, the
    rest the GIL (51 % of the path "gil" now, 38 % of it with no holder known). Likewise where the
    thread a piece waits on (an op's woken thread after a ``handoff``, the program woken from its
    wait) was ready and not yet run by the OS (``RUNNABLE``): a ``wake`` segment, not the engine's
    bookkeeping after the op (0.6-3.8 points of the demo's path read "after mean" that way); not
    within a thread's own work, where a thread without a CPU is busy beside others.

    The pieces still tile the path exactly; a GIL wait with no known holder (the GIL free while its
    waiters were still being woken, or held by a thread the sampler did not know) is a ``gil``
    segment of no thread (``tid`` -1), named by the op that waited. Only the
    segments that met either are cut (sorted searches find them), so a path of two million segments
    with a few thousand such moments is not walked one by one in Python."""
    kind_of = path.seg_kind
    n = len(kind_of)
    if not n or not len(states):
        return path
    a, b, seg_tid = path.seg_start, path.seg_end, path.seg_tid
    # Whose wait for the GIL holds each segment back (-1: a pool's, or none).
    own = _ON_THREAD[kind_of] | (kind_of == _PROG)  # a piece on a thread of its own
    whose = np.where(own, seg_tid, -1)
    whose[kind_of == _GIL] = -1
    nxt = np.full(n, -1, dtype=np.int64)  # a hand-off's woken thread: the next piece's, where on a thread
    nxt[:-1] = np.where(own[1:], seg_tid[1:], -1)
    hand = kind_of == _HAND
    whose[hand] = nxt[hand]
    h_start, h_end, h_tid = states.holder_runs()
    gil_ns = np.zeros(n, dtype=np.int64)
    wake_ns = np.zeros(n, dtype=np.int64)  # a pool's thread parked, being handed the ready op
    conds: dict[int, PoolCondition] = {}  # per segment kind code, or per waiting thread (as -1 - tid)
    for code, pool in ((_QUEUE, engine), (_POOL, custom)):
        mine = np.flatnonzero(kind_of == code)
        if pool is not None and len(mine):
            conds[code] = pool
            wake_ns[mine] = pool.time_in(PoolCondition.IDLE, a[mine], b[mine])
            if len(h_start):
                gil_ns[mine] = pool.time_in(PoolCondition.GIL, a[mine], b[mine])
    if len(h_start):
        for w in np.unique(whose[whose >= 0]).tolist():
            mine = np.flatnonzero(whose == w)
            cond = conds[-1 - w] = states.pool_condition(np.array([w], dtype=np.int64))  # GIL while w waited for it
            gil_ns[mine] = cond.time_in(PoolCondition.GIL, a[mine], b[mine])
    # The program's blocked runs (ThreadStates keeps (tid, start) order, so a subset is sorted too).
    blk = np.flatnonzero(states.state == ThreadState.BLOCKED)
    blk_tid, blk_start, blk_end = states.tid[blk], states.start[blk], states.end[blk]
    prog = np.flatnonzero(kind_of == _PROG)
    blocked_ns = np.zeros(n, dtype=np.int64)
    if len(prog) and len(blk):
        blocked_ns[prog] = states.overlap(seg_tid[prog], a[prog], b[prog])[:, STATES.index(ThreadState.BLOCKED)]
    # The thread a hand-off or a program's wait waits on, ready and not yet run by the OS (woken,
    # not yet on a CPU): a wake, not the engine's bookkeeping after the op. Not within a thread's
    # own work (an op's run, a Python): a thread without a CPU there is one busy beside others
    # (BLAS's threads on every core: 16 % of a path of dots read "wake" that way).
    rnb = np.flatnonzero(states.state == ThreadState.RUNNABLE)
    rnb_tid, rnb_start, rnb_end = states.tid[rnb], states.start[rnb], states.end[rnb]
    on_w = np.flatnonzero((whose >= 0) & (hand | (kind_of == _WAIT)))
    if len(on_w) and len(rnb):
        wake_ns[on_w] = ThreadStates._covered(rnb_tid, rnb_start, rnb_end, whose[on_w], a[on_w], b[on_w])
    cut = np.flatnonzero((gil_ns > 0) | (blocked_ns > 0) | (wake_ns > 0))
    if not len(cut):
        return path
    pieces: list[tuple[int, int, int, int, int, int, int]] = []  # (segment index, start, end, kind, tid, span, about)
    cols = (a[cut], b[cut], kind_of[cut], seg_tid[cut], path.seg_span[cut], path.seg_about[cut], whose[cut])
    for i, lo, hi, kind, tid, span, about, w in zip(cut.tolist(), *(c.tolist() for c in cols), strict=True):
        over: list[tuple[int, int, int, int]] = []  # (start, end, kind, tid) replacing the segment's own kind
        if wake_ns[i] > 0 and kind in (_HAND, _WAIT):
            over += [(x, y, _WAKE, tid) for x, y in thread_runs(rnb_tid, rnb_start, rnb_end, w, lo, hi)]
        elif wake_ns[i] > 0:
            over += [(x, y, _WAKE, tid) for x, y in _pieces_in(conds[kind], PoolCondition.IDLE, lo, hi)]
        if gil_ns[i] > 0:
            for ga, gb in _pieces_in(conds[-1 - w] if w >= 0 else conds[kind], PoolCondition.GIL, lo, hi):
                # Within the GIL wait: one piece per holder run (disjoint, so sorted by end too), and
                # one of no thread (-1) where no holder is known: a wait for the GIL all the same.
                j = max(0, int(np.searchsorted(h_end, ga, side="right")))
                at = ga
                while j < len(h_start) and h_start[j] < gb:
                    x, y = max(ga, int(h_start[j])), min(gb, int(h_end[j]))
                    if y > x:
                        if x > at:
                            over.append((at, x, _GIL, -1))
                        over.append((x, y, _GIL, int(h_tid[j])))
                        at = y
                    j += 1
                if gb > at:
                    over.append((at, gb, _GIL, -1))
        if blocked_ns[i] > 0:
            over += [(x, y, _BLOCKED, tid) for x, y in thread_runs(blk_tid, blk_start, blk_end, tid, lo, hi)]
        _tile(pieces, i, lo, hi, kind, tid, span, about, over)
    p = np.array(pieces, dtype=np.int64).reshape(-1, 7)
    # Each GIL piece runs the span its holder ran at its middle: one search per holder, not per piece.
    on_gil = p[:, 3] == _GIL
    for holder in np.unique(p[on_gil, 4]).tolist():
        if holder < 0:  # no holder known: the piece names the op that waited (its ``about``)
            continue
        rows = np.flatnonzero(on_gil & (p[:, 4] == holder))
        p[rows, 5] = span_at(table, holder, (p[rows, 1] + p[rows, 2]) // 2)
    return _with_pieces(path, cut, p)


def mark_held_back(path: CriticalPath, table: SpanTable) -> CriticalPath:
    """The path with the program's time inside its ``Backpressure`` spans (a push the engine held
    while too many ops were pending) as ``held_back`` segments: a ``program`` or ``blocked`` piece
    of the thread that was held, cut where the span begins and ends. Without it, a loop pushing
    3,000 trivial custom ops had 88 ms of its 165 ms path "blocked between its pushes" and 45 ms
    "the program's own Python", its thread held back for 111 ms; marked, a run of it had 98 ms of
    its 153 ms path held back, 10 ms blocked and 39 ms the program's own (the pure-Python path
    is held too, and where no thread states were sampled the held time read as the program's)."""
    h_tid, h_start, h_end = table.held_back()
    if not len(h_tid) or not len(path):
        return path
    kind_of, a, b, seg_tid = path.seg_kind, path.seg_start, path.seg_end, path.seg_tid
    pieces: list[tuple[int, int, int, int, int, int, int]] = []  # (segment index, start, end, kind, tid, span, about)
    cut: list[int] = []
    for i in np.flatnonzero((kind_of == _PROG) | (kind_of == _BLOCKED)).tolist():
        lo, hi, tid = int(a[i]), int(b[i]), int(seg_tid[i])
        runs = thread_runs(h_tid, h_start, h_end, tid, lo, hi)
        if runs:
            cut.append(i)
            over = [(x, y, _HELD, tid) for x, y in runs]
            _tile(pieces, i, lo, hi, int(kind_of[i]), tid, int(path.seg_span[i]), int(path.seg_about[i]), over)
    if not cut:
        return path
    return _with_pieces(path, cut, np.array(pieces, dtype=np.int64).reshape(-1, 7))


def mark_collections(path: CriticalPath, table: SpanTable) -> CriticalPath:
    """The path with the program's own time during a garbage collection on its thread named after
    the collection: a ``program`` piece cut where the collection's span begins and ends, the part
    inside it a ``program`` segment on that span ("garbage collection (generation 2) on
    MainThread"). A program that collected for 44 ms right after its pushes, holding the GIL so that
    no engine worker could start them, had a path of 100 % "MainThread (the program's own Python)".
    (A collection on a thread whose GIL others waited for is named by :func:`refine_by_thread_states`:
    its ``gil`` pieces run the span the holder ran, the collection's.)"""
    rows = table.collections()
    if not len(rows) or not len(path):
        return path
    c_tid, c_start, c_end = table.tid[rows], table.start[rows], table.end[rows]
    kind_of, a, b, seg_tid = path.seg_kind, path.seg_start, path.seg_end, path.seg_tid
    # The program pieces each collection meets: the path tiles time, so they lie between two sorted
    # searches of its starts. Collections are few (a millisecond or more each); a loop's program
    # gaps may be a million, so these are found from the collections' side.
    over: dict[int, list[tuple[int, int, int, int, int]]] = {}  # segment -> (start, end, kind, tid, span)
    for row, ct, cs, ce in zip(rows.tolist(), c_tid.tolist(), c_start.tolist(), c_end.tolist(), strict=True):
        idx = np.arange(max(0, int(np.searchsorted(a, cs, side="right")) - 1), int(np.searchsorted(a, ce, side="left")))
        for i in idx[(kind_of[idx] == _PROG) & (seg_tid[idx] == ct) & (b[idx] > cs)].tolist():
            over.setdefault(i, []).append((max(cs, int(a[i])), min(ce, int(b[i])), _PROG, ct, row))
    if not over:
        return path
    pieces: list[tuple[int, int, int, int, int, int, int]] = []  # (segment index, start, end, kind, tid, span, about)
    cut = sorted(over)
    for i in cut:
        span, about = int(path.seg_span[i]), int(path.seg_about[i])
        _tile(pieces, i, int(a[i]), int(b[i]), _PROG, int(seg_tid[i]), span, about, over[i])
    return _with_pieces(path, cut, np.array(pieces, dtype=np.int64).reshape(-1, 7))


def thread_runs(r_tid: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, tid: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The runs of thread ``tid`` that meet ``[lo, hi)``, clipped to it. The runs are sorted by
    (thread, start) and a thread's are disjoint, so its stretch is sorted by end too: four sorted
    searches, no scan."""
    t_lo = int(np.searchsorted(r_tid, tid, side="left"))
    t_hi = int(np.searchsorted(r_tid, tid, side="right"))
    j0 = t_lo + int(np.searchsorted(r_end[t_lo:t_hi], lo, side="right"))
    j1 = t_lo + int(np.searchsorted(r_start[t_lo:t_hi], hi, side="left"))
    return [(max(lo, x), min(hi, y)) for x, y in zip(r_start[j0:j1].tolist(), r_end[j0:j1].tolist(), strict=True)]


def _tile(
    pieces: list[tuple[int, int, int, int, int, int, int]],
    i: int,
    lo: int,
    hi: int,
    kind: int,
    tid: int,
    span: int,
    about: int,
    over: Sequence[tuple[int, ...]],
) -> None:
    """Segment ``i`` (``[lo, hi)``, its kind, thread, span and about) as pieces appended to ``pieces``:
    ``over``'s ``(start, end, kind, tid[, span])`` parts in their own kind, on the span given (a
    collection's), else on none (a GIL piece's is found by its caller; a ``wake`` piece, or a GIL
    one of no known holder, keeps the segment's: it is still that op's wait), the rest in the
    segment's, tiling it in time order."""
    at = lo
    for x, y, k, who, *on in sorted(over):
        x = max(x, at)
        if y <= x:
            continue
        if x > at:
            pieces.append((i, at, x, kind, tid, span, about))
        own = on[0] if on else (span if k == _WAKE or (k == _GIL and who < 0) else -1)
        pieces.append((i, x, y, k, who, own, about))
        at = y
    if hi > at:
        pieces.append((i, at, hi, kind, tid, span, about))


def _with_pieces(path: CriticalPath, cut: np.ndarray | list[int], p: np.ndarray) -> CriticalPath:
    """``path`` with its segments ``cut`` replaced by the pieces ``p`` (rows of segment index, start,
    end, kind, tid, span, about; a cut segment's pieces tile it in time order), in path order."""
    keep = np.ones(len(path), dtype=bool)
    keep[cut] = False
    kept = np.flatnonzero(keep)
    a = path.seg_start
    order = np.lexsort((np.concatenate([a[kept], p[:, 1]]), np.concatenate([kept, p[:, 0]])))
    whole = (a, path.seg_end, path.seg_kind, path.seg_tid, path.seg_span, path.seg_about)
    col = [np.concatenate([c[kept], p[:, k]])[order] for k, c in enumerate(whole, 1)]
    return CriticalPath(
        path.start, path.end, col[0], col[1], col[2].astype(np.int8), col[3], col[4], col[5],
        path.approximate, path.note, _trace=path._trace,
    )  # fmt: skip


def _pieces_in(cond: PoolCondition, code: int, a: int, b: int) -> list[tuple[int, int]]:
    """The parts of ``[a, b)`` in which the pool was in condition ``code``."""
    t, codes = cond.t, cond.code
    if not len(t):
        return []
    i = max(0, int(np.searchsorted(t, a, side="right")) - 1)
    out: list[tuple[int, int]] = []
    while i < len(t) and t[i] < b:
        lo = max(a, int(t[i]))
        hi = min(b, int(t[i + 1])) if i + 1 < len(t) else b
        if codes[i] == code and hi > lo:
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        i += 1
    return out
