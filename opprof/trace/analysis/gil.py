"""Where each custom op's Python time went with respect to the GIL, and who held it.

The split (:mod:`.split`) gives an invocation's *python* time; its thread CPU time alone could
only say "on a CPU" or "off a CPU: the GIL, sleep or I/O". With the sampler's thread states
(:mod:`opprof.trace.threadstates`) the Python time splits into **on a CPU** (holding the GIL, or
running C code that released it), **waiting for the GIL** (and who held it), **blocked** (asleep,
in I/O, on a lock), **waiting for a CPU** (a busy machine) and **not sampled** (the sampler's
edges, a thread it did not know). The parts sum to the Python time.

Python time is the Python spans' time less their blocked children (waits, inline sub-ops), as
the split counts it. A trace without thread states gives None: the readers then say they cannot
tell the GIL from sleep or I/O, and why (``metadata["gil"]["why_not"]``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..columns import ROLE_CODE, SpanTable
from ..data import TraceData
from ..ops import WAIT_ID_BASE, OpTable, short_site
from ..records import CUSTOM_POOL, ENGINE_POOL, Role
from ..threadstates import GIL_METADATA, STATES, ThreadState, ThreadStates, cpu_wait_ns
from .split import inline_subops

__all__ = [
    "OFF_CPU_WORTH_SAYING",
    "PYTHON_GIL_PARTS",
    "GilHolder",
    "PythonGil",
    "HandoffCost",
    "code_between",
    "cpu_waits",
    "handoff_costs",
    "no_gil_evidence",
    "python_gil",
    "queue_holders",
    "span_at",
]

#: The parts of a Python's time, in column order of :attr:`PythonGil.ns`.
PYTHON_GIL_PARTS = ("on CPU", "GIL wait", "blocked", "CPU wait", "not sampled")
_PART_OF_STATE = {
    ThreadState.HELD: 0,
    ThreadState.RUNNING: 0,
    ThreadState.WAIT: 1,
    ThreadState.BLOCKED: 2,
    ThreadState.RUNNABLE: 3,
    # Held the GIL but had no CPU: the Python waited for a CPU, and its waiters for it.
    ThreadState.HELD_OFF_CPU: 3,
}


#: A holder's time off a CPU is worth saying (the why-text, the timeline's hover) from this share
#: of its holding on: less is a sample's edge, not a machine that took its core.
OFF_CPU_WORTH_SAYING = 0.1


@dataclass(frozen=True)
class GilHolder:
    """A thread that held the GIL while an invocation's Python waited for it, and for how long."""

    tid: int
    thread: str  # the holder thread's name
    running: str  # the span it was running (the deepest one at the longest such wait), "" if none
    ns: int
    #: Running no span: the user's lines ("file:line") of the thread's ops just before and after
    #: that moment (:func:`code_between`), "" where it pushed none.
    after: str = ""
    before: str = ""
    #: Of ``ns``, how long the holder held the GIL off a CPU (``HELD_OFF_CPU``: the OS had given
    #: its CPU to other work, or C code kept the GIL while blocked): those waits were for a CPU.
    off_cpu_ns: int = 0

    def describe(self) -> str:
        """``Hog::pure_python on opprof-custom-0``; between ops, whose Python it was: the engine's
        own (its dispatch and bookkeeping) on a pool thread, else the program's code, placed
        between the lines that pushed its ops (``MainThread (your code after spin.py:12, before
        spin.py:15)``); a thread that pushed none is only named (a data loader of the user's)."""
        if self.running:
            return f"{self.running} on {self.thread}"
        if self.after and self.after == self.before:  # a loop whose one wait (or push) is on that line
            return f"{self.thread} (your code around {short_site(self.after)})"
        where = [f"{w} {short_site(line)}" for w, line in (("after", self.after), ("before", self.before)) if line]
        if not where or is_pool_thread(self.thread):
            return between_ops(self.thread, pushed=False)
        return f"{self.thread} (your code {', '.join(where)})"


def is_pool_thread(thread: str) -> bool:
    """Whether ``thread`` (a name) is one of the engine's own (a worker or a custom-op thread)."""
    return thread.startswith((ENGINE_POOL.thread_prefix, CUSTOM_POOL.thread_prefix))


def between_ops(thread: str, pushed: bool) -> str:
    """Whose Python a thread ran while it held the GIL outside any span, in words: the engine's own
    (dispatch and bookkeeping) on a pool thread; else the program's code, where the thread ``pushed``
    ops or waited for them; else the Python of a thread that never touched the engine (a user's
    data loader, a library's thread), which "between its ops" would misdescribe."""
    if is_pool_thread(thread):
        return f"{thread} (the engine's own Python, between ops)"
    if pushed:
        return f"{thread} (your code, between its ops)"
    return f"{thread} (its own Python, outside the engine's ops)"


@dataclass(eq=False)
class PythonGil:
    """Per invocation row (the order of :attr:`~.per_trace.Analysis.parents`): ``ns[k]`` is its
    Python time in each of :data:`PYTHON_GIL_PARTS`; ``holders[k]`` who held the GIL while it
    waited, most first."""

    ns: np.ndarray  # (invocations, len(PYTHON_GIL_PARTS)) int64
    holders: list[list[GilHolder]]
    period_ns: int


@dataclass(frozen=True)
class HandoffCost:
    """The engine's timed hand-offs to one pool's threads (``metadata["gil"]["handoffs"]``, written
    by the profiler from the engine's queues waited on in C): how many, and the median ns from the
    put to the OS running the woken thread, and from then to its holding the GIL."""

    count: int
    wake_ns: int
    gil_ns: int
    hop_ns: int  # the median of the whole hop, put to GIL held (not the sum of the two medians)
    wake_max_ns: int = 0  # the longest wake (0: not recorded, a file from before it was)


def handoff_costs(data: TraceData) -> dict[str, HandoffCost]:
    """Per pool (``"custom"``, ``"engine"``, and ``"all"`` of them), and for the program's waits
    (``"wait"``: a thread woken when the op it waited for was done): the hand-offs' cost, where the
    profile timed any."""
    meta = data.metadata.get(GIL_METADATA)
    hand = meta.get("handoffs") if isinstance(meta, dict) else None
    if not isinstance(hand, dict):
        return {}
    out = {}
    for pool in ("custom", "engine", "wait", "all"):
        got = hand.get(pool)
        if isinstance(got, dict) and got.get("count"):
            keys = ("count", "wake_ns_median", "gil_ns_median", "hop_ns_median", "wake_ns_max")
            out[pool] = HandoffCost(*(int(got.get(k, 0)) for k in keys))
    return out


def cpu_waits(data: TraceData) -> dict[str, int]:
    """ns the OS kept threads waiting for a CPU while recording (``metadata["cpu_wait"]``), summed
    per pool (``"engine"``, ``"custom"``) and per other thread by name; empty where not recorded."""
    out: dict[str, int] = {}
    for tid, ns in (cpu_wait_ns(data.metadata) or {}).items():
        if ns <= 0:
            continue
        name = data.thread_name(tid) or f"thread {tid}"
        pools = ((ENGINE_POOL.thread_prefix, "engine"), (CUSTOM_POOL.thread_prefix, "custom"))
        key = next((pool for prefix, pool in pools if name.startswith(prefix)), name)
        out[key] = out.get(key, 0) + ns
    return out


def no_gil_evidence(data: TraceData) -> str:
    """Why a trace has no thread states, in words for the readers."""
    meta = data.metadata.get(GIL_METADATA)
    why = meta.get("why_not") if isinstance(meta, dict) else None
    return str(why) if why else "this trace holds no record of the GIL (made without opprof's sampler, or by another tool)"


def python_gil(
    data: TraceData, table: SpanTable, states: ThreadStates, parents: np.ndarray, members: tuple[np.ndarray, np.ndarray]
) -> PythonGil:
    """Each invocation's Python time by GIL state, and its GIL holders (see the module docstring)."""
    k = len(parents)
    ns = np.zeros((k, len(PYTHON_GIL_PARTS)), dtype=np.int64)
    holders: list[list[GilHolder]] = [[] for _ in range(k)]
    idx, fam = members
    role, tid = table.role[idx], table.tid[idx]
    is_py = role == ROLE_CODE[Role.PYTHON]
    is_sub = (role == ROLE_CODE[Role.SUBOP]) | (role == ROLE_CODE[Role.DUMMY_WAIT])
    inline = inline_subops(fam, tid, is_py, is_sub, k)
    is_blocked = (role == ROLE_CODE[Role.WAIT]) | inline
    if not k or not np.any(is_py):
        return PythonGil(ns, holders, states.period_ns)
    by_state = np.zeros((k, len(STATES)), dtype=np.int64)
    for pick, sign in ((is_py, 1), (is_blocked, -1)):
        rows = idx[pick]
        got = states.overlap(table.tid[rows], table.start[rows], table.end[rows])
        np.add.at(by_state, fam[pick], sign * got)
    for j, s in enumerate(STATES):
        ns[:, _PART_OF_STATE[s]] += np.maximum(by_state[:, j], 0)
    py_rows = idx[is_py]
    python = np.bincount(fam[is_py], weights=table.end[py_rows] - table.start[py_rows], minlength=k)[:k]
    python -= np.bincount(fam[is_blocked], weights=table.end[idx[is_blocked]] - table.start[idx[is_blocked]], minlength=k)[:k]
    python = np.rint(python).astype(np.int64)
    sampled_wait = ns[:, 1].copy()
    _on_cpu_by_its_clock(ns, python, table.cpu[py_rows], fam[is_py], np.bincount(fam[inline], minlength=k)[:k] > 0)
    ns[:, 4] = np.maximum(python - ns[:, :4].sum(axis=1), 0)
    _name_holders(data, table, states, py_rows, fam[is_py], holders)
    # The holders share the GIL wait the clock left: their sum stays the part they explain.
    for f in np.flatnonzero((sampled_wait > 0) & (ns[:, 1] != sampled_wait)).tolist():
        r = ns[f, 1] / sampled_wait[f]
        holders[f] = [replace(h, ns=round(h.ns * r), off_cpu_ns=round(h.off_cpu_ns * r)) for h in holders[f]]
    return PythonGil(ns, holders, states.period_ns)


def _on_cpu_by_its_clock(ns: np.ndarray, python: np.ndarray, cpu: np.ndarray, py_fam: np.ndarray, inline: np.ndarray) -> None:
    """Make each invocation's "on CPU" part (``ns[:, 0]``, from the sampled states) agree with its
    Pythons' CPU clocks, read exactly around each call; in place. The states are a sample a period
    (1-4 ms): a Python that held the GIL at the sample before its 2 ms sleep was "on CPU" until the
    next sample, 0.84 ms where its clock said 0.1 ms. So the clock's time is on a CPU, and what the
    states gave beyond it goes to their off-CPU parts (GIL wait, blocked, CPU wait) in their
    proportions, or to "not sampled" where they saw none; where the clock says more than the
    states, the difference comes out of "not sampled" first, then out of the off-CPU parts.

    Where sub-ops ran inline on the Python's thread (the naive engine: their CPU time is in the
    clock, their time is not the Python's) the clock is only an upper bound: the states stand,
    capped by it. Where one of an invocation's Pythons had no clock read (-1), the states stand."""
    k = len(python)
    known = cpu >= 0
    fam_cpu = np.bincount(py_fam, weights=np.where(known, cpu, 0), minlength=k)[:k]
    unread = np.bincount(py_fam, weights=~known, minlength=k)[:k] > 0
    on = ns[:, 0].astype(np.float64)
    off = ns[:, 1:4].astype(np.float64)
    exact = ~unread & ~inline
    target = np.where(exact, np.minimum(fam_cpu, python), np.where(unread, on, np.minimum(on, fam_cpu)))
    target = np.maximum(target, 0.0)
    off_sum = off.sum(axis=1)
    free = np.maximum(python - on - off_sum, 0.0)  # "not sampled" as the states leave it
    more = np.maximum(target - on, 0.0)  # the clock says more: from "not sampled", then from off-CPU
    from_off = np.maximum(more - free, 0.0)
    less = np.maximum(on - target, 0.0)  # the states said more: to off-CPU, or to "not sampled"
    scale = np.ones(k)
    has_off = off_sum > 0
    scale[has_off] = (off_sum[has_off] - from_off[has_off] + less[has_off]) / off_sum[has_off]
    off *= np.maximum(scale, 0.0)[:, None]
    ns[:, 0] = np.rint(target).astype(np.int64)
    ns[:, 1:4] = np.floor(off).astype(np.int64)  # floor: the parts never sum past the Python's time


def _name_holders(
    data: TraceData, table: SpanTable, states: ThreadStates, py_rows: np.ndarray, py_fam: np.ndarray, out: list[list[GilHolder]]
) -> None:
    """Fill ``out[row]`` with the holders of the GIL while that invocation's Python waited for it."""
    rows, holder, ns, off = states.holders(table.tid[py_rows], table.start[py_rows], table.end[py_rows])
    if not len(rows):
        return
    fam = py_fam[rows]
    key = fam * (int(holder.max()) + 2) + (holder + 1)
    used, group = np.unique(key, return_inverse=True)
    total = np.bincount(group.ravel(), weights=ns, minlength=len(used))
    total_off = np.bincount(group.ravel(), weights=off, minlength=len(used))
    names = data.thread_names()
    running: dict[int, tuple[str, str, str]] = {}
    for u, t, t_off in zip(used.tolist(), total.tolist(), total_off.tolist(), strict=True):
        f, h = divmod(u, int(holder.max()) + 2)
        h -= 1
        if h < 0:  # no holder to name (the GIL changing hands at that sample, or an unknown thread)
            continue
        if h not in running:
            running[h] = _running_on(data, table, states, h)
        span, after, before = running[h]
        out[f].append(GilHolder(h, names.get(h, f"thread {h}"), span, round(t), after, before, round(t_off)))
    for row in out:
        row.sort(key=lambda x: -x.ns)


def queue_holders(
    data: TraceData, table: SpanTable, states: ThreadStates, parents: np.ndarray, pool_tids: np.ndarray
) -> dict[str, list[GilHolder]]:
    """Per op type (parent name): who held the GIL while a pool thread (``pool_tids``) waited for
    it during the type's calls, summed by holder over the time some call of the type was in
    flight, most first. (A moment two pool threads both waited counts twice: this ranks the
    holders, it adds to no total. A moment four calls were in flight counts once: summed call by
    call, a holder seen while four were counted four times against one seen beside a single call.)
    ``states``: :meth:`~opprof.trace.threadstates.ThreadStates.holders_checked` runs, names taken as they are."""
    wait = np.flatnonzero((states.state == ThreadState.WAIT) & np.isin(states.tid, pool_tids))
    if not len(wait) or not len(parents):
        return {}
    lo, hi, codes = _in_flight(table.start[parents], table.end[parents], table.name[parents])
    names = table.str_list(codes)
    thread_names = data.thread_names()
    out: dict[str, dict[int, list[int]]] = {}  # name -> holder -> [ns, ns of it off a CPU]
    # Each window asked of each pool thread's own runs (disjoint), then summed over the threads:
    # the runs of several threads taken as one thread's overlap, which the coverage's sorted sums
    # do not allow (a window then got the overlap of others' runs too).
    waiters = np.unique(states.tid[wait])
    q_tid, q_lo, q_hi = np.repeat(waiters, len(lo)), np.tile(lo, len(waiters)), np.tile(hi, len(waiters))

    def per_window(tid: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not len(tid):
            return np.zeros(len(lo), dtype=np.int64)
        return ThreadStates._covered(tid, a, b, q_tid, q_lo, q_hi).reshape(len(waiters), len(lo)).sum(axis=0)

    for h in np.unique(states.holder[wait]).tolist():
        if h < 0:  # the GIL changing hands at that sample, or a thread the sampler did not know: no name
            continue
        runs = wait[states.holder[wait] == h]
        got = per_window(states.tid[runs], states.start[runs], states.end[runs])
        got_off = per_window(*states.off_cpu_parts(runs, h))
        for name, ns, ns_off in zip(names, got.tolist(), got_off.tolist(), strict=True):
            if ns > 0:
                by = out.setdefault(name, {}).setdefault(h, [0, 0])
                by[0] += ns
                by[1] += ns_off
    running = {h: _running_on(data, table, states, h) for by in out.values() for h in by}
    return {
        name: sorted(
            (
                GilHolder(h, thread_names.get(h, f"thread {h}"), running[h][0], ns, *running[h][1:], off_cpu_ns=off)
                for h, (ns, off) in by.items()
            ),
            key=lambda x: -x.ns,
        )
        for name, by in out.items()
    }


def _in_flight(start: np.ndarray, end: np.ndarray, code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The windows ``[start, end)`` merged per name code where they overlap: (start, end, code) of
    the times some window of each name covers, disjoint within a name."""
    order = np.lexsort((start, code))
    c, a, b = code[order], start[order].astype(np.int64), end[order].astype(np.int64)
    # Each window's end so far within its name: a running maximum, each name lifted above the last's.
    base = int(a.min())
    span = int(b.max()) - base + 1
    lift = np.unique(c, return_inverse=True)[1].ravel().astype(np.int64) * span
    reach = np.maximum.accumulate(b - base + lift) - lift + base
    new = np.ones(len(c), dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (a[1:] > reach[:-1])
    first = np.flatnonzero(new)
    return a[first], reach[np.append(first[1:], len(c)) - 1], c[first]


def _running_on(data: TraceData, table: SpanTable, states: ThreadStates, holder: int) -> tuple[str, str, str]:
    """What thread ``holder`` ran at the middle of the longest time others waited for the GIL it
    held: (the deepest span, "" for none; and where it ran none, the lines around that moment,
    :func:`code_between`)."""
    if holder < 0:
        return "", "", ""
    runs = np.flatnonzero((states.state == ThreadState.WAIT) & (states.holder == holder))
    if not len(runs):
        return "", "", ""
    r = runs[np.argmax(states.end[runs] - states.start[runs])]
    at = np.array([(int(states.start[r]) + int(states.end[r])) // 2], dtype=np.int64)
    (row,) = span_at(table, holder, at).tolist()
    if row >= 0:
        return table.strings[table.name[row]], "", ""
    (after,), (before,) = code_between(data.ops, holder, at)
    return "", after, before


def code_between(ops: OpTable | None, tid: int, at: np.ndarray) -> tuple[list[str], list[str]]:
    """Per moment ``at``: the user's lines ("file:line") of the last op thread ``tid`` pushed (or
    waited on) by then and of the first it pushed after ("" none). A program holding the GIL
    between its ops ran the code between those two lines: the recording has no frames there, but
    it knows where each push came from."""
    at = np.asarray(at, dtype=np.int64)
    none = [""] * len(at)
    if ops is None or not len(ops):
        return none, list(none)
    rows = np.flatnonzero((ops.pusher == tid) & (ops.site >= 0) & (ops.push >= 0))
    if not len(rows):
        return none, list(none)
    rows = rows[np.argsort(ops.push[rows], kind="stable")]
    push, site = ops.push[rows], ops.site[rows]
    i = np.searchsorted(push, at, side="right")
    after = [ops.strings[site[k - 1]] if k > 0 else "" for k in i.tolist()]
    before = [ops.strings[site[k]] if k < len(rows) else "" for k in i.tolist()]
    return after, before


#: Steps back from the last span started before a moment, looking for the deepest one still open.
_SPAN_AT_STEPS = 64


def span_at(t: SpanTable, tid: int, at: np.ndarray) -> np.ndarray:
    """Per moment ``at``: the row of the deepest span on thread ``tid`` open then (-1: none), for what
    a thread holding the GIL ran. Spans of a thread nest, so it is the last one started by then that
    has not ended: found stepping back from the last started (at most :data:`_SPAN_AT_STEPS` steps;
    past them, the outermost open span, found by one sorted search over the thread's top-level
    spans). A custom-op parent, which crosses threads, is no thread's span; nor is a wait (its op
    id in the waits' range), which runs no Python of its own: a thread seen holding the GIL in one
    ran the engine's Python on its way in or out of it, for the Python around it or the user's line
    that waited ("held most by WaitForVar on MainThread" read as if a wait held the GIL)."""
    rows = np.flatnonzero((t.tid == tid) & (t.role != ROLE_CODE[Role.PARENT]) & (t.op < WAIT_ID_BASE))
    out = np.full(len(at), -1, dtype=np.int64)
    if not len(rows):
        return out
    if np.any(np.diff(t.start[rows]) < 0):  # a table is sorted by (start, -end); a list-built one may not be
        rows = rows[np.lexsort((-t.end[rows], t.start[rows]))]
    start, end = t.start[rows], t.end[rows]
    j = np.searchsorted(start, at, side="right") - 1
    todo = j >= 0
    for _ in range(_SPAN_AT_STEPS):
        if not todo.any():
            break
        hit = todo & (end[np.maximum(j, 0)] > at)
        out[hit] = rows[j[hit]]
        todo &= ~hit
        j = np.where(todo, j - 1, j)
        todo &= j >= 0
    if todo.any():  # many spans ended in between: the outermost open one
        reach = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]))
        top = np.flatnonzero(start >= reach)
        k = np.searchsorted(start[top], at[todo], side="right") - 1
        ok = (k >= 0) & (end[top[np.maximum(k, 0)]] > at[todo])
        out[np.flatnonzero(todo)[ok]] = rows[top[k[ok]]]
    return out
