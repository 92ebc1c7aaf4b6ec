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
from dataclasses import dataclass, field

import numpy as np

from .columns import ROLE_CODE, SpanTable
from .data import TraceData
from .ops import OpKind, OpTable
from .records import Role

__all__ = ["CriticalPath", "Segment", "SegmentKind", "critical_path"]


class SegmentKind(str, enum.Enum):
    """What a piece of the critical path was."""

    RUN = "run"  # an engine op executing (a sub-op, a plain op, a Dummy_Wait)
    PYTHON = "python"  # a custom op's Python (on a CPU or not)
    QUEUE = "queue"  # an op ready, waiting for an engine worker (or the hand-off to one)
    CUSTOM_POOL = "custom_pool"  # a custom op started, waiting for a custom-op thread
    HANDOFF = "handoff"  # an op completed; the engine making its dependents ready
    WAIT = "wait"  # a wait that ended without an op ending it
    PROGRAM = "program"  # the user's thread running its own Python between pushes and waits


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


@dataclass(eq=False)
class CriticalPath:
    """The segments, in time order, tiling ``[start, end]``; ``slack`` per span (ns, -1 unknown)."""

    start: int
    end: int
    segments: list[Segment]
    approximate: bool  # True: the trace had no engine edges (see ``note``)
    note: str
    _slack: np.ndarray | None = field(default=None, repr=False)
    _trace: TraceData | None = field(default=None, repr=False)

    @property
    def total(self) -> int:
        return self.end - self.start

    @property
    def spans(self) -> np.ndarray:
        """Indices of the spans on the path (each once, in path order)."""
        s = [g.span for g in self.segments if g.span >= 0]
        return np.array(list(dict.fromkeys(s)), dtype=np.int64)

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
        out: dict[str, int] = {}
        for g in self.segments:
            out[g.kind.value] = out.get(g.kind.value, 0) + g.dur
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def by_name(self, top: int = 10) -> list[tuple[str, str, int]]:
        """(kind, name, ns) of the path's largest contributors, summed by name."""
        out: dict[tuple[str, str], int] = {}
        for g in self.segments:
            key = (g.kind.value, g.name)
            out[key] = out.get(key, 0) + g.dur
        return [(k, n, v) for (k, n), v in sorted(out.items(), key=lambda kv: -kv[1])[:top]]

    def check(self) -> list[str]:
        """What breaks the tiling (for :func:`~.validate.validate`)."""
        problems = []
        cur = self.start
        for g in self.segments:
            if g.start != cur or g.end < g.start:
                problems.append(f"critical path segment {g.kind.value} {g.name!r} [{g.start}, {g.end}] does not follow {cur}")
                break
            cur = g.end
        if not problems and cur != self.end:
            problems.append(f"critical path ends at {cur}, not at the run's end {self.end}")
        return problems


class _Index:
    """Lookups the walk needs, made once: op rows <-> spans, families, each thread's spans."""

    def __init__(self, t: SpanTable, ops: OpTable) -> None:
        self.t, self.o = t, ops
        n_rows = len(ops)
        self.span_of_row = np.full(n_rows, -1, dtype=np.int64)
        has = np.flatnonzero(t.op >= 0)
        rows = ops.rows_of(t.op[has])
        ok = rows >= 0
        self.span_of_row[rows[ok]] = has[ok]
        parent = ROLE_CODE[Role.PARENT]
        self.parent_of: dict[int, int] = {}
        self.python_of: dict[int, int] = {}
        self.dummy_row_of: dict[int, int] = {}
        fam = np.flatnonzero(t.inv >= 0)
        roles, invs, span_ops = t.role[fam].tolist(), t.inv[fam].tolist(), t.op[fam].tolist()
        for i, r, v, op in zip(fam.tolist(), roles, invs, span_ops, strict=True):
            if r == parent:
                self.parent_of.setdefault(v, i)
            elif r == ROLE_CODE[Role.PYTHON]:
                self.python_of.setdefault(v, i)
            elif r == ROLE_CODE[Role.DUMMY_WAIT] and op >= 0:
                row = int(ops.rows_of(np.array([op]))[0])
                if row >= 0:
                    self.dummy_row_of[v] = row
        # Per thread: its spans by end (the walk asks "what ended last before t here?"), and its
        # Pythons by start.
        self.by_thread: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        order = np.lexsort((t.end, t.tid))
        tids = t.tid[order]
        cut = np.flatnonzero(np.diff(tids)) + 1
        for chunk in np.split(order, cut):
            if len(chunk):
                self.by_thread[int(t.tid[chunk[0]])] = (t.end[chunk], chunk)
        self.start, self.end = t.start.tolist(), t.end.tolist()
        self.role, self.inv, self.tid = t.role.tolist(), t.inv.tolist(), t.tid.tolist()
        self.names = t.str_list(t.name)
        self.kind, self.ready, self.push = ops.kind.tolist(), ops.ready.tolist(), ops.push.tolist()
        self.pusher, self.by = ops.pusher.tolist(), ops.by.tolist()
        self.row_of_op = {op: r for r, op in enumerate(ops.op.tolist())}
        self.span_rows = self.span_of_row.tolist()

    def last_before(self, tid: int, t: int, lo: int | None = None) -> int:
        """The span on ``tid`` that ended last at or before ``t`` (starting at ``lo`` or later), -1 none."""
        got = self.by_thread.get(tid)
        if got is None:
            return -1
        ends, idx = got
        k = int(np.searchsorted(ends, t, side="right")) - 1
        while k >= 0:
            i = int(idx[k])
            if lo is None or self.start[i] >= lo:
                return i
            if ends[k] < lo:  # ends are sorted: nothing earlier starts at lo or later and ends here
                return -1
            k -= 1
        return -1

    def python_at(self, tid: int, t: int) -> int:
        """The Python span running on ``tid`` at ``t`` (start < t <= end), -1 none."""
        got = self.by_thread.get(tid)
        if got is None:
            return -1
        ends, idx = got
        k = int(np.searchsorted(ends, t, side="left"))
        py = ROLE_CODE[Role.PYTHON]
        for j in range(k, min(k + 64, len(idx))):  # Pythons on one thread do not overlap
            i = int(idx[j])
            if self.role[i] == py and self.start[i] < t <= self.end[i]:
                return i
        return -1


def critical_path(trace: TraceData) -> CriticalPath:
    """The critical path of ``trace`` (see the module docstring)."""
    t, ops = trace.table, trace.ops
    if not len(t):
        return CriticalPath(0, 0, [], True, "an empty trace has no critical path", _trace=trace)
    if ops is None or not len(ops) or not bool(np.any(t.op >= 0)):
        return _by_thread(trace)
    ix = _Index(t, ops)
    end = int(t.end.max())
    start = min(int(t.start.min()), int(ops.push[ops.push >= 0].min()) if np.any(ops.push >= 0) else end)
    segs: list[tuple[int, int, SegmentKind, int, str, int]] = []  # built backwards

    def add(a: int, b: int, kind: SegmentKind, tid: int, name: str, span: int = -1) -> int:
        """Add ``[a, b]`` clipped to the cursor ``b``; return the new cursor."""
        a = min(a, b)
        if b > a:
            segs.append((a, b, kind, tid, name, span))
        return a

    # The last thing to finish: prefer an engine op or wait among the spans ending at ``end``.
    last = np.flatnonzero(t.end == end)
    with_op = last[t.op[last] >= 0]
    first = int(with_op[0]) if len(with_op) else int(last[0])
    cursor = end
    todo: tuple[str, int] | None
    if t.op[first] >= 0:
        todo = ("op", ix.row_of_op[int(t.op[first])])
    else:
        todo = ("thread", ix.tid[first])
    steps = 0
    limit = 8 * (len(t) + len(ops)) + 16
    while todo is not None and cursor > start and steps < limit:
        steps += 1
        what, ref = todo
        todo = None
        if what == "op":
            row = ref
            kind = ix.kind[row]
            if kind == OpKind.CUSTOM:
                s = ix.span_rows[row]
                inv = ix.inv[s] if s >= 0 else -1
                d = ix.dummy_row_of.get(inv, -1)
                if d >= 0:
                    todo = ("op", d)  # a custom op completes when its Dummy_Wait runs
                continue
            s = ix.span_rows[row]
            if s < 0:
                break
            name, tid = ix.names[s], ix.tid[s]
            if kind == OpKind.WAIT:
                cursor = add(ix.end[s], cursor, SegmentKind.HANDOFF, tid, f"after {name}")
                by = ix.by[row]
                if by >= 0 and by in ix.row_of_op:
                    todo = ("op", ix.row_of_op[by])
                    continue
                cursor = add(ix.start[s], cursor, SegmentKind.WAIT, tid, name, s)
                todo = ("thread_at", tid)
                continue
            cursor = add(ix.end[s], cursor, SegmentKind.HANDOFF, tid, f"after {name}")
            cursor = add(ix.start[s], cursor, SegmentKind.RUN, tid, name, s)
            todo = ("ready", row)
        elif what == "ready":  # at an op's start: its queue, then what made it ready
            row = ref
            s = ix.span_rows[row]
            tid = ix.tid[s] if s >= 0 else 0
            name = ix.names[s] if s >= 0 else "op"
            cursor = add(ix.ready[row], cursor, SegmentKind.QUEUE, tid, f"{name} queued")
            by = ix.by[row]
            if by >= 0 and by in ix.row_of_op:
                todo = ("op", ix.row_of_op[by])
            else:
                cursor = add(ix.push[row], cursor, SegmentKind.QUEUE, tid, f"{name} queued")
                todo = ("thread", ix.pusher[row])
        else:  # "thread" / "thread_at": what thread ``ref`` was doing just before the cursor
            tid = ref
            py = ix.python_at(tid, cursor)
            if py >= 0:
                child = ix.last_before(tid, cursor, lo=ix.start[py])
                if child >= 0 and child != py and ix.role[child] in (ROLE_CODE[Role.WAIT], ROLE_CODE[Role.SUBOP]):
                    cursor = add(ix.end[child], cursor, SegmentKind.PYTHON, tid, ix.names[py], py)
                    op = int(t.op[child])
                    if op >= 0 and op in ix.row_of_op:
                        todo = ("op", ix.row_of_op[op])
                    continue
                cursor = add(ix.start[py], cursor, SegmentKind.PYTHON, tid, ix.names[py], py)
                p = ix.parent_of.get(ix.inv[py], -1)
                if p < 0:
                    break
                cursor = add(ix.start[p], cursor, SegmentKind.CUSTOM_POOL, tid, f"{ix.names[p]} queued for a custom-op thread", p)
                op = int(t.op[p])
                if op >= 0 and op in ix.row_of_op:
                    todo = ("ready", ix.row_of_op[op])
                continue
            prev = ix.last_before(tid, cursor)
            if prev < 0:
                break
            cursor = add(ix.end[prev], cursor, SegmentKind.PROGRAM, tid, _program_name(trace, tid))
            op = int(t.op[prev])
            if op >= 0 and op in ix.row_of_op:
                todo = ("op", ix.row_of_op[op])
            elif ix.role[prev] == ROLE_CODE[Role.PYTHON]:
                todo = ("thread", tid)
    if cursor > start:
        segs.append((start, cursor, SegmentKind.PROGRAM, 0, "before the first recorded op", -1))
    segments = [_segment(t, a, b, k, tid, name, s) for a, b, k, tid, name, s in reversed(segs)]
    note = "from the engine's recorded edges"
    if steps >= limit:
        note += f"; the walk stopped after {steps} steps (a cycle in the edges?)"
    return CriticalPath(start, end, segments, False, note, _trace=trace)


def _segment(t: SpanTable, a: int, b: int, kind: SegmentKind, tid: int, name: str, s: int) -> Segment:
    inv = int(t.inv[s]) if s >= 0 else -1
    return Segment(a, b, kind, tid, name, s, inv if inv >= 0 else None)


def _program_name(trace: TraceData, tid: int) -> str:
    return f"{trace.thread_name(tid) or f'thread {tid}'} (the program's own Python)"


# ---------------------------------------------------------------------------- without edges
def _top_level(t: SpanTable) -> np.ndarray:
    """Spans not inside another span of their thread (the thread's own sequence of work)."""
    order = np.lexsort((-t.end, t.start, t.tid))
    tid, end = t.tid[order], t.end[order]
    new_thread = np.ones(len(order), dtype=bool)
    new_thread[1:] = tid[1:] != tid[:-1]
    # The running max end within a thread, before each span: a span ending before it is nested.
    run = end.copy()
    keep = np.ones(len(order), dtype=bool)
    cur_end = -(2**62)
    for j in range(len(order)):  # one pass in Python; only traces without edges come here
        if new_thread[j]:
            cur_end = -(2**62)
        if end[j] <= cur_end:
            keep[j] = False
        else:
            cur_end = max(cur_end, int(run[j]))
    return order[keep]


def _by_thread(trace: TraceData) -> CriticalPath:
    """The approximation for traces without edges: thread order plus flow arrows."""
    t = trace.table
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
    arrive = {(int(a), int(b)): (int(c), int(d)) for a, b, c, d in zip(f.dst_tid, f.dst_ts, f.src_tid, f.src_ts, strict=True)}
    names = t.str_list(t.name)
    segs: list[tuple[int, int, SegmentKind, int, str, int]] = []
    cur = end
    last = np.flatnonzero(t.end[top] == end)
    s = int(top[last[0]]) if len(last) else int(np.argmax(t.end))
    tid = int(t.tid[s])
    steps, limit = 0, 4 * len(t) + 16
    while s >= 0 and cur > start and steps < limit:
        steps += 1
        a = min(int(t.start[s]), cur)
        if cur > a:
            segs.append((a, cur, SegmentKind.RUN, tid, names[s], s))
        cur = a
        src = arrive.get((tid, int(t.start[s])))
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
    segments = [_segment(t, a, b, k, tid_, name, sp) for a, b, k, tid_, name, sp in reversed(segs)]
    note = (
        "approximate: this trace has no recorded engine edges (another tool's, or Chrome JSON, which keeps "
        "none), so each span is taken to depend on the one before it on its thread and on the source of a "
        "flow arrow arriving at its start, as Holistic Trace Analysis assumes; record with opprof and save "
        ".opprof for the exact path"
    )
    return CriticalPath(start, end, segments, True, note, _trace=trace)


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
    ix = _Index(t, ops)
    # Nodes: the op rows (0..n-1), then one per Python span.
    py_spans = np.flatnonzero(t.role == ROLE_CODE[Role.PYTHON])
    n_nodes = n + len(py_spans)
    comp = np.full(n_nodes, end_run, dtype=np.int64)  # when each node completed
    span_of = np.concatenate([ix.span_of_row, py_spans])
    has_span = span_of >= 0
    comp[has_span] = t.end[span_of[has_span]]
    # A custom op completes when its Dummy_Wait does (its parent's end, which it shares).
    src_l: list[np.ndarray] = []
    dst_l: list[np.ndarray] = []

    # Through vars: in push order per var, a read follows the last write; a write follows the last
    # write and every read since.
    acc_row = np.repeat(np.arange(n), np.diff(ops.acc_at))
    var, wr = ops.acc_var, ops.acc_write
    kind = ops.kind
    use = kind[acc_row] != OpKind.WAIT
    if np.any(use):
        ar, av, aw = acc_row[use], var[use], wr[use]
        o = np.lexsort((ar, av))
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
        r = (~aw) & (nxt_after < len(ar))
        r &= av[np.minimum(nxt_after, len(ar) - 1)] == av
        src_l.append(ar[r])
        dst_l.append(ar[nxt_after[r]])
    # Waits: the op that ended each one.
    w = np.flatnonzero((kind == OpKind.WAIT) & (ops.by >= 0))
    wr_rows = ops.rows_of(ops.by[w])
    ok = wr_rows >= 0
    src_l.append(wr_rows[ok])
    dst_l.append(w[ok])
    var_src = np.concatenate(src_l) if src_l else np.zeros(0, np.int64)
    var_dst = np.concatenate(dst_l) if dst_l else np.zeros(0, np.int64)
    # Dependency edges: src may slip until dst's ready time (then dst moves along).
    ready = np.concatenate([ops.ready, np.full(len(py_spans), -1)])
    dep_lag = np.maximum(0, ready[var_dst] - comp[var_src])

    # Program order: each pushing thread's items (pushes and waits) in time order; a wait
    # completing later moves every later push of its thread, until its next wait.
    p_src: list[int] = []
    p_dst: list[int] = []
    p_lag: list[int] = []
    push, pusher = ops.push.tolist(), ops.pusher.tolist()
    kinds, readys = kind.tolist(), ops.ready.tolist()
    py_tid = {n + k: int(t.tid[s]) for k, s in enumerate(py_spans.tolist())}
    py_range = {n + k: (int(t.start[s]), int(t.end[s])) for k, s in enumerate(py_spans.tolist())}
    by_thread: dict[int, list[tuple[int, int]]] = {}
    for r in range(n):
        if push[r] >= 0 and pusher[r] > 0:
            by_thread.setdefault(pusher[r], []).append((push[r], r))
    custom_threads = set(py_tid.values())
    for tid_, items in by_thread.items():
        items.sort()
        if tid_ in custom_threads:
            continue  # pushes inside a Python follow that Python (below)
        last_wait = -1
        for ts, r in items:
            if last_wait >= 0:
                p_src.append(last_wait)
                p_dst.append(r)
                p_lag.append(max(0, readys[r] - ts))  # a push (or wait) slipping moves its ready (end) once past it
            if kinds[r] == OpKind.WAIT:
                last_wait = r
    # A custom op's Python: its custom op's start enables it; it enables the pushes it made.
    for node, (lo, hi) in py_range.items():
        for ts, r in by_thread.get(py_tid[node], []):
            if lo <= ts <= hi:
                p_src.append(node)
                p_dst.append(r)
                p_lag.append(max(0, readys[r] - ts))
    # A custom op completes with its Dummy_Wait.
    for inv, d in ix.dummy_row_of.items():
        p = ix.parent_of.get(inv, -1)
        if p >= 0 and t.op[p] >= 0:
            crow = ix.row_of_op.get(int(t.op[p]), -1)
            if crow >= 0:
                p_src.append(d)
                p_dst.append(crow)
                p_lag.append(0)
    src = np.concatenate([var_src, np.array(p_src, dtype=np.int64)])
    dst = np.concatenate([var_dst, np.array(p_dst, dtype=np.int64)])
    lag = np.concatenate([dep_lag, np.array(p_lag, dtype=np.int64)])
    # Backward pass in decreasing completion order: slack(x) = min(end - comp(x), min over edges
    # x -> y of slack(y) + lag). Every edge points to a node completing no earlier.
    slack = (end_run - comp).tolist()
    o = np.argsort(src, kind="stable")
    src, dst, lag = src[o], dst[o], lag[o]
    starts = np.searchsorted(src, np.arange(n_nodes + 1))
    order = np.lexsort((-np.arange(n_nodes), -comp)).tolist()  # latest completion first
    dst_l2, lag_l2, st = dst.tolist(), lag.tolist(), starts.tolist()
    # An edge may point at a node that completed earlier (a Python enables its first sub-ops);
    # passes repeat until nothing changes (two on every profile measured).
    for _ in range(8):
        changed = False
        for x in order:
            best = slack[x]
            for j in range(st[x], st[x + 1]):
                v = slack[dst_l2[j]] + lag_l2[j]
                if v < best:
                    best = v
            if best != slack[x]:
                slack[x] = best
                changed = True
        if not changed:
            break
    sl = np.array(slack, dtype=np.int64)
    out[span_of[has_span]] = np.maximum(0, sl[has_span])
    return out
