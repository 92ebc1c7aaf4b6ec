"""Where each span goes on a timeline: lanes, rows and level of detail, as NumPy columns.

This is the drawing-free half of the timeline, so it is fast to test and shared by the widget and
the saved HTML. Input is only a :class:`~opprof.trace.Trace`.

* One lane per thread; a span's row is its nesting depth on that thread.
* A lane group **custom ops**: each invocation gets a band of rows; its ``parent`` fills the band
  and its children (python, sub-ops, waits, ``Dummy_Wait``) sit on the rows below it, inside the
  parent's time range. Invocations that overlap in time get separate bands (greedy packing).
* Level of detail: :func:`visible` merges spans narrower than a pixel, per row, into blocks that
  say how many spans they hold, and drops what is off screen, so a million spans draw as a few
  thousand rectangles and refine as the user zooms.

x is microseconds since the trace's first event; y grows downward (row 0 at the top).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .trace import ROLES, Trace

__all__ = ["Lane", "Layout", "build_layout", "visible", "ROLE_NAMES"]

#: Role codes in the ``role`` column; -1 (index of "op") is a span outside any custom op.
ROLE_NAMES = ("op", *ROLES)
_ROLE_CODE = {r: i for i, r in enumerate(ROLE_NAMES)}
ROW_HEIGHT = 1.0
LANE_GAP = 0.6


@dataclass(frozen=True, slots=True)
class Lane:
    """A horizontal band: one thread, or the custom-op group."""

    label: str
    kind: str  # "thread" or "custom"
    tid: int | None
    top: float  # y of its first row
    rows: int


@dataclass
class Layout:
    """Every span as a rectangle, in columns (index ``i`` of each array is one span)."""

    lanes: list[Lane]
    t0_ns: int
    span_index: np.ndarray  # index into trace.spans
    left: np.ndarray  # us
    right: np.ndarray
    top: np.ndarray  # y of the rectangle's upper edge (smaller y is higher up)
    bottom: np.ndarray
    row: np.ndarray  # global row id (for level of detail: merging happens within a row)
    lane: np.ndarray  # index into lanes
    role: np.ndarray  # code into ROLE_NAMES
    invocation: np.ndarray  # -1 outside custom ops
    extent: tuple[float, float] = (0.0, 1.0)
    height: float = 1.0
    meta: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.left)


def _depths(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of each span on one thread (0 = outermost); input sorted by (start, -end)."""
    depth = np.zeros(len(starts), dtype=np.int32)
    stack: list[int] = []  # ends of the open spans
    for i in range(len(starts)):
        s = starts[i]
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(ends[i])
    return depth


def _first_fit(starts: list[int], ends: list[int]) -> list[int]:
    """Row per interval so that intervals in one row never overlap (input sorted by start)."""
    row_end: list[int] = []
    rows = []
    for s, e in zip(starts, ends, strict=True):
        for r, last in enumerate(row_end):
            if last <= s:
                row_end[r] = e
                rows.append(r)
                break
        else:
            row_end.append(e)
            rows.append(len(row_end) - 1)
    return rows


def build_layout(trace: Trace) -> Layout:
    """Place every span of ``trace`` (see the module docstring)."""
    spans = trace.spans
    n = len(spans)
    starts = np.fromiter((s.start for s in spans), dtype=np.int64, count=n)
    ends = np.fromiter((s.end for s in spans), dtype=np.int64, count=n)
    tids = np.fromiter((s.tid for s in spans), dtype=np.int64, count=n)
    roles = np.fromiter((_ROLE_CODE.get(s.role or "op", 0) for s in spans), dtype=np.int8, count=n)
    invs = np.fromiter((s.invocation if s.invocation is not None else -1 for s in spans), dtype=np.int64, count=n)
    t0 = int(starts.min()) if n else 0

    row = np.full(n, -1, dtype=np.int64)
    lane_of = np.full(n, -1, dtype=np.int32)
    y_top = np.zeros(n)
    y_bottom = np.zeros(n)
    lanes: list[Lane] = []
    y = 0.0
    next_row = 0

    # Thread lanes, in the trace's thread order; threads with no span get no lane.
    on_thread = roles != _ROLE_CODE["parent"]
    for t in trace.threads:
        idx = np.nonzero(on_thread & (tids == t.tid))[0]
        if not len(idx):
            continue
        idx = idx[np.lexsort((-ends[idx], starts[idx]))]
        depth = _depths(starts[idx], ends[idx])
        rows = int(depth.max()) + 1
        lane_id = len(lanes)
        lanes.append(Lane(t.name, "thread", t.tid, y, rows))
        row[idx] = next_row + depth
        lane_of[idx] = lane_id
        y_top[idx] = y + depth * ROW_HEIGHT + 0.05
        y_bottom[idx] = y + (depth + 1) * ROW_HEIGHT - 0.05
        next_row += rows
        y += rows * ROW_HEIGHT + LANE_GAP

    # Custom-op group: a band per invocation, packed so overlapping invocations don't collide.
    # Its children are drawn again here (they also stay on their thread lanes), as copies.
    parents = np.nonzero(roles == _ROLE_CODE["parent"])[0]
    copy_idx: list[int] = []
    copy_row: list[int] = []
    copy_top: list[float] = []
    copy_bottom: list[float] = []
    if len(parents):
        parents = parents[np.argsort(starts[parents], kind="stable")]
        family: dict[int, list[int]] = {}
        for i in np.nonzero((invs >= 0) & (roles != _ROLE_CODE["parent"]))[0]:
            family.setdefault(int(invs[i]), []).append(int(i))
        child_row: dict[int, int] = {}
        band = 1
        for p in parents:
            kids = sorted(family.get(int(invs[p]), []), key=lambda i: (starts[i], -ends[i]))
            fit = _first_fit([int(starts[i]) for i in kids], [int(ends[i]) for i in kids])
            for i, r in zip(kids, fit, strict=True):
                child_row[i] = r + 1
            if kids:
                band = max(band, 1 + max(fit) + 1)
        slots = _first_fit([int(starts[p]) for p in parents], [int(ends[p]) for p in parents])
        n_slots = max(slots) + 1
        lane_id = len(lanes)
        lanes.append(Lane("custom ops", "custom", None, y, n_slots * band))
        for p, slot in zip(parents, slots, strict=True):
            base = slot * band
            row[p] = next_row + base
            lane_of[p] = lane_id
            y_top[p] = y + base * ROW_HEIGHT + 0.02
            y_bottom[p] = y + (base + band) * ROW_HEIGHT - 0.02
            for i in family.get(int(invs[p]), []):
                r = base + child_row[i]
                copy_idx.append(i)
                copy_row.append(next_row + r)
                copy_top.append(y + r * ROW_HEIGHT + 0.12)
                copy_bottom.append(y + (r + 1) * ROW_HEIGHT - 0.12)
        next_row += n_slots * band
        y += n_slots * band * ROW_HEIGHT + LANE_GAP

    keep = np.nonzero(lane_of >= 0)[0]
    copies = np.array(copy_idx, dtype=np.int64)
    span_index = np.concatenate([keep, copies])
    return Layout(
        lanes=lanes,
        t0_ns=t0,
        span_index=span_index,
        left=(starts[span_index] - t0) / 1e3,
        right=(ends[span_index] - t0) / 1e3,
        top=np.concatenate([y_top[keep], np.array(copy_top)]),
        bottom=np.concatenate([y_bottom[keep], np.array(copy_bottom)]),
        row=np.concatenate([row[keep], np.array(copy_row, dtype=np.int64)]),
        lane=np.concatenate([lane_of[keep], np.full(len(copies), len(lanes) - 1, dtype=np.int32)]),
        role=roles[span_index],
        invocation=invs[span_index],
        extent=(0.0, float((ends.max() - t0) / 1e3) if n else 1.0),
        height=max(y - LANE_GAP, ROW_HEIGHT),
    )


def visible(layout: Layout, x0: float, x1: float, pixels: int = 1200) -> tuple[np.ndarray, np.ndarray]:
    """What to draw for the x range ``[x0, x1]`` at ``pixels`` wide.

    Returns ``(items, counts)``: ``items`` are indices into the layout's columns; a span at least
    one pixel wide is drawn as itself (count 1); narrower spans in the same row and pixel column
    are merged into one block, drawn at the position of its first span, stretched to cover them
    all (``counts`` says how many it holds). Spans off screen are left out.
    """
    if x1 <= x0:
        x1 = x0 + 1e-3
    px = (x1 - x0) / max(1, pixels)
    on = np.nonzero((layout.right >= x0) & (layout.left <= x1))[0]
    wide = layout.right[on] - layout.left[on] >= px
    big = on[wide]
    small = on[~wide]
    if not len(small):
        return big, np.ones(len(big), dtype=np.int64)
    col = np.floor((layout.left[small] - x0) / px).astype(np.int64)
    order = np.lexsort((layout.left[small], col, layout.row[small]))
    small = small[order]
    key_row = layout.row[small]
    key_col = col[order]
    first = np.ones(len(small), dtype=bool)
    first[1:] = (key_row[1:] != key_row[:-1]) | (key_col[1:] != key_col[:-1])
    starts = np.nonzero(first)[0]
    counts = np.diff(np.append(starts, len(small)))
    items = np.concatenate([big, small[starts]])
    return items, np.concatenate([np.ones(len(big), dtype=np.int64), counts])


def merged_right(layout: Layout, items: np.ndarray, counts: np.ndarray, x0: float, x1: float, pixels: int = 1200) -> np.ndarray:
    """Right edges to draw: a merged block reaches at least one pixel, so it stays visible."""
    px = (x1 - x0) / max(1, pixels)
    right = layout.right[items].copy()
    merged = counts > 1
    right[merged] = np.maximum(right[merged], layout.left[items][merged] + px)
    return right
