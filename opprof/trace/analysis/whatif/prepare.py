"""The recording read into the replay's inputs: each engine op's kind, vars, recorded duration
and dependencies from before the recording, the custom-op families, the program threads, and the
hand-off latencies calibrated from the trace (see :mod:`opprof.trace.analysis.whatif`).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from ...columns import ROLE_CODE, SpanTable
from ...data import TraceData
from ...ops import OpKind, OpTable
from ...records import CUSTOM_POOL, DEFAULT_MAX_PENDING, ENGINE_POOL, MAX_PENDING_KEY, Role, recorded_cpus
from ...threadstates import STATES, ThreadState, ThreadStates, cpu_outside_python
from ..critical import thread_runs
from .gil import (
    EXACT_PERIOD_NS,
    gil_shares,
    gil_transfer_ns,
    hand_offs_hold_gil,
    held_after_handoff,
    hop_held_ns,
    name_shares,
    one_holder,
    outside_holds,
    tail_held_ns,
)

__all__ = [
    "BORROWED",
    "LATENCY_KEY",
    "LATENCY_WORDS",
    "MODEL_METADATA",
    "POOL_PREFIXES",
    "CpuWork",
    "Recording",
    "extent",
    "prepare",
]

_PARENT = ROLE_CODE[Role.PARENT]
_PYTHON = ROLE_CODE[Role.PYTHON]
_DUMMY_ROLE = ROLE_CODE[Role.DUMMY_WAIT]
_CUSTOM, _DUMMY, _WAIT = int(OpKind.CUSTOM), int(OpKind.DUMMY), int(OpKind.WAIT)
_I64 = np.int64
#: The name prefixes of the engine's pool threads (opprof.trace.records), to tell them from the program's.
POOL_PREFIXES = (ENGINE_POOL.thread_prefix, CUSTOM_POOL.thread_prefix)

# Hand-off latencies (ns) for a trace that has no sample of a kind: what this engine shows on a
# typical two-core machine (a thread hand-off across cores costs 40-55 µs).
_DEFAULTS = {
    "engine_wake": 50_000,
    "engine_next": 10_000,
    "custom_wake": 100_000,
    "custom_next": 20_000,
    "wake_program": 40_000,
    "wake_python": 60_000,
    "quiet_wait": 5_000,
}
#: ``metadata[MODEL_METADATA]`` of a what-if prediction says how it was made; its
#: ``[LATENCY_KEY]`` the hand-off latencies (ns) the model used.
MODEL_METADATA = "what_if"
LATENCY_KEY = "latency_ns"
LATENCY_WORDS = {
    "engine_wake": "a ready op to an idle engine worker",
    "engine_next": "a worker from one op to its next",
    "custom_wake": "a custom op's start to its Python on an idle custom thread",
    "custom_next": "a custom thread from one Python to its next",
    "wake_program": "an op's end to the program waiting for it",
    "wake_python": "an op's end to the custom-op Python waiting for it",
    "quiet_wait": "a wait that does not block",
}
#: A kind of hand-off the trace has no sample of takes another kind's mean where that one has
#: samples (else its default): a custom-op Python's wait wakes as the program's does.
BORROWED = {"wake_python": "wake_program"}


@dataclass(eq=False)
class _Family:
    """One custom-op invocation: its engine op, its Python and its ``Dummy_Wait``."""

    custom: int  # row of its own engine op
    dummy: int  # row of its Dummy_Wait
    python: int  # span of its Python
    items: list[int]  # rows its Python pushed or waited in, in order
    gaps: list[int]  # the Python's own time before each item (ns, as recorded)
    tail: int  # ... and after the last
    dummy_delay: int  # from the Python's return to the push of Dummy_Wait
    gap_wait: list[int] | None = None  # of each gap (then the tail): ns it waited for the GIL
    gap_share: list[float] | None = None  # ... and the share of the rest that held it (see .gil)


@dataclass(eq=False)
class _Program:
    """A thread of the user's program: its pushes and waits, and the time between them."""

    tid: int
    items: list[int]
    gaps: list[int]  # before each item (without the time the engine held it back); the first is from the trace's origin
    held: list[int] = field(default_factory=list)  # of each gap: ns the engine held it back before the item (recorded)
    gap_wait: list[int] | None = None  # of each gap: ns it waited for the GIL
    gap_share: list[float] | None = None  # ... and the share of the rest that held it (see .gil)


@dataclass(eq=False)
class Recording:
    """What the replay reads of a trace, relative to its origin ``t0``, as Python lists (the
    simulation looks values up one at a time, where lists beat arrays by ~10x)."""

    t0: int
    kind: list[int]
    reads: list[list[int]]
    writes: list[list[int]]
    span: list[int]  # the recorded span of each row (a custom op's: its parent), -1 none
    dur: list[int]  # recorded duration of each op on its worker
    ext: list[int]  # when a dependency on an op from before the recording clears, -1 none
    quiet: list[int]  # a wait's duration when it does not block
    families: list[_Family]
    family_of: list[int]  # row of a custom op -> its family, -1 none
    custom_of: list[int]  # row of a Dummy_Wait -> its custom op's row, -1 none
    programs: list[_Program]
    end: int  # recorded end-to-end
    latency: dict[str, int]
    samples: dict[str, int]
    recorded_custom: int  # custom-op threads the recording used
    op_wait: list[int] | None = None  # each op's run: ns it waited for the GIL (see .gil)
    op_share: list[float] | None = None  # ... and the share of the rest that held it
    gil_sampled: bool = False  # the shares come from thread states (else from CPU time, or none)
    gil_transfer_ns: int = 0  # handing the GIL to a waiting thread (:func:`.gil.gil_transfer_ns`)
    gil_asleep_transfer_ns: int = 0  # to one that had waited long enough to sleep
    hop_held: dict[str, int] = field(
        default_factory=dict
    )  # a woken thread's GIL work before its own, by pool (:func:`.gil.hop_held_ns`)
    tail_held: int = 0  # a custom-op thread's GIL work after its Dummy_Wait's push (:func:`.gil.tail_held_ns`)
    hop_gil: bool = False  # hand-offs take the GIL (:func:`.gil.hand_offs_hold_gil`)
    had_gil: bool = True  # the run had a GIL: not a prediction made with ``gil=False`` (:func:`_ran_with_gil`)
    #: Threads outside the engine that held the GIL: (tid, asks, holds, gaps) each (:func:`.gil.outside_holds`).
    outside: list[tuple[int, list[int], list[int], list[int]]] = field(default_factory=list)
    #: The engine's back-pressure: a program's push waits while this many ops are pending, until
    #: half as many are (None: never, as recorded by the naive engine or in an older file).
    max_pending: int | None = None
    #: The CPU work the recording shows (:class:`CpuWork`); None without thread states, the native
    #: threads' CPU or the cores' count (the pure path, an older file).
    cpu: CpuWork | None = None


@dataclass(eq=False)
class CpuWork:
    """What a recording's run needed of the CPUs, as far as it shows: the ops' runs on a CPU (the
    sampled states inside them), the custom ops' Python (its CPU clock) and the process's threads
    outside Python (a native pool's), against the cores it had. The engine's polling between ops
    and a program's own Python are left out: a lower bound."""

    op_ns: list[int]  # per row: ns of its run on a CPU
    python_ns: list[int]  # per family: its Python's CPU time
    native_ns: int
    cores: int


def _mean(xs: list[int], key: str, latency: dict[str, int], samples: dict[str, int]) -> None:
    """The mean of one kind of hand-off, or its default where the trace has none.

    The mean, not the median: the replay adds one latency per hand-off, so the mean reproduces
    the recording's total, slow hand-offs included; they are skewed (a median of 15-30 µs, a
    quarter over 30-40 µs here) and the median made the replay of a chain of small custom ops
    10 % too fast (median of 9 recordings; 7.7 % with the mean, and the demo +1 % either way)."""
    good = [x for x in xs if x >= 0]
    samples[key] = len(good)
    latency[key] = int(np.mean(good)) if good else _DEFAULTS[key]


def _ran_with_gil(trace: TraceData) -> bool:
    """Whether the run a trace shows had a GIL: not a prediction made with ``gil=False`` (its
    model's metadata says so), else yes. Why it matters: such a prediction of two Pythons that
    spin at once, replayed with the GIL (or with its pieces sharing one), was 0.2-2.0 ms off itself
    (4.5-8.8 ms predicted)."""
    model = trace.metadata.get(MODEL_METADATA)
    return not (isinstance(model, dict) and model.get("gil") is False)


def prepare(trace: TraceData) -> Recording:
    """Read the trace's engine table and spans into the shape the simulation runs on."""
    t = trace.table
    o = trace.ops
    assert o is not None
    n = len(o)
    span_ops = t.op
    with_op = np.flatnonzero(span_ops >= 0)
    rows = o.rows_of(span_ops[with_op])
    ok = rows >= 0
    with_op, rows = with_op[ok], rows[ok]
    span = np.full(n, -1, dtype=_I64)
    is_par = t.role[with_op] == _PARENT
    span[rows[~is_par]] = with_op[~is_par]
    span[rows[is_par]] = with_op[is_par]  # a custom op's row: its parent, not any other span
    t0, end = extent(trace)

    kind = o.kind.astype(np.int64)
    push = np.where(o.push >= 0, o.push - t0, -1)
    ready = np.where(o.ready >= 0, o.ready - t0, -1)
    s_ok = span >= 0
    s_start = np.where(s_ok, t.start[np.maximum(span, 0)] - t0, -1) if len(t) else np.full(n, -1, dtype=_I64)
    s_end = np.where(s_ok, t.end[np.maximum(span, 0)] - t0, -1) if len(t) else np.full(n, -1, dtype=_I64)
    s_tid = np.where(s_ok, t.tid[np.maximum(span, 0)], -1) if len(t) else np.full(n, -1, dtype=_I64)
    # An op without a known push (not from opprof's profiler) is pushed when it became ready.
    push = np.where(push >= 0, push, np.where(ready >= 0, ready, np.maximum(s_start, 0)))
    dur = np.where(s_ok & (kind != _CUSTOM) & (kind != _WAIT), s_end - s_start, 0)

    # Families: the parent, Python and Dummy_Wait of each invocation.
    parent_of: dict[int, int] = {}
    python_of: dict[int, int] = {}
    dummy_of: dict[int, int] = {}
    members = np.flatnonzero(t.inv >= 0)
    for i, inv, role in zip(members.tolist(), t.inv[members].tolist(), t.role[members].tolist(), strict=True):
        if role == _PARENT:
            parent_of.setdefault(inv, i)
        elif role == _PYTHON:
            python_of.setdefault(inv, i)
        elif role == _DUMMY_ROLE:
            dummy_of.setdefault(inv, i)
    row_of_span = {int(s): r for r, s in enumerate(span.tolist()) if s >= 0}
    fam_rows: list[tuple[int, int, int]] = []  # (custom row, dummy row, python span)
    for inv, p in parent_of.items():
        c = row_of_span.get(p)
        y, d = python_of.get(inv), dummy_of.get(inv)
        dr = row_of_span.get(d) if d is not None else None
        if c is None or y is None or dr is None or kind[c] != _CUSTOM or kind[dr] != _DUMMY:
            continue  # an incomplete family: its op replays as a plain op
        fam_rows.append((c, dr, y))

    # Each row's actor: the Python whose window (same thread, within its span) holds its push,
    # else the program of its pushing thread.
    pusher = o.pusher.tolist()
    push_l, ready_l, kind_l = push.tolist(), ready.tolist(), kind.tolist()
    windows: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # tid -> (start, end, family)
    for f, (_, _, y) in enumerate(fam_rows):
        windows[int(t.tid[y])].append((int(t.start[y]) - t0, int(t.end[y]) - t0, f))
    for win in windows.values():
        win.sort()
    fam_items: list[list[int]] = [[] for _ in fam_rows]
    prog_items: dict[int, list[int]] = defaultdict(list)
    dummies = {dr for _, dr, _ in fam_rows}
    op_ids = o.op.tolist()
    order = sorted(range(n), key=lambda r: (push_l[r], op_ids[r]))
    for r in order:
        if r in dummies:
            continue
        tid, p = pusher[r], push_l[r]
        w = windows.get(tid)
        if w:
            k = bisect.bisect_right(w, p, key=itemgetter(0)) - 1
            if k >= 0 and w[k][0] <= p <= w[k][1]:
                fam_items[w[k][2]].append(r)
                continue
        prog_items[tid].append(r)

    def item_end(r: int) -> int:
        """When an item lets its thread go on: a push at once, a wait when it ended."""
        return ready_l[r] if kind_l[r] == _WAIT and ready_l[r] >= push_l[r] else push_l[r]

    pieces: list[tuple[int, int, int, float]] = []  # (tid, start, end, CPU share): every gap, for the GIL

    h_tid, h_start, h_end = t.held_back()
    h_start, h_end = h_start - t0, h_end - t0

    def gaps_of(
        items: list[int], origin: int, tid: int, cpu_share: float, tail_end: int | None = None, held: list[int] | None = None
    ) -> list[int]:
        """The thread's own time before each item: what stays (or scales) when the rest changes.
        ``held`` (a program's) gets the time the engine held each item's push back, which the
        model re-derives: taken out of the gap, from its end (the engine holds a push as it begins)."""
        out, last = [], origin
        for r in items:
            p = push_l[r]
            stop = p
            if held is not None:
                h = sum(y - x for x, y in thread_runs(h_tid, h_start, h_end, tid, last, p))
                held.append(h)
                stop = p - h
            out.append(max(0, stop - last))
            pieces.append((tid, last, max(last, stop), cpu_share))
            last = max(last, item_end(r))
        if tail_end is not None:
            pieces.append((tid, last, max(last, tail_end), cpu_share))
        return out

    families: list[_Family] = []
    family_of = [-1] * n
    custom_of = [-1] * n
    for f, (c, dr, y) in enumerate(fam_rows):
        y0, y1 = int(t.start[y]) - t0, int(t.end[y]) - t0
        items = fam_items[f]
        last = max([y0] + [item_end(r) for r in items])
        y_cpu = int(t.cpu[y])
        share = y_cpu / (y1 - y0) if y_cpu >= 0 and y1 > y0 else -1.0
        gaps = gaps_of(items, y0, int(t.tid[y]), share, y1)
        families.append(_Family(c, dr, y, items, gaps, max(0, y1 - last), max(0, push_l[dr] - y1)))
        family_of[c] = f
        custom_of[dr] = c
    programs = []
    for tid, items in sorted(prog_items.items()):
        held: list[int] = []
        programs.append(_Program(tid, items, gaps_of(items, 0, tid, -1.0, held=held), held))
    # The GIL's part in every piece: the gaps (families' then programs', in order), then the ops' runs.
    is_run = s_ok & (kind != _CUSTOM) & (kind != _WAIT)
    run_rows = np.flatnonzero(is_run)
    run_cpu = t.cpu[span[run_rows]] if len(t) else np.zeros(0, dtype=_I64)
    run_dur = np.maximum(dur[run_rows], 1)
    p_arr = np.array([p[:3] for p in pieces], dtype=_I64).reshape(-1, 3)
    all_tid = np.concatenate([p_arr[:, 0], s_tid[run_rows]])
    all_a = np.concatenate([p_arr[:, 1], s_start[run_rows]]) + t0
    all_b = np.concatenate([p_arr[:, 2], s_end[run_rows]]) + t0
    p_cpu = np.array([p[3] for p in pieces], dtype=np.float64)
    all_cpu = np.concatenate([p_cpu, np.where(run_cpu >= 0, run_cpu / run_dur, -1.0)])
    python = np.concatenate([np.ones(len(pieces), dtype=bool), np.zeros(len(run_rows), dtype=bool)])
    g_wait, g_share = gil_shares(trace, all_tid, all_a, all_b, all_cpu, python)
    states = trace.thread_states
    sampled = states is not None and len(states) > 0
    if states is not None and states.period_ns > EXACT_PERIOD_NS and len(run_rows):
        # An op's runs too short to hold two samples: the share its name's runs showed at the
        # sampler's instants inside them, where they show enough (else held, as gil_shares says).
        ops_at = len(pieces)
        by_name = name_shares(states, s_tid[run_rows], s_start[run_rows] + t0, s_end[run_rows] + t0, t.name[span[run_rows]])
        short = (run_dur < 2 * states.period_ns) & (run_cpu < 0) & ~np.isnan(by_name)
        g_share[ops_at:][short] = by_name[short]
    had_gil = _ran_with_gil(trace)
    if not had_gil:  # no GIL, so no wait for it: every piece ran as long as it had to
        g_wait = np.zeros_like(g_wait)
    elif states is None or not states.period_ns or states.period_ns > EXACT_PERIOD_NS:  # a model's own: exact already
        # One holder at a time where the pieces overlap; it goes first to a Python whose CPU clock
        # was read, then to an op's run, then to a stretch of a thread's Python between its pushes.
        rank = np.where(all_cpu >= 0, 2, np.where(python, 0, 1))
        # A pool thread's run after a timed hand-off gave it the GIL holds it too (beside the ops it
        # ran then, whose own pieces it does not repeat): taken into the sharing, then dropped.
        _, x_a, x_b = _without_pieces(*held_after_handoff(states), all_tid, all_a, all_b) if states is not None else ([],) * 3
        m = len(all_a)
        extra = len(x_a)
        w2, s2 = one_holder(
            np.concatenate([all_a, np.asarray(x_a, dtype=_I64)]),
            np.concatenate([all_b, np.asarray(x_b, dtype=_I64)]),
            np.concatenate([g_wait, np.zeros(extra, dtype=_I64)]),
            np.concatenate([g_share, np.ones(extra)]),
            np.concatenate([rank, np.ones(extra, dtype=np.int64)]),
        )
        g_wait, g_share = w2[:m], s2[:m]
    k = 0
    for fam in families:
        m = len(fam.items) + 1
        fam.gap_wait, fam.gap_share = g_wait[k : k + m].tolist(), g_share[k : k + m].tolist()
        k += m
    for prog in programs:
        m = len(prog.items)
        prog.gap_wait, prog.gap_share = g_wait[k : k + m].tolist(), g_share[k : k + m].tolist()
        k += m
    op_wait = np.zeros(n, dtype=_I64)
    op_share = np.zeros(n, dtype=np.float64)
    op_wait[run_rows], op_share[run_rows] = g_wait[k:], g_share[k:]

    latency, samples = _calibrate(o, kind, push, ready, s_start, s_end, s_tid, fam_rows, t, t0, pusher, trace.thread_states)
    # A model's prediction replays with the latencies it was made with: its own hand-offs, each
    # exactly that long, average to them only where nothing else moved a hand-off's two ends.
    made_with = trace.metadata.get(MODEL_METADATA)
    if isinstance(made_with, dict) and isinstance(made_with.get(LATENCY_KEY), dict):
        latency.update({k: int(v) for k, v in made_with[LATENCY_KEY].items() if k in latency})

    # A dependency on an op from before the recording: its recorded release stands.
    by = o.by
    by_known = o.rows_of(np.maximum(by, 0)) >= 0
    external = (by >= 0) & ~by_known & (ready > push)
    ext = np.full(n, -1, dtype=_I64)
    ext[external] = ready[external]
    waits = external & (kind == _WAIT)
    ext[waits] = np.maximum(push[waits], ready[waits] - latency["wake_program"])
    quiet = np.where((kind == _WAIT) & (by < 0) & (ready >= push), ready - push, latency["quiet_wait"])

    acc_at = o.acc_at.tolist()
    acc_var = o.acc_var.tolist()
    acc_write = o.acc_write.tolist()
    reads: list[list[int]] = []
    writes: list[list[int]] = []
    for r in range(n):
        a, b = acc_at[r], acc_at[r + 1]
        reads.append([acc_var[k] for k in range(a, b) if not acc_write[k]])
        writes.append([acc_var[k] for k in range(a, b) if acc_write[k]])
    n_custom = len({int(t.tid[y]) for _, _, y in fam_rows})
    return Recording(
        t0=t0,
        kind=kind_l,
        reads=reads,
        writes=writes,
        span=span.tolist(),
        dur=[max(0, d) for d in dur.tolist()],
        ext=ext.tolist(),
        quiet=[max(0, q) for q in quiet.tolist()],
        families=families,
        family_of=family_of,
        custom_of=custom_of,
        programs=programs,
        end=end,
        latency=latency,
        samples=samples,
        recorded_custom=n_custom,
        op_wait=op_wait.tolist(),
        op_share=op_share.tolist(),
        gil_sampled=sampled,
        had_gil=had_gil,
        gil_transfer_ns=gil_transfer_ns(trace),
        gil_asleep_transfer_ns=gil_transfer_ns(trace, asleep=True),
        hop_held=hop_held_ns(trace),
        hop_gil=hand_offs_hold_gil(trace, sampled),
        tail_held=tail_held_ns(
            trace,
            np.array([y for _, _, y in fam_rows], dtype=_I64),
            o.push[np.array([dr for _, dr, _ in fam_rows], dtype=_I64)],
        ),
        outside=outside_holds(trace, t0, end, {int(x) for x in np.unique(t.tid)} | set(prog_items)),
        max_pending=_max_pending(trace, len(h_tid)),
        cpu=_cpu_work(trace, n, run_rows, s_tid, s_start + t0, s_end + t0, [int(t.cpu[y]) for _, _, y in fam_rows]),
    )


def _cpu_work(
    trace: TraceData, n: int, run_rows: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray, python_cpu: list[int]
) -> CpuWork | None:
    """:class:`CpuWork` of the recording; None where the states or the native threads' CPU are not known."""
    states = trace.thread_states
    native = cpu_outside_python(trace.metadata)
    cores = recorded_cpus(trace.metadata)
    if states is None or not len(states) or states.period_ns <= EXACT_PERIOD_NS or native is None or cores is None:
        return None
    ov = states.overlap(tid[run_rows], start[run_rows], end[run_rows])
    on = ov[:, STATES.index(ThreadState.HELD)] + ov[:, STATES.index(ThreadState.RUNNING)]
    # The share of the sampled part, over the whole run: the states cover a run only from the
    # first sample on (60 dots on one worker: 10 ms of their 15 on a CPU read as is, 14 this way).
    sampled = ov.sum(axis=1)
    op_ns = np.zeros(n, dtype=_I64)
    op_ns[run_rows] = np.where(sampled > 0, (end[run_rows] - start[run_rows]) * on // np.maximum(sampled, 1), 0)
    return CpuWork(op_ns.tolist(), [max(0, c) for c in python_cpu], native[0], cores)


def _max_pending(trace: TraceData, held_spans: int) -> int | None:
    """The recorded ``max_pending``; for a file made before it was recorded that shows held pushes
    (``held_spans`` of them), the engine's default (a program that set another one then is replayed
    as if at the default)."""
    m = trace.metadata.get(MAX_PENDING_KEY)
    if isinstance(m, int) and not isinstance(m, bool) and m >= 2:
        return m
    return DEFAULT_MAX_PENDING if MAX_PENDING_KEY not in trace.metadata and held_spans else None


def _calibrate(
    o: OpTable,
    kind: np.ndarray,
    push: np.ndarray,
    ready: np.ndarray,
    s_start: np.ndarray,
    s_end: np.ndarray,
    s_tid: np.ndarray,
    fam_rows: list[tuple[int, int, int]],
    t: SpanTable,
    t0: int,
    pusher: list[int],
    states: ThreadStates | None = None,
) -> tuple[dict[str, int], dict[str, int]]:
    """The hand-off latencies, each the mean of the recorded gaps where nothing queued.

    Engine: on each worker, an op that was ready before the previous op there ended measures a
    busy worker's turn to its next op (``engine_next``: the chain rule, or the FIFO's head); one
    that became ready while the worker was idle measures the wake of an idle worker
    (``engine_wake``). Custom pool alike, from each custom op's start to its Python: a thread
    that was busy with another Python gives ``custom_next`` (from that Python's end), an idle one
    ``custom_wake``. A thread's first Python is left out while there are other samples: it may
    have paid for starting the thread. Waits: from the end of the op that ended a blocking wait
    to the wait's end, for programs and for custom-op Python apart (the latter competes with the
    engine's threads to wake). Where the GIL was sampled, the time the thread that took over
    waited for the GIL is taken out of each gap: the model's GIL adds it back where it happens.
    """

    def less_gil(tids: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``b - a``, less the time thread ``tids`` waited for the GIL meanwhile (never below 0)."""
        gap = np.asarray(b, dtype=_I64) - np.asarray(a, dtype=_I64)
        if states is None or not len(states) or not len(gap):
            return gap
        w = states.overlap(np.asarray(tids, dtype=_I64), np.asarray(a, dtype=_I64) + t0, np.asarray(b, dtype=_I64) + t0)
        waited = w[:, list(STATES).index(ThreadState.WAIT)]
        return np.where(gap >= 0, np.maximum(gap - waited, 0), gap)

    latency: dict[str, int] = {}
    samples: dict[str, int] = {}
    # Engine workers: every op's run (a custom op's start is a point on its worker).
    run = np.flatnonzero((s_start >= 0) & (kind != _WAIT) & (ready >= 0))
    is_c = kind[run] == _CUSTOM
    a = s_start[run]
    b = np.where(is_c, a, s_end[run])
    order = np.lexsort((a, s_tid[run]))
    run, a, b = run[order], a[order], b[order]
    tids = s_tid[run]
    prev_end = np.concatenate([[-1], b[:-1]])
    prev_row = np.concatenate([[-1], run[:-1]])
    same = np.concatenate([[False], tids[1:] == tids[:-1]])
    r_ready = ready[run]
    # The op whose completion made each ready, where that completion ran: a custom op completes
    # in its Dummy_Wait. One made ready by the op just before it on its worker was chained (its
    # ready time comes after that span's end: the completion's bookkeeping follows the span).
    dummy_of = np.arange(len(kind), dtype=_I64)
    for c, dr, _ in fam_rows:
        dummy_of[c] = dr
    by_row = o.rows_of(np.maximum(o.by[run], 0))
    by_row = np.where((o.by[run] >= 0) & (by_row >= 0), dummy_of[np.maximum(by_row, 0)], -1)
    busy = same & ((r_ready <= prev_end) | (by_row == prev_row))
    nxt = less_gil(tids[busy], prev_end[busy], a[busy]).tolist()
    wake = less_gil(tids[~busy], r_ready[~busy], a[~busy]).tolist()
    _mean(wake, "engine_wake", latency, samples)
    _mean(nxt, "engine_next", latency, samples)

    # Custom pool: each Python against its custom op's start.
    c_wake: list[int] = []
    c_first: list[int] = []
    c_next: list[int] = []
    tasks = sorted(
        ((int(t.tid[y]), int(t.start[y]) - t0, int(s_start[c]), int(push[dr]), c) for c, dr, y in fam_rows),
        key=lambda x: (x[0], x[1]),
    )
    c_tid: list[int] = []
    c_from: list[int] = []
    c_to: list[int] = []
    c_kind: list[int] = []
    for k, (tid, y0, p0, _, _) in enumerate(tasks):
        if p0 < 0:
            continue
        c_tid.append(tid)
        c_to.append(y0)
        if k == 0 or tasks[k - 1][0] != tid:
            c_from.append(p0)
            c_kind.append(0)
        elif p0 <= tasks[k - 1][3]:
            c_from.append(tasks[k - 1][3])
            c_kind.append(1)
        else:
            c_from.append(p0)
            c_kind.append(2)
    for kd, g in zip(
        c_kind,
        less_gil(np.array(c_tid, dtype=_I64), np.array(c_from, dtype=_I64), np.array(c_to, dtype=_I64)).tolist(),
        strict=True,
    ):
        (c_first, c_next, c_wake)[kd].append(g)
    _mean(c_wake or c_first, "custom_wake", latency, samples)
    _mean(c_next, "custom_next", latency, samples)

    # Waits that blocked: from the end of the op that ended them to their own end.
    done = s_end  # a custom op's: its parent's end
    python_threads = {int(t.tid[y]) for _, _, y in fam_rows}
    w_prog: list[int] = []
    w_py: list[int] = []
    quiet: list[int] = []
    w_rows = np.flatnonzero(kind == _WAIT)
    by_rows = o.rows_of(np.maximum(o.by[w_rows], 0))
    w_tid: list[int] = []
    w_from: list[int] = []
    w_to: list[int] = []
    for r, br, by in zip(w_rows.tolist(), by_rows.tolist(), o.by[w_rows].tolist(), strict=True):
        if by < 0:
            if ready[r] >= push[r]:
                quiet.append(int(ready[r] - push[r]))
            continue
        if br < 0 or done[br] < 0 or done[br] < push[r]:
            continue
        w_tid.append(pusher[r])
        w_from.append(int(done[br]))
        w_to.append(int(ready[r]))
    w_gap = less_gil(np.array(w_tid, dtype=_I64), np.array(w_from, dtype=_I64), np.array(w_to, dtype=_I64)).tolist()
    for tid, g in zip(w_tid, w_gap, strict=True):
        (w_py if tid in python_threads else w_prog).append(g)
    _mean(w_prog, "wake_program", latency, samples)
    _mean(w_py, "wake_python", latency, samples)
    if not w_py and w_prog:  # no Python waited: the program's waits stand for them (samples 0, see BORROWED)
        latency["wake_python"] = latency["wake_program"]
    _mean(quiet, "quiet_wait", latency, samples)
    return latency, samples


def _without_pieces(
    tid: np.ndarray, a: np.ndarray, b: np.ndarray, p_tid: np.ndarray, p_a: np.ndarray, p_b: np.ndarray
) -> tuple[list[int], list[int], list[int]]:
    """The stretches ``[a, b)`` on thread ``tid`` less the pieces ``[p_a, p_b)`` of the same thread
    (a thread's pieces follow each other: each stretch looks only at those that start inside it,
    and the one before)."""
    out: tuple[list[int], list[int], list[int]] = ([], [], [])
    by_tid: dict[int, tuple[list[int], list[int]]] = {}
    order = np.lexsort((p_a, p_tid))
    for t_, x, y in zip(p_tid[order].tolist(), p_a[order].tolist(), p_b[order].tolist(), strict=True):
        starts, ends = by_tid.setdefault(t_, ([], []))
        starts.append(x)
        ends.append(y)
    for t_, x, y in zip(tid.tolist(), a.tolist(), b.tolist(), strict=True):
        starts, ends = by_tid.get(t_, ([], []))
        at = x
        k = max(bisect.bisect_right(starts, x) - 1, 0)
        while k < len(starts) and starts[k] < y:
            px, py = starts[k], ends[k]
            k += 1
            if py <= at:
                continue
            if px > at:
                out[0].append(t_)
                out[1].append(at)
                out[2].append(px)
            at = max(at, py)
        if at < y:
            out[0].append(t_)
            out[1].append(at)
            out[2].append(y)
    return out


def extent(trace: TraceData) -> tuple[int, int]:
    """(origin, end-to-end ns): from the first push or span to the last span's or wait's end."""
    t, o = trace.table, trace.ops
    starts = [t.start] if len(t) else []
    ends = [t.end] if len(t) else []
    if o is not None and len(o):
        starts.append(o.push[o.push >= 0])
        ends.append(o.ready[(o.kind == _WAIT) & (o.ready >= 0)])
    t0 = min((int(a.min()) for a in starts if len(a)), default=0)
    t1 = max((int(a.max()) for a in ends if len(a)), default=t0)
    return t0, t1 - t0
