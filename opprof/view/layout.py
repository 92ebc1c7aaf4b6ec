"""Where each span goes on a timeline: lanes, rows and level of detail, as NumPy columns.

This is the drawing-free half of the timeline, so it is fast to test and shared by the widget and
the saved HTML. Input is only a :class:`~opprof.trace.Trace`.

* One lane per thread; a span's row is its nesting depth on that thread. In a trace of several
  processes the lanes of each process lie together, processes in pid order, and each lane's label
  starts with its process's name (:func:`thread_labels`).
* A lane group **custom ops**: each invocation gets a band of rows; its ``parent`` fills the band
  and its children (python, sub-ops, waits, ``Dummy_Wait``) sit on the rows below it, inside the
  parent's time range. Invocations that overlap in time get separate bands (greedy packing).
* Level of detail: :func:`blocks` merges spans narrower than a pixel, per row, into blocks that
  say how many spans they hold and how busy they are (:func:`busy_fraction`), and drops what is
  off screen, so a million spans draw as a few thousand rectangles and refine as the user zooms;
  :func:`runs` draws each stretch of touching blocks alike in busyness as one.

x is microseconds since the trace's first event; y grows downward (row 0 at the top).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from ..trace import Role, TraceData
from ..trace.analysis.per_trace import analysis_of
from ..trace.columns import COLLECTION_ROLE, OTHER_ROLE, ROLES

__all__ = [
    "MAX_LANES",
    "ROLE_NAMES",
    "Blocks",
    "Lane",
    "LaneKind",
    "Layout",
    "blocks",
    "build_layout",
    "busy_fraction",
    "process_starts",
    "runs",
    "thread_labels",
]

#: Role codes in the ``role`` column: 0 ("op") is a span outside any custom op, then each Role,
#: then a garbage collection's span (:data:`~opprof.trace.columns.COLLECTION_ROLE`).
ROLE_NAMES: tuple[str, ...] = ("op", *(r.value for r in Role), "gc")
assert ROLE_NAMES[1:-1] == tuple(r.value for r in ROLES[1:-1] if r is not None)  # the table's codes
assert ROLE_NAMES.index("gc") == COLLECTION_ROLE
_ROLE_CODE = {r: i for i, r in enumerate(ROLE_NAMES)}
ROW_HEIGHT = 1.0
LANE_GAP = 0.6


class LaneKind(str, Enum):
    """What a lane holds."""

    THREAD = "thread"  # one thread's spans, rows by nesting depth
    COLLAPSED = "collapsed"  # the threads past ``max_lanes``, overlaid: rows by each one's depth
    CUSTOM = "custom"  # the custom-op group: a band per invocation


#: Thread lanes drawn as lanes of their own at most (a 720-pixel figure shows ~100 legibly; box
#: zoom reaches more). Past it the busiest keep theirs and the rest share one collapsed lane.
MAX_LANES = 500


@dataclass(frozen=True, slots=True)
class Lane:
    """A horizontal band: one thread, the collapsed threads, or the custom-op group."""

    label: str
    kind: LaneKind
    tid: int | None
    top: float  # y of its first row
    rows: int
    pid: int | None = None  # a thread lane's process (None: the collapsed lane, the custom-op group)


@dataclass
class Layout:
    """Every span as a rectangle, in columns (index ``i`` of each array is one span)."""

    lanes: list[Lane]
    t0_ns: int
    span_index: np.ndarray  # index into the trace's spans (its table's rows)
    left: np.ndarray  # us
    right: np.ndarray
    top: np.ndarray  # y of the rectangle's upper edge (smaller y is higher up)
    bottom: np.ndarray
    row: np.ndarray  # global row id (for level of detail: merging happens within a row)
    lane: np.ndarray  # index into lanes
    role: np.ndarray  # code into ROLE_NAMES
    invocation: np.ndarray  # -1 outside custom ops
    tid: np.ndarray  # the span's thread (a custom-op parent: the thread its engine op started on)
    extent: tuple[float, float] = (0.0, 1.0)
    height: float = 1.0
    collapsed_threads: int = 0  # threads drawn in the collapsed lane (0: every thread has its own)
    #: tid -> what the timeline calls the thread (:func:`thread_labels`): lanes and hover alike.
    thread_labels: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.left)


#: Between a lane's process name and its thread name: short, and unlike anything in a thread name.
PROCESS_SEP = " · "


def thread_labels(trace: TraceData) -> dict[int, str]:
    """Each thread's lane label: its name, and in a trace of several processes its process's name
    first (``"worker-1 · Dask-Default-Threads-0"``), so lanes of same-named threads in different
    processes read apart. A name that starts with its process's already (an imported thread named
    ``"pid 3 / tid 7"``) is kept as it is; a trace of one process keeps its names unchanged."""
    names = trace.thread_names()
    if len({t.pid for t in trace.threads}) < 2:
        return names
    out: dict[int, str] = {}
    for t in trace.threads:
        proc, name = trace.process_name(t.pid), names.get(t.tid, t.name)
        out.setdefault(t.tid, name if name.startswith(proc) else f"{proc}{PROCESS_SEP}{name}")
    return out


def process_starts(layout: Layout) -> list[int]:
    """Indices of the lanes that begin another process's lanes (none for a trace of one process):
    where the timeline draws a line between processes."""
    lanes = layout.lanes
    return [
        k
        for k in range(1, len(lanes))
        if lanes[k].kind == LaneKind.THREAD and lanes[k - 1].kind == LaneKind.THREAD and lanes[k].pid != lanes[k - 1].pid
    ]


def _first_fit(starts: list[int], ends: list[int]) -> list[int]:
    """Lowest free row per interval so that intervals in one row never overlap (input sorted by start).

    Intervals that overlap no earlier one (most custom ops run one after another) take row 0
    without the heap: only runs of overlapping intervals are packed one by one.
    """
    n = len(starts)
    if not n:
        return []
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    reach = np.maximum.accumulate(e)
    alone = np.ones(n, dtype=bool)
    alone[1:] = s[1:] >= reach[:-1]  # starts after everything before it has ended
    if alone.all():
        return [0] * n
    rows = np.zeros(n, dtype=np.int64)
    cut = [*np.flatnonzero(alone).tolist(), n]  # each run of overlapping intervals starts at a cut
    for a, b in itertools.pairwise(cut):
        if b - a > 1:
            rows[a:b] = _heap_fit(starts[a:b], ends[a:b])
    return rows.tolist()


def _nested_fit(starts: list[int], ends: list[int], under: list[int]) -> list[int]:
    """First fit where interval ``i`` takes no row above the one below interval ``under[i]``'s
    (-1: any row): a custom op called inside another's Python is drawn under its caller's band.
    One pass in start order (a caller starts before what it calls); rows are few (as many as
    invocations overlap at once)."""
    row_end: list[int] = []
    rows: list[int] = []
    for k, (s, e, up) in enumerate(zip(starts, ends, under, strict=True)):
        r = rows[up] + 1 if 0 <= up < k else 0
        while r < len(row_end) and row_end[r] > s:
            r += 1
        while r > len(row_end):  # a band under its caller's, past every row in use
            row_end.append(s)
        if r == len(row_end):
            row_end.append(e)
        else:
            row_end[r] = e
        rows.append(r)
    return rows


def _heap_fit(starts: list[int], ends: list[int]) -> list[int]:
    """First fit with a heap of busy rows (one run of overlapping intervals)."""
    busy: list[tuple[int, int]] = []  # (end, row) of rows in use
    free: list[int] = []
    rows = []
    n_rows = 0
    for s, e in zip(starts, ends, strict=True):
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            r = heapq.heappop(free)
        else:
            r = n_rows
            n_rows += 1
        heapq.heappush(busy, (e, r))
        rows.append(r)
    return rows


def _group_rows(inv: np.ndarray, tid: np.ndarray, first: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Row of each custom-op child inside its invocation's band (row 0 is the parent's).

    The children are grouped by thread: one group of rows per thread the invocation touched,
    ordered by when its work there began (so the python row comes first, then the sub-op rows),
    with the thread's nesting depth inside the group. Spans on one thread nest properly, so no two
    rectangles in a band overlap, and this needs only sorting, not a Python loop.
    """
    n = len(inv)
    if not n:
        return np.zeros(0, dtype=np.int64)
    _, grp = np.unique(inv * (int(tid.max()) + 1) + tid, return_inverse=True)
    grp = grp.ravel()
    n_grp = int(grp.max()) + 1
    g_start = np.full(n_grp, np.iinfo(np.int64).max)
    np.minimum.at(g_start, grp, first)
    g_dmin = np.full(n_grp, np.iinfo(np.int64).max)
    np.minimum.at(g_dmin, grp, depth)
    g_dmax = np.zeros(n_grp, dtype=np.int64)
    np.maximum.at(g_dmax, grp, depth)
    g_inv = np.zeros(n_grp, dtype=np.int64)
    g_inv[grp] = inv
    g_height = g_dmax - g_dmin + 1
    order = np.lexsort((g_start, g_inv))  # groups by invocation, then by start
    h = g_height[order]
    offset_sorted = np.cumsum(h) - h  # running offset over all groups...
    inv_sorted = g_inv[order]
    new_inv = np.ones(n_grp, dtype=bool)
    new_inv[1:] = inv_sorted[1:] != inv_sorted[:-1]
    base = np.maximum.accumulate(np.where(new_inv, offset_sorted, 0))  # ...restarted per invocation
    g_offset = np.empty(n_grp, dtype=np.int64)
    g_offset[order] = offset_sorted - base
    return 1 + g_offset[grp] + depth - g_dmin[grp]


@dataclass
class _Columns:
    """The spans of a trace as the columns placement needs (index ``i`` is the table's row ``i``)."""

    starts: np.ndarray
    ends: np.ndarray
    tids: np.ndarray
    roles: np.ndarray  # code into ROLE_NAMES
    invs: np.ndarray  # -1 outside custom ops

    @classmethod
    def of(cls, trace: TraceData) -> _Columns:
        t = trace.table
        # The table's role codes are ROLE_NAMES' codes, but for "some other role" (drawn as an op);
        # a collection's span has its own colour.
        roles = np.where(t.role == OTHER_ROLE, 0, t.role).astype(np.int8)
        roles[t.collections()] = COLLECTION_ROLE
        return cls(t.start, t.end, t.tid, roles, t.inv)


@dataclass
class _Placement:
    """Where each span went so far (-1: nowhere yet), lane by lane from the top."""

    row: np.ndarray
    depth: np.ndarray
    lane: np.ndarray
    top: np.ndarray
    bottom: np.ndarray
    lanes: list[Lane]
    y: float = 0.0  # the top of the next lane
    next_row: int = 0

    @classmethod
    def empty(cls, n: int) -> _Placement:
        return cls(np.full(n, -1, np.int64), np.zeros(n, np.int64), np.full(n, -1, np.int32), np.zeros(n), np.zeros(n), [])

    def add_lane(self, lane: Lane) -> int:
        self.lanes.append(lane)
        self.next_row += lane.rows
        self.y += lane.rows * ROW_HEIGHT + LANE_GAP
        return len(self.lanes) - 1


@dataclass
class _Copies:
    """Custom-op children drawn a second time, in their invocation's band."""

    items: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    top: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bottom: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` as int32 when its values fit (ids and indices mostly do): 64 MB saved per column at
    16M rectangles."""
    if len(a) and (a.min() < -(1 << 31) or a.max() >= 1 << 31):
        return a
    return a.astype(np.int32)


def _callers(trace: TraceData) -> dict[int, int]:
    """invocation -> the invocation whose Python called it, for those called so (none without the
    engine's edges)."""
    a = analysis_of(trace)
    if not len(a.parents):
        return {}
    got = a.callers
    invs = trace.table.inv[a.parents]
    keep = got >= 0
    return dict(zip(invs[keep].tolist(), got[keep].tolist(), strict=True))


def build_layout(trace: TraceData, max_lanes: int = MAX_LANES) -> Layout:
    """Place every span of ``trace`` (see the module docstring); at most ``max_lanes`` thread lanes."""
    c = _Columns.of(trace)
    n = len(c.starts)
    t0 = int(c.starts.min()) if n else 0
    p = _Placement.empty(n)
    labels = thread_labels(trace)
    collapsed = _place_threads(trace, labels, c, p, max(1, max_lanes))
    copies = _place_custom_band(c, p, _callers(trace))
    keep = np.nonzero(p.lane >= 0)[0]
    span_index = _narrow(np.concatenate([keep, copies.items]))
    return Layout(
        lanes=p.lanes,
        t0_ns=t0,
        span_index=span_index,
        left=(c.starts[span_index] - t0) / 1e3,
        right=(c.ends[span_index] - t0) / 1e3,
        # float32 and int32: what is drawn is float32 anyway, and at 10M spans (16M rectangles
        # with the band's copies) each 8-byte column is 128 MB.
        top=np.concatenate([p.top[keep], copies.top]).astype(np.float32),
        bottom=np.concatenate([p.bottom[keep], copies.bottom]).astype(np.float32),
        row=np.concatenate([p.row[keep], copies.row]).astype(np.int32),
        lane=np.concatenate([p.lane[keep], np.full(len(copies.items), len(p.lanes) - 1, dtype=np.int32)]),
        role=c.roles[span_index],
        invocation=_narrow(c.invs[span_index]),
        tid=_narrow(c.tids[span_index]),
        extent=(0.0, float((c.ends.max() - t0) / 1e3) if n else 1.0),
        height=max(p.y - LANE_GAP, ROW_HEIGHT),
        collapsed_threads=collapsed,
        thread_labels=labels,
    )


def _thread_order(tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The order by (thread, start, -end). A trace's spans are already by (start, -end), so one
    stable sort by thread does it: a radix sort when the thread codes fit 16 bits (0.2 s for 10M
    spans, where the three-key lexsort took 4.5 s)."""
    n = len(tids)
    if n and bool(np.all((starts[1:] > starts[:-1]) | ((starts[1:] == starts[:-1]) & (ends[1:] <= ends[:-1])))):
        codes = tids
        if tids.min() < 0 or tids.max() >= 1 << 16:
            _, codes = np.unique(tids, return_inverse=True)
            codes = codes.ravel()
        if codes.max() < 1 << 16:
            return np.argsort(codes.astype(np.uint16), kind="stable")
        return np.argsort(codes, kind="stable")
    return np.lexsort((-ends, starts, tids))


def _group_depths(group: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of each span within its group (0 = outermost); input sorted by (group, start, -end).

    For properly nested spans the depth of span ``i`` is the number of earlier spans of its group
    still open at its start: its position in the group minus the group's spans ended by then.
    Zero-length spans at the same start come last in the sort order and are not "earlier", so
    they are taken back out of the count of ended spans.

    Each group's times are offset past the previous group's (or, where that would not fit in
    int64, replaced by their ranks) and one searchsorted over the ends sorted per group counts,
    for each span, the spans of its group ended by its start.
    """
    n = len(starts)
    if not n:
        return np.zeros(0, dtype=np.int64)
    lo = int(min(starts.min(), ends.min()))
    span = int(max(starts.max(), ends.max())) - lo + 1
    if (int(group[-1]) + 1) * span < 1 << 62:
        # Times offset per group fit in int64: no ranks needed (a sort of 2n times saved).
        r_start, r_end, width = starts - lo, ends - lo, span
    else:
        times, rank = np.unique(np.concatenate([starts, ends]), return_inverse=True)
        rank = rank.ravel()
        r_start, r_end = rank[:n], rank[n:]
        width = len(times) + 1
    key_end = np.sort(group * width + r_end, kind="stable")  # nearly sorted already: timsort merges runs
    first = np.concatenate(([0], np.flatnonzero(group[1:] != group[:-1]) + 1))
    g_first = np.repeat(first, np.diff(np.append(first, n)))  # each span's group's first position
    ended = np.searchsorted(key_end, group * width + r_start, side="right") - g_first
    zero = ends == starts
    if zero.any():
        # Zero-length spans at the same start sort after the longer ones and are not "earlier":
        # take back out those starting by this span's start (z_upto) that come after it.
        zc = np.cumsum(zero) - zero  # zero-length spans before each position
        key_zero = (group * width + r_start)[zero]
        z_upto = np.searchsorted(key_zero, group * width + r_start, side="right") - zc[g_first]
        z_before = zc - zc[g_first]
        ended = ended - (z_upto - z_before)
    return np.maximum(np.arange(n) - g_first - ended, 0)


def _place_threads(trace: TraceData, names: dict[int, str], c: _Columns, p: _Placement, max_lanes: int) -> int:
    """A lane per thread, in the trace's thread order, rows by nesting depth; no span, no lane.

    Past ``max_lanes`` threads the busiest ``max_lanes - 1`` (by time in their outermost spans)
    keep their lanes and the others share one collapsed lane below them; returns how many.
    """
    on_thread = np.nonzero(c.roles != _ROLE_CODE["parent"])[0]
    on_thread = on_thread[_thread_order(c.tids[on_thread], c.starts[on_thread], c.ends[on_thread])]
    if not len(on_thread):
        return 0
    tids = c.tids[on_thread]
    utids, first, group = np.unique(tids, return_index=True, return_inverse=True)
    group = group.ravel()
    depth = _group_depths(group, c.starts[on_thread], c.ends[on_thread])
    n_threads = len(utids)
    # Lane order: by process (pid), then the trace's thread order, then threads it does not name, by tid.
    position: dict[int, int] = {}
    pid_of: dict[int, int] = {}
    for i, th in enumerate(trace.threads):
        position.setdefault(th.tid, i)
        pid_of.setdefault(th.tid, th.pid)
    big = len(position)
    u_list = utids.tolist()
    order_key = np.array([position.get(t, big) for t in u_list], dtype=np.int64)
    u_pid = [pid_of.get(t) for t in u_list]
    after = max(pid_of.values(), default=0) + 1  # threads the trace does not list come last
    pid_key = np.array([after if p is None else p for p in u_pid], dtype=np.int64)
    lane_order = np.lexsort((utids, order_key, pid_key))
    keep = np.ones(n_threads, dtype=bool)
    collapsed = 0
    if n_threads > max_lanes:
        busy = np.bincount(group, weights=np.where(depth == 0, c.ends[on_thread] - c.starts[on_thread], 0), minlength=n_threads)
        top = np.argsort(-busy, kind="stable")[: max_lanes - 1]
        keep[:] = False
        keep[top] = True
        collapsed = n_threads - len(top)
    rows = np.maximum.reduceat(depth, first) + 1
    lane_of = np.full(n_threads, -1, dtype=np.int64)
    for g in lane_order[keep[lane_order]].tolist():
        t = int(utids[g])
        lane_of[g] = p.add_lane(Lane(names.get(t, f"thread {t}"), LaneKind.THREAD, t, p.y, int(rows[g]), u_pid[g]))
    if collapsed:
        rest = ~keep
        label = f"{collapsed:,} more threads (collapsed)"
        lane_of[rest] = p.add_lane(Lane(label, LaneKind.COLLAPSED, None, p.y, int(rows[rest].max())))
    lanes = p.lanes
    lane_top = np.array([ln.top for ln in lanes], dtype=np.float64)
    lane_row = np.concatenate(([0], np.cumsum([ln.rows for ln in lanes])[:-1])).astype(np.int64)
    ln = lane_of[group]
    p.lane[on_thread] = ln
    p.depth[on_thread] = depth
    p.row[on_thread] = lane_row[ln] + depth
    y = lane_top[ln]
    p.top[on_thread] = y + depth * ROW_HEIGHT + 0.05
    p.bottom[on_thread] = y + (depth + 1) * ROW_HEIGHT - 0.05
    return collapsed


def _place_custom_band(c: _Columns, p: _Placement, caller: dict[int, int] | None = None) -> _Copies:
    """The custom-op group: a band per invocation, packed so overlapping invocations don't collide,
    and one called inside another's Python (``caller``: invocation -> its caller's) under its caller.

    Its children are drawn again here (they also stay on their thread lanes), as copies.
    """
    is_parent = c.roles == _ROLE_CODE["parent"]
    parents = np.nonzero(is_parent)[0]
    if not len(parents):
        return _Copies()
    parents = parents[np.argsort(c.starts[parents], kind="stable")]
    parent_invs = c.invs[parents]
    kids = np.nonzero((c.invs >= 0) & ~is_parent & (p.lane >= 0))[0]
    kids = kids[np.isin(c.invs[kids], parent_invs)]
    kid_row = _group_rows(c.invs[kids], c.tids[kids], c.starts[kids], p.depth[kids])
    band = int(kid_row.max()) + 1 if len(kids) else 1
    p_starts, p_ends = c.starts[parents].tolist(), c.ends[parents].tolist()
    if caller:  # each parent's caller, as its index among the parents (in start order)
        at = {inv: k for k, inv in enumerate(parent_invs.tolist())}
        under = [at.get(caller.get(inv, -1), -1) for inv in parent_invs.tolist()]
        slots = np.array(_nested_fit(p_starts, p_ends, under), dtype=np.int64)
    else:
        slots = np.array(_first_fit(p_starts, p_ends), dtype=np.int64)
    y, first_row = p.y, p.next_row
    base = slots * band
    p.lane[parents] = p.add_lane(Lane("custom ops", LaneKind.CUSTOM, None, y, (int(slots.max()) + 1) * band))
    p.row[parents] = first_row + base
    p.top[parents] = y + base * ROW_HEIGHT + 0.02
    p.bottom[parents] = y + (base + band) * ROW_HEIGHT - 0.02
    # The base row of each kid's parent, through the invocation id.
    inv_order = np.argsort(parent_invs)
    r = base[inv_order][np.searchsorted(parent_invs[inv_order], c.invs[kids])] + kid_row
    return _Copies(kids, first_row + r, y + r * ROW_HEIGHT + 0.12, y + (r + 1) * ROW_HEIGHT - 0.12)


@dataclass(frozen=True, slots=True)
class Blocks:
    """What to draw: one entry per rectangle (a span, or a block of merged sub-pixel spans)."""

    items: np.ndarray  # index into the layout's columns (a merged block: its first span)
    counts: np.ndarray  # spans in the rectangle
    right: np.ndarray  # right edge to draw: a merged block covers all its spans and is >= 1 pixel
    busy: np.ndarray  # total duration of the spans it holds (us)

    def __len__(self) -> int:
        return len(self.items)


def blocks(layout: Layout, x0: float, x1: float, pixels: int = 1200, mask: np.ndarray | None = None) -> Blocks:
    """What to draw for the x range ``[x0, x1]`` at ``pixels`` wide.

    A span at least one pixel wide is drawn as itself (count 1); narrower spans in the same row
    and pixel column are merged into one block, drawn at the position of its first span and
    stretched to cover them all. Spans off screen, and those ``mask`` (a boolean per layout item)
    leaves out, are left out.

    The number of rectangles is at most the spans on screen and at most about two per row and
    pixel column, so it stays bounded however many spans the trace holds.
    """
    if x1 <= x0:
        x1 = x0 + 1e-3
    px = (x1 - x0) / max(1, pixels)
    on_screen = (layout.right >= x0) & (layout.left <= x1)
    if mask is not None:
        on_screen &= mask
    on = np.nonzero(on_screen)[0]
    width = (layout.right - layout.left) if len(on) == len(layout) else (layout.right[on] - layout.left[on])
    wide = width >= px
    big = on[wide]
    small = on[~wide]
    one = np.ones(len(big), dtype=np.int64)
    if not len(small):
        return Blocks(big, one, layout.right[big], width[wide])
    col = np.floor((layout.left[small] - x0) / px).astype(np.int64)
    col = np.clip(col, -1, pixels + 1) + 1  # spans starting off screen share the edge columns
    ncols = pixels + 3
    rows = int(layout.row.max()) + 1 if len(layout.row) else 1
    key = layout.row[small].astype(np.int64) * ncols + col
    left, right_s = layout.left[small], layout.right[small]
    if rows * ncols <= max(4 * len(small), 1 << 22):
        # Dense groups (every row and pixel column a slot): reductions by slot, no sort at all;
        # a three-key lexsort of 10M spans took 4.5 s.
        size = rows * ncols
        counts_all = np.bincount(key, minlength=size)
        slots = np.flatnonzero(counts_all)
        min_left = np.full(size, np.inf)
        np.minimum.at(min_left, key, left)
        at_min = np.flatnonzero(left == min_left[key])
        first_pos = np.full(size, len(small), dtype=np.int64)
        np.minimum.at(first_pos, key[at_min], at_min)  # the earliest-listed of the leftmost
        max_right = np.full(size, -np.inf)
        np.maximum.at(max_right, key, right_s)
        first = small[first_pos[slots]]
        counts = counts_all[slots]
        right = max_right[slots]
        busy = np.bincount(key, weights=right_s - left, minlength=size)[slots]
    else:
        order = np.lexsort((left, key))
        k = key[order]
        starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        counts = np.diff(np.append(starts, len(small)))
        first = small[order[starts]]
        right = np.maximum.reduceat(right_s[order], starts)
        busy = np.add.reduceat((right_s - left)[order], starts)
    merged = counts > 1
    right[merged] = np.maximum(right[merged], layout.left[first][merged] + px)
    return Blocks(
        np.concatenate([big, first]),
        np.concatenate([one, counts]),
        np.concatenate([layout.right[big], right]),
        np.concatenate([width[wide], busy]),
    )


def busy_fraction(layout: Layout, b: Blocks) -> np.ndarray:
    """How busy each rectangle's pixels are: 1 for a span; for a merged block, its spans' total time
    over its drawn width, clipped to [0, 1] (the collapsed lane overlays threads, whose spans can
    overlap and add up past the width). A block is at least a pixel wide, so two 3 µs waits in a
    pixel of 1 ms read 0.006, not a solid bar."""
    f = np.ones(len(b), dtype=np.float32)
    m = b.counts > 1
    if m.any():
        width = b.right[m] - layout.left[b.items[m]]
        f[m] = np.clip(b.busy[m] / np.maximum(width, 1e-12), 0.0, 1.0)
    return f


#: Busy levels :func:`runs` tells apart (tenths: a run's shade is within 0.085 alpha of each of
#: its blocks').
RUN_LEVELS = 10


def runs(layout: Layout, b: Blocks, px: float, levels: int = RUN_LEVELS) -> Blocks:
    """``b`` with each run of merged blocks in a row that touch (gaps under ``px``, the pixel they
    were merged at, and no span drawn as itself between), begin with spans of one role and are as
    busy to a level (of ``levels``) drawn as one block, holding all their spans. Spans drawn as
    themselves stay as they are.

    Why: blocks are a third of a screen pixel wide (merged at twice the figure's width, for HiDPI),
    and a browser antialiases each one's edges, so side by side they let the background through:
    in Chromium a row merged into blocks busy 100 % drew at ~72 % of its colour, and seams made
    evenly busy rows look uneven. One rectangle per run has no seams, and there are fewer to draw
    (a row busy evenly from end to end is one).
    """
    if int(np.count_nonzero(b.counts > 1)) < 2:
        return b
    # Every rectangle by row, then time: one float key (row * width + left; its rounding, under 8 ns
    # for an hour-long trace of 10,000 rows, only reorders spans starting that close) sorts 45,000
    # rectangles in 0.3 ms, where the two-key lexsort took 2.1.
    width = layout.extent[1] - layout.extent[0] + 1.0
    order = np.argsort(layout.row[b.items] * width + (layout.left[b.items] - layout.extent[0]))
    is_merged = b.counts[order] > 1
    between = np.cumsum(~is_merged)[is_merged]  # spans drawn as themselves so far: a run never covers one
    m = order[is_merged]
    items = b.items[m]
    left, right = layout.left[items], b.right[m]
    f = np.clip(b.busy[m] / np.maximum(right - left, 1e-12), 0.0, 1.0)
    level = np.minimum((f * levels).astype(np.int64), levels - 1)
    row, role = layout.row[items], layout.role[items]
    # A block's spans start in its pixel and are narrower than one, so the next block in its row
    # reaches further right: the gap to the last block is the gap to its run.
    joins = (row[1:] == row[:-1]) & (role[1:] == role[:-1]) & (level[1:] == level[:-1]) & (left[1:] - right[:-1] < px)
    joins &= between[1:] == between[:-1]
    starts = np.flatnonzero(np.concatenate(([True], ~joins)))
    single = np.flatnonzero(b.counts <= 1)
    return Blocks(
        np.concatenate([b.items[single], items[starts]]),
        np.concatenate([b.counts[single], np.add.reduceat(b.counts[m], starts)]),
        np.concatenate([b.right[single], np.maximum.reduceat(right, starts)]),
        np.concatenate([b.busy[single], np.add.reduceat(b.busy[m], starts)]),
    )
