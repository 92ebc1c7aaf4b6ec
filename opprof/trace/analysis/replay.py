"""What if an op were faster, or a pool bigger? A recorded profile replayed by a model of the engine.

A profile says where the time went; the question a user asks next is what a change would buy:
"my custom op's Python is 2x faster", "two custom-op threads instead of one", "four engine
workers". :func:`what_if` answers it without touching the program: it replays the profile's
engine side (:mod:`.ops`: every push, wait and var access) with a discrete-event model of opprof's
threaded engine, once as recorded (the *baseline*, which says how faithful the model is for this
trace) and once with the change, and gives the predicted end-to-end time and the predicted run as
a trace.

The model (every choice mirrors what :mod:`opprof.engine` does, so a replay without change lands
close to the recording):

* **Programs.** Each thread that pushes outside a custom op's Python (usually ``MainThread``)
  replays its pushes and waits in their recorded order; the time between two of them is the
  program's own Python and stays as recorded. Back-pressure (a pusher held while 128 ops are
  pending) is not recorded, so it stays in that time too.
* **Dependencies** are re-derived, not copied: every push registers its op on the vars it read and
  wrote in the model's push order, with the engine's version-queue rules (reads of a var overlap,
  a write waits for earlier reads and writes). A change that reorders completions therefore
  changes which op enables which. Only a dependency on an op pushed before the recording began is
  taken from the recording (its ready time).
* **Engine workers.** ``engine_threads`` workers and one FIFO of ready ops. A worker that completes
  an op runs the first op that completion made ready itself (the engine's chain rule), the others
  go to the FIFO, and each put wakes an idle worker. Nothing is reserved for the woken worker (a
  queue's get is first come, first served): when waking takes long (the GIL held elsewhere), a
  busy worker finishing meanwhile takes the op. An op lasts its recorded span divided by its
  factor. A custom op's own engine op only hands its Python to the custom pool: it holds its
  worker for no time.
* **Custom ops.** Their Python goes to a pool of ``custom_threads`` threads, as in
  :class:`~opprof.engine.threaded.CustomPool`: a submit wakes an idle thread, and starts a new one
  while more tasks are queued than idle threads (a woken or new thread counts as idle until it has
  taken its task) and fewer than ``custom_threads`` are active; a thread blocked in a wait is not
  active (the pool grows past it). The Python's own time (its recorded span
  minus its waits) is divided by its factor; its pushes and waits keep their places in it. After
  it returns, the thread pushes ``Dummy_Wait`` (after the recorded delay); ``Dummy_Wait`` runs on
  a worker after the sub-ops, and its end completes the custom op and releases its outputs.
* **Waits** block until the var has no pending write pushed before them (``WaitForAll``: until no
  op is pending), then the waiting thread wakes.
* **Hand-offs** (a ready op to an idle worker, a busy worker to its next op, a custom op's start
  to its Python, a finished op to the thread waiting for it) are calibrated from the trace itself:
  the median of the recorded gaps of each kind where nothing queued, so a slower machine's
  latencies come with its traces. Defaults apply when a trace has no sample of a kind.
* **Not modelled:** the GIL (predictions hold for ops that release it, NumPy on large arrays,
  ``sleep``, I/O, or that are short), contention between threads for cores and memory (durations
  are replayed as recorded, with whatever slowdown the work beside them caused), the start of a
  new pool thread, and synchronisation between program threads outside the engine. A trace's
  :attr:`WhatIf.notes` say which of these matter for it (an op slower beside other work than
  alone, Python busy on a CPU, workers waiting long to wake, several pushing threads).

The naive engine runs everything inline on the pushing thread, so there is nothing to schedule:
its replay is a time warp of each thread, where every span's own time (without the spans nested
in it) is divided by its factor.
"""

from __future__ import annotations

import bisect
import difflib
import heapq
import math
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from operator import itemgetter

import numpy as np

from ..columns import ROLE_CODE, FlowTable, SpanTable
from ..data import TraceData
from ..ops import OpKind, OpTable
from ..records import WAIT as WAIT_CATEGORY
from ..records import Role, ThreadInfo
from .critical import APPROXIMATE_PATH

__all__ = ["WhatIf", "what_if"]

_PARENT = ROLE_CODE[Role.PARENT]
_PYTHON = ROLE_CODE[Role.PYTHON]
_SUBOP = ROLE_CODE[Role.SUBOP]
_WAIT_ROLE = ROLE_CODE[Role.WAIT]
_DUMMY_ROLE = ROLE_CODE[Role.DUMMY_WAIT]
_CUSTOM, _DUMMY, _WAIT = int(OpKind.CUSTOM), int(OpKind.DUMMY), int(OpKind.WAIT)
_ENGINE_PREFIX = "opprof-engine-"
_CUSTOM_PREFIX = "opprof-custom-"
_BACKWARD = "_backward_"
_I64 = np.int64

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
_LATENCY_WORDS = {
    "engine_wake": "a ready op to an idle engine worker",
    "engine_next": "a worker from one op to its next",
    "custom_wake": "a custom op's start to its Python on an idle custom thread",
    "custom_next": "a custom thread from one Python to its next",
    "wake_program": "an op's end to the program waiting for it",
    "wake_python": "an op's end to the custom-op Python waiting for it",
    "quiet_wait": "a wait that does not block",
}

_GIL_NOTE = (
    "The GIL is not modelled: threads run in parallel as if every op released it, which holds for "
    "NumPy on large arrays, sleep and I/O, or for short ops; Python that computes will run slower than predicted."
)


@dataclass(frozen=True, eq=False)
class WhatIf:
    """A predicted run after a change, beside the recording and the model's replay of it unchanged.

    ``baseline_ns`` is the model replaying the recording with no change: how far it is from
    ``recorded_ns`` is how far to trust ``predicted_ns`` for this trace (the two share the model's
    errors, so ``predicted_ns / baseline_ns`` is often the better estimate of the change itself).
    ``trace`` is the predicted run, with threads, spans, custom-op families and engine table like
    a profile's. ``calibration`` holds the hand-off latencies (ns) the model read off the trace.
    """

    recorded_ns: int
    predicted_ns: int
    baseline_ns: int
    speedup: dict[str, float]
    engine_threads: int | None
    custom_threads: int | None
    trace: TraceData
    notes: list[str]
    recorded_engine_threads: int | None = None
    recorded_custom_threads: int | None = None
    calibration: dict[str, int] | None = None

    @property
    def change(self) -> float:
        """Predicted over recorded end-to-end time (0.5: twice as fast)."""
        return self.predicted_ns / self.recorded_ns if self.recorded_ns > 0 else float("nan")

    @property
    def model_error(self) -> float:
        """How far the unchanged model is from the recording, as a fraction of it (0.02: 2 % off)."""
        return (self.baseline_ns - self.recorded_ns) / self.recorded_ns if self.recorded_ns > 0 else float("nan")

    def describe_change(self) -> str:
        """The change in words: ``T::pure_python 2x faster, 2 custom threads (recorded 1)``."""
        parts = []
        for name, f in self.speedup.items():
            parts.append(f"{name} {_num(f)}x faster" if f >= 1 else f"{name} {_num(1 / f)}x slower")
        for what, n, was in (
            ("engine", self.engine_threads, self.recorded_engine_threads),
            ("custom", self.custom_threads, self.recorded_custom_threads),
        ):
            if n is not None and n != was:
                parts.append(f"{n} {what} thread{'s' if n != 1 else ''} (recorded {was})")
        return ", ".join(parts) or "no change"

    def __str__(self) -> str:
        return (
            f"{self.describe_change()}: predicted {_fmt(self.predicted_ns)} (recorded {_fmt(self.recorded_ns)}, "
            f"model without change {_fmt(self.baseline_ns)}): {self.change:.2f}x"
        )


def _num(x: float) -> str:
    """A factor as people write it: ``2``, ``1.5``, ``0.33``."""
    return f"{x:g}" if abs(x - round(x, 2)) < 1e-9 else f"{x:.2f}"


def _count(n: int, one: str, many: str | None = None) -> str:
    """``1 span``, ``3 spans``: notes are read by people."""
    return f"1 {one}" if n == 1 else f"{n} {many or one + 's'}"


def _fmt(ns: int) -> str:
    """A duration in the unit that keeps it readable (ms for what users run, µs for hand-offs)."""
    if abs(ns) >= 1_000_000_000:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.0f} µs"


# ---------------------------------------------------------------------------- the change
def _check_factors(speedup: Mapping[str, float] | None) -> dict[str, float]:
    """The factors as floats, each finite and > 0 (a factor is a ratio of durations)."""
    out: dict[str, float] = {}
    for name, f in (speedup or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"speedup names must be strings (span names or custom-op types), got {name!r}")
        if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)):
            raise TypeError(f"speedup[{name!r}] must be a number (2.0: twice as fast), got {f!r}")
        x = float(f)
        if not math.isfinite(x) or x <= 0:
            raise ValueError(f"speedup[{name!r}] must be a finite number > 0 (2.0: twice as fast, 0.5: half as fast), got {f!r}")
        out[name] = x
    return out


def _check_pool(what: str, n: int | None) -> int | None:
    """A pool size, a whole number >= 1 (an engine with no worker would never run an op)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}")
    return int(n)


def _span_factors(t: SpanTable, factors: dict[str, float]) -> np.ndarray:
    """The factor of every span: by custom-op type, then by direction, then by exact name.

    A name selects an op type (``T``: its whole family, forward and backward, parents, Python,
    sub-ops, ``Dummy_Wait``), a backward family (``_backward_T``), or the spans of that exact name
    (``T::pure_python``, ``_plus_scalar``). The more specific selection wins where two apply, so
    ``{"T": 2, "T::pure_python": 4}`` makes T's Python 4x and the rest of T 2x faster. Waits are
    not work (their time follows from what they wait for), so no name selects them.
    """
    out = np.ones(len(t), dtype=np.float64)
    if not factors:
        return out
    names = t.strs(t.name)
    types = t.strs(t.op_type)
    family = (t.inv >= 0) & (t.op_type >= 0)
    backward = t.backward == 1
    known_types = set(types[family].tolist())
    known_backward = {_BACKWARD + x for x in set(types[family & backward].tolist())}
    is_wait = (t.role == _WAIT_ROLE) | (t.strs(t.cat) == WAIT_CATEGORY)
    known_names = set(names[~is_wait].tolist())
    by_type, by_direction, by_name = [], [], []
    for name, f in factors.items():
        if name in known_types:
            by_type.append((name, f))
        elif name in known_backward:
            by_direction.append((name, f))
        elif name in known_names:
            by_name.append((name, f))
        else:
            known = sorted(known_types | known_backward | known_names)
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(map(repr, close))}" if close else ""
            shown = ", ".join(map(repr, known[:12])) + (", ..." if len(known) > 12 else "")
            raise ValueError(
                f"speedup name {name!r} is neither a span name nor a custom-op type in this trace{hint} (known: {shown})"
            )
    for name, f in by_type:
        out[family & (types == name)] = f
    for name, f in by_direction:
        out[family & backward & (types == name[len(_BACKWARD) :])] = f
    for name, f in by_name:
        out[(names == name) & ~is_wait] = f
    return out


# ---------------------------------------------------------------------------- the recording
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


@dataclass(eq=False)
class _Program:
    """A thread of the user's program: its pushes and waits, and the time between them."""

    tid: int
    items: list[int]
    gaps: list[int]  # before each item; the first is from the trace's origin


@dataclass(eq=False)
class _Recording:
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


def _median(xs: list[int], key: str, latency: dict[str, int], samples: dict[str, int]) -> None:
    """The median of one kind of hand-off (robust to the few that met a busy machine), or its default."""
    good = [x for x in xs if x >= 0]
    samples[key] = len(good)
    latency[key] = int(np.median(good)) if good else _DEFAULTS[key]


def _prepare(trace: TraceData) -> _Recording:
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
    t0, end = _extent(trace)

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

    def gaps_of(items: list[int], origin: int) -> list[int]:
        """The thread's own time before each item: what stays (or scales) when the rest changes."""
        out, last = [], origin
        for r in items:
            out.append(max(0, push_l[r] - last))
            last = max(last, item_end(r))
        return out

    families: list[_Family] = []
    family_of = [-1] * n
    custom_of = [-1] * n
    for f, (c, dr, y) in enumerate(fam_rows):
        y0, y1 = int(t.start[y]) - t0, int(t.end[y]) - t0
        items = fam_items[f]
        last = max([y0] + [item_end(r) for r in items])
        families.append(_Family(c, dr, y, items, gaps_of(items, y0), max(0, y1 - last), max(0, push_l[dr] - y1)))
        family_of[c] = f
        custom_of[dr] = c
    programs = [_Program(tid, items, gaps_of(items, 0)) for tid, items in sorted(prog_items.items())]

    latency, samples = _calibrate(o, kind, push, ready, s_start, s_end, s_tid, fam_rows, t, t0, pusher)

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
    return _Recording(
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
    )


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
) -> tuple[dict[str, int], dict[str, int]]:
    """The hand-off latencies, each the median of the recorded gaps where nothing queued.

    Engine: on each worker, an op that was ready before the previous op there ended measures a
    busy worker's turn to its next op (``engine_next``: the chain rule, or the FIFO's head); one
    that became ready while the worker was idle measures the wake of an idle worker
    (``engine_wake``). Custom pool alike, from each custom op's start to its Python: a thread
    that was busy with another Python gives ``custom_next`` (from that Python's end), an idle one
    ``custom_wake``. A thread's first Python is left out while there are other samples: it may
    have paid for starting the thread. Waits: from the end of the op that ended a blocking wait
    to the wait's end, for programs and for custom-op Python apart (the latter competes with the
    engine's threads to wake).
    """
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
    nxt = (a[busy] - prev_end[busy]).tolist()
    wake = (a[~busy] - r_ready[~busy]).tolist()
    _median(wake, "engine_wake", latency, samples)
    _median(nxt, "engine_next", latency, samples)

    # Custom pool: each Python against its custom op's start.
    c_wake: list[int] = []
    c_first: list[int] = []
    c_next: list[int] = []
    tasks = sorted(
        ((int(t.tid[y]), int(t.start[y]) - t0, int(s_start[c]), int(push[dr]), c) for c, dr, y in fam_rows),
        key=lambda x: (x[0], x[1]),
    )
    for k, (tid, y0, p0, _, _) in enumerate(tasks):
        if p0 < 0:
            continue
        if k == 0 or tasks[k - 1][0] != tid:
            c_first.append(y0 - p0)
        elif p0 <= tasks[k - 1][3]:
            c_next.append(y0 - tasks[k - 1][3])
        else:
            c_wake.append(y0 - p0)
    _median(c_wake or c_first, "custom_wake", latency, samples)
    _median(c_next, "custom_next", latency, samples)

    # Waits that blocked: from the end of the op that ended them to their own end.
    done = s_end  # a custom op's: its parent's end
    python_threads = {int(t.tid[y]) for _, _, y in fam_rows}
    w_prog: list[int] = []
    w_py: list[int] = []
    quiet: list[int] = []
    w_rows = np.flatnonzero(kind == _WAIT)
    by_rows = o.rows_of(np.maximum(o.by[w_rows], 0))
    for r, br, by in zip(w_rows.tolist(), by_rows.tolist(), o.by[w_rows].tolist(), strict=True):
        if by < 0:
            if ready[r] >= push[r]:
                quiet.append(int(ready[r] - push[r]))
            continue
        if br < 0 or done[br] < 0 or done[br] < push[r]:
            continue
        (w_py if pusher[r] in python_threads else w_prog).append(int(ready[r] - done[br]))
    _median(w_prog, "wake_program", latency, samples)
    _median(w_py or w_prog, "wake_python", latency, samples)
    _median(quiet, "quiet_wait", latency, samples)
    return latency, samples


# ---------------------------------------------------------------------------- the simulation
_ACT, _DONE, _RESUME, _EXT, _FREE, _TAKE, _WAKE = range(7)
_EXTERNAL = -2  # ``_Replay.by`` of a row enabled by an op from before the recording (as recorded)


class _Actor:
    """A thread replaying its items: a program, or one custom op's Python on a pool thread."""

    __slots__ = ("fam", "gaps", "idx", "items", "pos", "tail", "thread")

    def __init__(self, idx: int, items: list[int], gaps: list[int], tail: int, thread: int, fam: int) -> None:
        self.idx = idx  # its place in _Replay.actors: events name actors by it
        self.items, self.gaps, self.tail = items, gaps, tail
        self.pos = 0
        self.thread = thread  # a program's recorded tid, or the number of a custom-op thread
        self.fam = fam  # the family whose Python this is; -1 for a program


class _Replay:
    """One run of the model (see the module docstring); times are ns from the trace's origin.

    Events sit in one heap by (time, order of scheduling): at equal times, what was scheduled
    first happens first, so a replay is deterministic.
    """

    def __init__(self, rec: _Recording, span_factor: np.ndarray, engine_threads: int, custom_threads: int) -> None:
        self.rec = rec
        n = len(rec.kind)
        f = span_factor.tolist()
        self.dur = [round(d / f[s]) if s >= 0 else d for d, s in zip(rec.dur, rec.span, strict=True)]
        self.py_factor = [f[fam.python] for fam in rec.families]
        lat = rec.latency
        self.l_wake, self.l_next = lat["engine_wake"], lat["engine_next"]
        self.l_cwake, self.l_cnext = lat["custom_wake"], lat["custom_next"]
        self.l_wprog, self.l_wpy = lat["wake_program"], lat["wake_python"]
        self.custom_threads = custom_threads
        # Per row: what happened to it in the model.
        self.pushed = [-1] * n
        self.pusher = [0] * n  # a program's tid, or -(1 + custom thread number)
        self.ready = [-1] * n
        self.start = [-1] * n
        self.end = [-1] * n
        self.by = [-1] * n
        self.by_var = [-1] * n
        self.worker = [-1] * n
        self.count = [0] * n  # its dependencies not yet cleared
        self.waiter: dict[int, _Actor] = {}  # a blocked wait's row -> the thread waiting in it
        # Vars: the engine's version queues (made on first use).
        self.writing: set[int] = set()
        self.reading: dict[int, int] = defaultdict(int)
        self.queue: dict[int, deque[tuple[int, bool]]] = {}
        self.pending = 0
        self.all_waiters: list[int] = []
        # Engine workers (idle ones in a heap: the lowest number first) and the ready FIFO.
        self.idle = list(range(engine_threads))
        self.fifo: deque[int] = deque()
        # The custom-op pool.
        self.tasks: deque[int] = deque()
        self.threads = 0
        self.idle_threads: list[int] = []
        self.taking = 0  # threads about to take a task: still idle to the pool
        self.blocked = 0
        k = len(rec.families)
        self.py_start = [-1] * k
        self.py_end = [-1] * k
        self.py_thread = [-1] * k
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.actors: list[_Actor] = []

    def at(self, t: int, what: int, arg: int) -> None:
        """Schedule event ``what`` (about row, actor, worker or thread ``arg``) at ``t``."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, what, arg))

    def _actor(self, items: list[int], gaps: list[int], tail: int, thread: int, fam: int) -> _Actor:
        a = _Actor(len(self.actors), items, gaps, tail, thread, fam)
        self.actors.append(a)
        return a

    def run(self) -> _Replay:
        """Replay every program from its first item until no event is left."""
        for p in self.rec.programs:
            a = self._actor(p.items, p.gaps, 0, p.tid, -1)
            if p.items:
                self.at(p.gaps[0], _ACT, a.idx)
        heap, families = self.heap, self.rec.families
        while heap:
            t, _, what, arg = heapq.heappop(heap)
            if what == _DONE:
                self._done(arg, t)
            elif what == _ACT:
                self._act(self.actors[arg], t)
            elif what == _RESUME:
                a = self.actors[arg]
                if a.fam >= 0:
                    self.blocked -= 1
                self._next(a, t)
            elif what == _EXT:
                self.count[arg] -= 1
                if self.count[arg] == 0:
                    self.by[arg] = _EXTERNAL
                    for o in self._settle([arg], t):
                        self._dispatch(o, t)
            elif what == _WAKE:
                self._wake(arg, t)
            elif what == _TAKE:
                self._take(arg, t)
            else:  # _FREE: the thread of a returned Python pushes its Dummy_Wait and is free
                th = self.py_thread[arg]
                self._push(families[arg].dummy, t, -1 - th)
                if self.tasks:  # straight on to the next task (its get does not sleep)
                    self._wake_thread(th, t + self.l_cnext)
                else:
                    heapq.heappush(self.idle_threads, th)
        return self

    @property
    def end_ns(self) -> int:
        """End-to-end: the last thing anything did (an op's end, a wait's, a Python's, a push)."""
        return max([0, *self.end, *self.py_end, *self.pushed])

    # -------------------------------------------------------------- programs and Pythons
    def _act(self, a: _Actor, t: int) -> None:
        """The actor's next item: a push, a wait, or (a Python with none left) its return."""
        if a.pos == len(a.items):
            if a.fam >= 0:  # a Python returns; its thread pushes Dummy_Wait after the recorded delay
                self.py_end[a.fam] = t
                self.at(t + self.rec.families[a.fam].dummy_delay, _FREE, a.fam)
            return
        r = a.items[a.pos]
        a.pos += 1
        tid = a.thread if a.fam < 0 else -1 - a.thread
        if self.rec.kind[r] == _WAIT:
            self._wait(a, r, t, tid)
        else:
            self._push(r, t, tid)
            self._next(a, t)

    def _next(self, a: _Actor, t: int) -> None:
        """The actor's next item after its own time before it (a Python's divided by its factor)."""
        if a.pos < len(a.items):
            gap = a.gaps[a.pos]
        elif a.fam >= 0:
            gap = a.tail
        else:
            return  # a program's last item is done
        if a.fam >= 0:
            gap = round(gap / self.py_factor[a.fam])
        self.at(t + gap, _ACT, a.idx)

    def _wait(self, a: _Actor, r: int, t: int, tid: int) -> None:
        """A wait: like the engine's token, a read of the var queued behind its pending writes."""
        self.pushed[r], self.pusher[r] = t, tid
        cnt = 0
        reads = self.rec.reads[r]
        if not reads:  # WaitForAll: until no op is pending
            if self.pending:
                self.all_waiters.append(r)
                cnt += 1
        else:
            v = reads[0]
            if v in self.writing or self.queue.get(v):
                self.queue.setdefault(v, deque()).append((r, False))
                cnt += 1
            else:
                self.reading[v] += 1
        ext = self.rec.ext[r]
        if ext > t:
            cnt += 1
            self.at(ext, _EXT, r)
        self.count[r] = cnt
        self.waiter[r] = a
        if cnt == 0:
            more: list[int] = []
            self._token_done(r, t, more, blocked=False)
            for o in self._settle(more, t):
                self._dispatch(o, t)
        elif a.fam >= 0:  # a blocked pool thread does not count: the pool may grow
            self.blocked += 1
            self._grow(t)

    def _token_done(self, r: int, t: int, granted: list[int], *, blocked: bool) -> None:
        """A wait got its var: the var is free again, and the waiting thread goes on (after it wakes)."""
        reads = self.rec.reads[r]
        if reads:
            v = reads[0]
            self.reading[v] -= 1
            if self.reading[v] == 0 and self.queue.get(v):
                self._release(v, granted, r)
        a = self.waiter.pop(r)
        if blocked:
            end = t + (self.l_wpy if a.fam >= 0 else self.l_wprog)
            self.ready[r] = self.end[r] = end
            self.at(end, _RESUME, a.idx)
        else:
            end = t + self.rec.quiet[r]
            self.ready[r] = self.end[r] = end
            self._next(a, end)

    # -------------------------------------------------------------- vars
    def _push(self, r: int, t: int, tid: int) -> None:
        """Register ``r`` on its vars, reads then writes, as the engine's push does."""
        self.pushed[r], self.pusher[r] = t, tid
        self.pending += 1
        cnt = 0
        writing, reading, queue = self.writing, self.reading, self.queue
        for v in self.rec.reads[r]:
            if v in writing or queue.get(v):
                queue.setdefault(v, deque()).append((r, False))
                cnt += 1
            else:
                reading[v] += 1
        for v in self.rec.writes[r]:
            if v in writing or reading.get(v) or queue.get(v):
                queue.setdefault(v, deque()).append((r, True))
                cnt += 1
            else:
                writing.add(v)
        ext = self.rec.ext[r]
        if ext > t:
            cnt += 1
            self.at(ext, _EXT, r)
        self.count[r] = cnt
        if cnt == 0:
            self.ready[r] = t
            self._dispatch(r, t)

    def _release(self, v: int, granted: list[int], by: int) -> None:
        """Grant ``v`` to the head of its queue: a run of reads, or one write (the engine's rule)."""
        q = self.queue.get(v)
        while q:
            o, is_write = q[0]
            if is_write:
                if self.reading.get(v, 0) == 0 and v not in self.writing:
                    q.popleft()
                    self.writing.add(v)
                    self._granted(o, v, by, granted)
                return
            q.popleft()
            self.reading[v] += 1
            self._granted(o, v, by, granted)

    def _granted(self, o: int, v: int, by: int, granted: list[int]) -> None:
        """``o`` got ``v``; with that its last dependency, ``by``'s completion is its enabling edge."""
        self.count[o] -= 1
        if self.count[o] == 0:
            self.by[o], self.by_var[o] = by, v
            granted.append(o)

    def _complete(self, r: int, t: int) -> list[int]:
        """``r`` is complete at ``t``: the ops (not waits) that made ready, in the engine's order."""
        self.end[r] = t
        granted: list[int] = []
        for v in self.rec.reads[r]:
            self.reading[v] -= 1
            if self.reading[v] == 0 and self.queue.get(v):
                self._release(v, granted, r)
        for v in self.rec.writes[r]:
            self.writing.discard(v)
            self._release(v, granted, r)
        self.pending -= 1
        if self.pending == 0 and self.all_waiters:
            for w in self.all_waiters:
                self._granted(w, -1, r, granted)
            self.all_waiters = []
        return self._settle(granted, t)

    def _settle(self, granted: list[int], t: int) -> list[int]:
        """Of the rows whose dependencies just cleared, end the waits (which may clear more) and
        return the ops, ready now."""
        out: list[int] = []
        i = 0
        while i < len(granted):
            o = granted[i]
            i += 1
            if self.rec.kind[o] == _WAIT:
                self._token_done(o, t, granted, blocked=True)
            else:
                self.ready[o] = t
                out.append(o)
        return out

    # -------------------------------------------------------------- engine workers
    def _dispatch(self, r: int, t: int) -> None:
        """Into the FIFO; the put wakes one idle worker, which takes whatever heads the FIFO once it
        is up. Nothing is reserved for it (a queue's get is first come, first served): while it
        wakes, a busy worker finishing its op may take the op first, and then it sleeps again."""
        self.fifo.append(r)
        if self.idle:
            self.at(t + self.l_wake, _WAKE, heapq.heappop(self.idle))

    def _wake(self, w: int, t: int) -> None:
        """Worker ``w`` is up: it runs the FIFO's head, or finds it taken and sleeps again."""
        if self.fifo:
            self._start(self.fifo.popleft(), w, t)
        else:
            heapq.heappush(self.idle, w)

    def _start(self, r: int, w: int, t: int) -> None:
        """``r`` runs on worker ``w`` from ``t`` (a custom op's engine op ends as it starts)."""
        self.start[r], self.worker[r] = t, w
        custom = self.rec.kind[r] == _CUSTOM and self.rec.family_of[r] >= 0
        self.at(t if custom else t + self.dur[r], _DONE, r)

    def _done(self, r: int, t: int) -> None:
        """``r`` ends on its worker, which then runs the first op that made ready, else the FIFO's head."""
        w = self.worker[r]
        k = self.rec.kind[r]
        nxt: list[int] = []
        if k == _CUSTOM and self.rec.family_of[r] >= 0:
            self._submit(self.rec.family_of[r], t)  # the async op hands its Python over and returns
        elif k == _DUMMY and self.rec.custom_of[r] >= 0:
            # Dummy_Wait completes its custom op first (what that releases goes to the FIFO), then itself.
            for o in self._complete(self.rec.custom_of[r], t):
                self._dispatch(o, t)
            nxt = self._complete(r, t)
        else:
            nxt = self._complete(r, t)
        if nxt:
            self._start(nxt[0], w, t + self.l_next)
            for o in nxt[1:]:
                self._dispatch(o, t)
        elif self.fifo:
            self._start(self.fifo.popleft(), w, t + self.l_next)
        else:
            heapq.heappush(self.idle, w)

    # -------------------------------------------------------------- custom-op pool
    # As in CustomPool: a submit wakes one sleeping thread, and a new one starts while more tasks
    # are queued than idle threads (sleeping, or woken and not yet holding a task) and fewer than
    # the pool's size are active (not blocked in a wait).
    def _submit(self, f: int, t: int) -> None:
        """A custom op's engine op hands its Python to the pool."""
        self.tasks.append(f)
        if self.idle_threads and len(self.tasks) > self.taking:
            self._wake_thread(heapq.heappop(self.idle_threads), t + self.l_cwake)
        self._grow(t)

    def _grow(self, t: int) -> None:
        """CustomPool._grow: a new thread while tasks outnumber idle threads and the pool has room."""
        idle = self.taking + len(self.idle_threads)
        if len(self.tasks) > idle and self.threads - self.blocked < self.custom_threads:
            self.threads += 1
            self._wake_thread(self.threads - 1, t + self.l_cwake)

    def _wake_thread(self, th: int, t: int) -> None:
        """Thread ``th`` will look for a task at ``t``; until then it counts as idle (as in CustomPool)."""
        self.taking += 1
        self.at(t, _TAKE, th)

    def _take(self, th: int, t: int) -> None:
        """Thread ``th`` is up: it runs the Python at the head of the queue, or sleeps again."""
        self.taking -= 1
        if not self.tasks:
            heapq.heappush(self.idle_threads, th)
            return
        f = self.tasks.popleft()
        fam = self.rec.families[f]
        self.py_thread[f], self.py_start[f] = th, t
        a = self._actor(fam.items, fam.gaps, fam.tail, th, f)
        gap = fam.gaps[0] if fam.items else fam.tail
        self.at(t + round(gap / self.py_factor[f]), _ACT, a.idx)


# ---------------------------------------------------------------------------- the predicted trace
def _predicted_trace(trace: TraceData, rec: _Recording, sim: _Replay, engine_threads: int) -> tuple[TraceData, int]:
    """The model's run as a trace like a profile's (and how many recorded spans it has no place for).

    Spans keep their recorded names and family fields; program threads keep their tids and names,
    engine workers and custom-op threads get new ones after them. Stored splits are dropped (the
    times changed): the split is computed from the family's spans.
    """
    t = trace.table
    o = trace.ops
    assert o is not None
    t0 = rec.t0
    base = max([0, *(p.tid for p in rec.programs)]) + 1
    c_base = base + engine_threads

    def tid_of(code: int) -> int:
        """The predicted trace's tid of a pusher: a program's own, or a custom-op thread's new one."""
        return code if code >= 0 else c_base + (-1 - code)

    idx: list[int] = []  # the recorded span each predicted one copies
    row: list[int] = []  # and its row in the engine table
    start: list[int] = []
    end: list[int] = []
    tid: list[int] = []
    for r, s in enumerate(rec.span):
        if s < 0 or sim.end[r] < 0:
            continue
        row.append(r)
        if rec.kind[r] == _WAIT:
            idx.append(s)
            start.append(sim.pushed[r])
            tid.append(tid_of(sim.pusher[r]))
        else:
            idx.append(s)
            start.append(sim.start[r])
            tid.append(base + sim.worker[r])
        end.append(sim.end[r])
    py_cpu: list[int] = []
    n_ops = len(idx)
    for f, fam in enumerate(rec.families):
        if sim.py_start[f] >= 0 and sim.py_end[f] >= 0:
            idx.append(fam.python)
            start.append(sim.py_start[f])
            end.append(sim.py_end[f])
            tid.append(c_base + sim.py_thread[f])
            c = int(t.cpu[fam.python])
            py_cpu.append(round(c / sim.py_factor[f]) if c >= 0 else -1)
    take = np.array(idx, dtype=_I64)
    sub = t.take(take)
    cpu = np.full(len(idx), -1, dtype=_I64)
    cpu[n_ops:] = py_cpu
    spans = replace(
        sub,
        strings=list(t.strings),
        start=np.array(start, dtype=_I64) + t0,
        end=np.array(end, dtype=_I64) + t0,
        tid=np.array(tid, dtype=_I64),
        split_at=np.zeros(0, dtype=_I64),
        split_ns=np.zeros((0, 3), dtype=_I64),
        cpu=cpu,
    )
    # Flows: from each sub-op's push in its Python to its start, as the profiler draws them.
    f_names: list[str] = []
    f_ids: list[int] = []
    f_src_tid: list[int] = []
    f_src: list[int] = []
    f_dst_tid: list[int] = []
    f_dst: list[int] = []
    roles = t.role.tolist()
    for k, (s, r) in enumerate(zip(idx[:n_ops], row, strict=True)):
        if roles[s] != _SUBOP or sim.pusher[r] >= 0:
            continue
        f_ids.append(len(f_ids) + 1)
        f_names.append(t.strings[t.name[s]])
        f_src_tid.append(tid_of(sim.pusher[r]))
        f_src.append(min(sim.pushed[r], start[k]) + t0)
        f_dst_tid.append(tid[k])
        f_dst.append(start[k] + t0)
    flows = FlowTable.from_rows(f_ids, f_names, ["push"] * len(f_ids), f_src_tid, f_src, f_dst_tid, f_dst)
    ran = [p >= 0 for p in sim.pushed]
    ids = o.op.tolist()
    table = OpTable(
        op=o.op.copy(),
        kind=o.kind.copy(),
        push=np.array([p + t0 if k else -1 for p, k in zip(sim.pushed, ran, strict=True)], dtype=_I64),
        pusher=np.array([tid_of(p) if k else 0 for p, k in zip(sim.pusher, ran, strict=True)], dtype=_I64),
        ready=np.array([x + t0 if x >= 0 else -1 for x in sim.ready], dtype=_I64),
        by=np.array(
            [-1 if b == -1 else e if b == _EXTERNAL else ids[b] for b, e in zip(sim.by, o.by.tolist(), strict=True)], dtype=_I64
        ),
        var=np.array(
            [e if b == _EXTERNAL else v for b, v, e in zip(sim.by, sim.by_var, o.var.tolist(), strict=True)], dtype=_I64
        ),
        site=o.site.copy(),
        acc_at=o.acc_at.copy(),
        acc_var=o.acc_var.copy(),
        acc_write=o.acc_write.copy(),
        strings=list(o.strings),
    )
    # Program threads; a pool thread's leftover pushes (a custom op from before the profile) only
    # when they own a span, so its name is not shown twice beside the model's own pool threads.
    with_spans = set(tid)
    pool = (_ENGINE_PREFIX, _CUSTOM_PREFIX)
    tids = sorted({p.tid for p in rec.programs if p.tid in with_spans or not trace.thread_name(p.tid).startswith(pool)})
    # Each program thread stays in its process; the model's pools join the recorded threads' one
    # process (pid 0 when they came from several: the model replays one engine).
    pid_of = {th.tid: th.pid for th in trace.threads}
    home = {pid_of.get(p, 0) for p in tids}
    pool_pid = home.pop() if len(home) == 1 else 0
    threads = [ThreadInfo(p, trace.thread_name(p), pid_of.get(p, 0)) for p in tids]
    threads += [ThreadInfo(base + w, f"{_ENGINE_PREFIX}{w}", pool_pid) for w in range(engine_threads)]
    threads += [ThreadInfo(c_base + th, f"{_CUSTOM_PREFIX}{th}", pool_pid) for th in range(sim.threads)]
    out = TraceData(
        threads=threads,
        spans=spans.sorted_by_start(),
        flows=flows,
        metadata=dict(trace.metadata),
        ops=table,
        processes=dict(trace.processes),
    )
    return out, len(t) - len(idx)


# ---------------------------------------------------------------------------- the naive engine
def _extent(trace: TraceData) -> tuple[int, int]:
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


def _warp_of(t: SpanTable, at: np.ndarray, factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One thread's time warp: (old, new) times of every boundary of its spans ``at``.

    Between two boundaries the thread is in its innermost open span (or in none); that piece of
    time is divided by that span's factor. Spans nest on a thread, so a sweep with a stack finds
    the innermost one; everything is inline on the naive engine, so this is the whole schedule.
    """
    s, e = t.start[at], t.end[at]
    bounds = np.unique(np.concatenate([s, e]))
    order = np.lexsort((-e, s))
    s_l, e_l, f_l = s[order].tolist(), e[order].tolist(), factor[at][order].tolist()
    piece = np.ones(max(len(bounds) - 1, 0), dtype=np.float64)
    stack: list[int] = []
    k = 0
    b_l = bounds.tolist()
    for j in range(len(b_l) - 1):
        x = b_l[j]
        while stack and e_l[stack[-1]] <= x:
            stack.pop()
        while k < len(s_l) and s_l[k] <= x:
            if e_l[k] > x:
                while stack and e_l[stack[-1]] <= x:
                    stack.pop()
                stack.append(k)
            k += 1
        if stack:
            piece[j] = f_l[stack[-1]]
    new = np.concatenate([[0.0], np.cumsum(np.diff(bounds) / piece)]) + bounds[0] if len(bounds) else bounds.astype(np.float64)
    return bounds, np.rint(new).astype(_I64)


def _apply(x: np.ndarray, warp: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Times through a warp: identity before its first boundary, shifted by its change after the last."""
    if warp is None or not len(warp[0]):
        return x
    old, new = warp
    inside = np.rint(np.interp(x, old, new)).astype(_I64)
    return np.where(x > old[-1], x + (new[-1] - old[-1]), np.where(x < old[0], x, inside))


def _naive(trace: TraceData, factor: np.ndarray) -> tuple[TraceData, int, int]:
    """The naive engine's replay: each thread's spans through its warp (see :func:`_warp_of`)."""
    t = trace.table
    o = trace.ops
    assert o is not None
    _, recorded = _extent(trace)
    warps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    start, end = t.start.copy(), t.end.copy()
    for tid in np.unique(t.tid).tolist():
        at = np.flatnonzero(t.tid == tid)
        warps[tid] = w = _warp_of(t, at, factor)
        start[at], end[at] = _apply(t.start[at], w), _apply(t.end[at], w)

    def by_thread(x: np.ndarray, tids: np.ndarray) -> np.ndarray:
        """Times (-1 unknown stays -1) through the warp of the thread each belongs to."""
        out = x.copy()
        for tid in np.unique(tids).tolist():
            m = (tids == tid) & (x >= 0)
            out[m] = _apply(x[m], warps.get(tid))
        return out

    spans = replace(
        t, strings=list(t.strings), start=start, end=end, split_at=np.zeros(0, dtype=_I64), split_ns=np.zeros((0, 3), dtype=_I64)
    )
    f = trace.flow_table
    flows = replace(f, src_ts=by_thread(f.src_ts, f.src_tid), dst_ts=by_thread(f.dst_ts, f.dst_tid))
    ops = replace(o, push=by_thread(o.push, o.pusher), ready=by_thread(o.ready, o.pusher))
    out = TraceData(
        threads=list(trace.threads),
        spans=spans.sorted_by_start(),
        flows=flows,
        instants=list(trace.instants),
        counters=list(trace.counters),
        metadata=dict(trace.metadata),
        ops=ops,
        processes=dict(trace.processes),
    )
    return out, recorded, _extent(out)[1]


# ---------------------------------------------------------------------------- what_if
def _pool_of(trace: TraceData, key: str, prefix: str) -> int:
    """The recorded pool size: the profiler's metadata, else the pool's threads in the trace."""
    n = trace.metadata.get(key)
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        return n
    return max(1, sum(1 for th in trace.threads if th.name.startswith(prefix)))


def _notes(rec: _Recording, trace: TraceData, dropped: int) -> list[str]:
    """The assumptions behind a prediction, and those this trace shows to matter (in plain words)."""
    lat, n = rec.latency, rec.samples
    words = ", ".join(
        f"{_LATENCY_WORDS[k]} {_fmt(lat[k])} ({f'median of {n[k]}' if n[k] else 'default'})" for k in _LATENCY_WORDS
    )
    notes = [
        _GIL_NOTE,
        "Threads do not compete for CPU cores in the model: with more busy threads than cores, expect longer times.",
        "Each op lasts its recorded duration divided by its factor; a custom op's Python its own time (without its "
        "waits) divided by its factor, with its pushes and waits where they were; the program's own time between its "
        "pushes and waits stays as recorded (so does any time a push was held by back-pressure).",
        f"Hand-offs, read off this trace: {words}.",
    ]
    t = trace.table
    py = t.role == _PYTHON
    cpu = t.cpu[py]
    wall = (t.end - t.start)[py]
    have = cpu >= 0
    if np.any(have) and wall[have].sum() > 0:
        share = float(cpu[have].sum() / wall[have].sum())
        if share > 0.3:
            notes.append(
                f"The custom ops' Python was on a CPU {share:.0%} of its time: it holds the GIL then, so more of it at "
                "once will not run as much in parallel as predicted."
            )
    pool = (_ENGINE_PREFIX, _CUSTOM_PREFIX)
    programs = [p.tid for p in rec.programs if p.items and not trace.thread_name(p.tid).startswith(pool)]
    if len(programs) > 1:
        names = ", ".join(trace.thread_name(tid) for tid in programs)
        notes.append(
            f"{len(programs)} threads pushed work ({names}): each replays from its own recorded start, so what "
            "synchronised them outside the engine (starting and joining a thread, locks, queues) is not modelled."
        )
    orphans = sum(len(p.items) for p in rec.programs if trace.thread_name(p.tid).startswith(pool))
    if orphans:
        notes.append(
            f"{_count(orphans, 'op or wait', 'ops and waits')} came from engine or custom-op threads outside any "
            "recorded custom-op Python (one that began before the profile did): replayed at their recorded times."
        )
    slow = _contention(t)
    if slow is not None:
        name, ratio = slow
        notes.append(
            f"{name!r} ran {ratio:.1f}x longer (median) with other work beside it than alone: the threads competed for "
            "cores, memory bandwidth or the GIL, which the model does not see. More threads will gain less than "
            "predicted, fewer will lose less."
        )
    if lat["engine_wake"] > 1_000_000:
        notes.append(
            f"An idle engine worker took {_fmt(lat['engine_wake'])} (median) to start a ready op: it waited for the GIL, "
            "held by Python on another thread. The model keeps that latency, but not when the GIL really frees."
        )
    if dropped:
        notes.append(
            f"Left out of the predicted trace: {_count(dropped, 'recorded span')} of no engine op or wait (user spans, markers)."
        )
    return notes


def _contention(t: SpanTable) -> tuple[str, float] | None:
    """The op or Python (by name) whose spans ran longest beside other work relative to alone.

    Durations are replayed as recorded, so work that was slowed by work beside it (two BLAS calls
    on two cores, Python holding the GIL) carries that slowdown into every prediction. Each span
    of an op or a Python counts as *beside other work* when another such span runs at its midpoint;
    a name is reported when its median beside others is 1.3x its median alone (spans >= 100 µs).
    """
    role = t.role
    work = ((t.op >= 0) & ((role == 0) | (role == _SUBOP) | (role == _DUMMY_ROLE))) | (role == _PYTHON)
    work &= t.strs(t.cat) != WAIT_CATEGORY
    idx = np.flatnonzero(work)
    if len(idx) < 2:
        return None
    s, e = t.start[idx], t.end[idx]
    mid = (s + e) // 2
    running = np.searchsorted(np.sort(s), mid, side="right") - np.searchsorted(np.sort(e), mid, side="right")
    names = t.name[idx]
    best: tuple[str, float, int] | None = None
    for code in np.unique(names).tolist():
        mine = names == code
        d = (e - s)[mine]
        alone, beside = d[running[mine] <= 1], d[running[mine] > 1]
        if not len(alone) or not len(beside) or np.median(alone) < 100_000:
            continue
        ratio = float(np.median(beside) / np.median(alone))
        total = int(d.sum())
        if ratio > 1.3 and (best is None or total > best[2]):
            best = (t.strings[code], ratio, total)
    return None if best is None else (best[0], best[1])


def what_if(
    trace: TraceData,
    speedup: Mapping[str, float] | None = None,
    *,
    engine_threads: int | None = None,
    custom_threads: int | None = None,
) -> WhatIf:
    """Predict the end-to-end time of the recorded run after a change (see the module docstring).

    ``speedup`` maps a name to a factor by which the selected spans get faster (2.0: half the time;
    0.5: twice the time). A name is a span name (``"T::pure_python"``, ``"T::_plus_scalar"``, a
    plain op ``"_plus_scalar"``) or a custom-op type: ``"T"`` selects all of T's work, forward and
    backward (its Python, sub-ops and ``Dummy_Wait``), ``"_backward_T"`` its backward only.
    ``engine_threads`` / ``custom_threads`` set the pools' sizes (default: the recorded ones).

    The trace must carry the engine's edges (``trace.ops``): one recorded by opprof's profiler,
    kept in memory or saved as ``.opprof``. Raises ValueError for an unknown name (with the closest
    known ones), a factor that is not finite and > 0, a pool size below 1 or any pool size for a
    trace of the naive engine, and a trace without edges.
    """
    factors = _check_factors(speedup)
    e_threads = _check_pool("engine_threads", engine_threads)
    c_threads = _check_pool("custom_threads", custom_threads)
    ops = trace.ops
    t = trace.table
    approximate = trace.metadata.get(APPROXIMATE_PATH)
    if isinstance(approximate, str):
        raise ValueError(f"what_if replays one engine's edges, and this trace cannot be replayed as one: {approximate}")
    if ops is None or not len(ops) or not bool(np.any(t.op >= 0)):
        raise ValueError(
            "what_if needs the engine's edges (every push, wait and var access) that opprof's profiler records; "
            "this trace has none. Use the trace of opprof.profile() directly, or save it as .opprof "
            "(Chrome trace JSON keeps no edges, and other tools' traces have none)."
        )
    factor = _span_factors(t, factors)
    if trace.metadata.get("engine") == "naive":
        if e_threads is not None or c_threads is not None:
            raise ValueError(
                "engine_threads and custom_threads do not apply to a trace of the naive engine, which runs every op "
                "inline on the pushing thread; record with the threaded engine (mx.set_engine('threaded')) to ask that"
            )
        predicted_trace, recorded, predicted = _naive(trace, factor)
        notes = [
            "Naive engine: everything ran inline on the pushing thread, so the replay is that thread's timeline with "
            "each span's own time (without the spans nested in it) divided by its factor; the replay without change "
            "is the recording itself.",
        ]
        if len(np.unique(t.tid[t.op >= 0])) > 1:
            notes.append("Threads are replayed each on its own: what one waited for on another is not re-timed.")
        return WhatIf(recorded, predicted, recorded, factors, None, None, predicted_trace, notes)
    rec_e = _pool_of(trace, "engine_workers", _ENGINE_PREFIX)
    rec_c = _pool_of(trace, "custom_workers", _CUSTOM_PREFIX)
    e = e_threads if e_threads is not None else rec_e
    c = c_threads if c_threads is not None else rec_c
    rec = _prepare(trace)
    base = _Replay(rec, np.ones(len(t)), rec_e, rec_c).run()
    changed = bool(factors) or e != rec_e or c != rec_c
    sim = _Replay(rec, factor, e, c).run() if changed else base
    predicted_trace, dropped = _predicted_trace(trace, rec, sim, e)
    predicted_trace.metadata.update(
        engine_workers=e,
        custom_workers=c,
        producer="opprof what_if",
        what_if={"speedup": dict(factors), "engine_threads": e, "custom_threads": c, "recorded_ns": rec.end},
    )
    notes = _notes(rec, trace, dropped)
    if sim.threads > rec.recorded_custom:
        notes.append(
            f"The model starts {sim.threads} custom-op threads (the recording used {rec.recorded_custom}) at no cost; "
            "a real run pays ~0.2-4 ms the first time it starts each one."
        )
    stuck = sum(1 for r, p in enumerate(sim.pushed) if p < 0 or sim.end[r] < 0)
    if stuck:
        notes.append(
            f"{_count(stuck, 'recorded op or wait', 'recorded ops or waits')} never ran in the model (the recording is "
            "incomplete): the prediction is too short."
        )
    error = abs(base.end_ns - rec.end) / rec.end if rec.end > 0 else 0.0
    if error > 0.1:
        notes.append(
            f"The model without change is {error:.0%} off the recording: for this trace, trust the ratio of the "
            "prediction to the model without change more than the prediction itself."
        )
    return WhatIf(
        recorded_ns=rec.end,
        predicted_ns=sim.end_ns,
        baseline_ns=base.end_ns,
        speedup=factors,
        engine_threads=e,
        custom_threads=c,
        trace=predicted_trace,
        notes=notes,
        recorded_engine_threads=rec_e,
        recorded_custom_threads=rec_c,
        calibration=dict(rec.latency),
    )
