"""What a timeline draws, as plain columns: NumPy arrays and lists in dicts, no drawing.

The drawing-free half of the figure, beside :mod:`.layout` (where each span goes): given a trace,
its layout and the blocks to draw (:func:`drawn_blocks`: sub-pixel spans merged, or
:func:`every_span`), it makes the columns :mod:`.figure` hands to Bokeh, so they are fast to test
and the figure only places them in models:

* :func:`span_columns`: the drawn rectangles (numeric, names and hover texts as codes into small
  lookup tables, so size grows with the screen, not the trace), with the flows from each push to
  its sub-op; a merged block's ``busy_fraction`` is the fill's alpha through :func:`busy_alpha`.
* The hover texts, made only for the rectangles drawn: a parent's split with its Python on and off
  CPU, its waiting by cause (:mod:`opprof.trace.analysis.causes`) and the op that blocked it
  longest; a sub-op's or wait's line of the user's code that pushed it, and a span's args.
* :func:`label_columns`: the names on the bars for a view (the browser runs the same rule).
* The critical path on the layout (:func:`path_index`, :func:`path_columns`): its rectangles, the
  widest in view first, and its hops between lanes.
* The GIL strip (:func:`state_index`, :func:`state_columns`): where the trace holds thread states,
  a thin strip under each thread's lane coloured by its state (holds the GIL, waits for it,
  blocked, runs without it, waits for a CPU), runs narrower than a pixel merged per lane and pixel
  column into a block of their main state; a wait's hover names the thread that held the GIL and
  the span it ran, made only for the runs drawn.

Nothing here imports Bokeh, ipywidgets or jupyter_bokeh (an import-linter contract in
``pyproject.toml`` says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Analysis, Role, Trace
from ..trace.analysis.causes import op_names
from ..trace.analysis.critical import CriticalPath
from ..trace.analysis.gil import OFF_CPU_WORTH_SAYING, GilHolder, code_between, span_at
from ..trace.analysis.summary import python_cpu_parts
from ..trace.columns import ROLE_CODE
from ..trace.ops import short_site
from ..trace.records import FAMILY_ARGS
from ..trace.text import fmt_bytes, fmt_us
from ..trace.threadstates import STATE_LABELS, STATES, ThreadState
from .layout import ROLE_NAMES, ROW_HEIGHT, Blocks, LaneKind, Layout, blocks, busy_fraction, runs

__all__ = [
    "BUSY_ALPHA",
    "DETAIL_COLUMNS",
    "LABEL_CHAR_PX",
    "LABEL_FONT_SIZE",
    "LABEL_LIMIT",
    "LABEL_MIN_CHARS",
    "LABEL_MIN_ROW_PX",
    "LABEL_PAD_PX",
    "PATH_LIMIT",
    "PathIndex",
    "STATE_STRIP",
    "StateIndex",
    "busy_alpha",
    "drawn_blocks",
    "empty_flows",
    "empty_path",
    "empty_states",
    "every_span",
    "label_columns",
    "op_type_splits",
    "path_columns",
    "path_index",
    "span_columns",
    "state_columns",
    "state_index",
]

#: Fill alpha by busy share (column ``busy_fraction``: 1 for a span, busy time / width for a merged
#: block): 0.15 at idle, 1 when busy throughout. Drawn at full alpha, a row busy 1 % of the time
#: (a 3 µs wait in 30 % of the iterations) looked as solid as one busy 100 %; the floor keeps 1 %
#: visible (0.16 of the wait colour on white is #fae4e5, beside the lanes' #f6f6f6 shading).
BUSY_ALPHA = (0.15, 1.0)

#: Names on the bars, as Perfetto and chrome://tracing draw them: 11 px text estimated at 7 px a
#: character, 3 px in from the span's visible left edge. A single span gets its name when its
#: visible part holds it, cut to fit with "…" when 3 characters or more of it fit. Headless
#: Chromium's 11px helvetica averages 5.6 px a character over the demo's and the synthetic traces'
#: names (6.9 at worst, "sum") and draws "…" 11 px wide: 3 characters and the ellipsis take 27.8 of
#: the 28 px budgeted. At most LABEL_LIMIT labels (the widest spans'; a 700 px frame of 17 rows holds
#: ~350 names of 34 px or more, and 2,000 labels added no paint time measurable over the noise of a
#: shared machine, ~40-55 ms a full paint of a 2,000-span figure in software Chromium), none in rows
#: under LABEL_MIN_ROW_PX (the text would print over the next row).
LABEL_FONT_SIZE = "11px"
LABEL_CHAR_PX = 7.0
LABEL_PAD_PX = 3.0
LABEL_MIN_CHARS = 3
LABEL_LIMIT = 2_000
LABEL_MIN_ROW_PX = 13.0

#: Path rectangles drawn at most (the longest in view); the widget redraws them as it zooms.
PATH_LIMIT = 5_000


# ---------------------------------------------------------------------------- level of detail
def drawn_blocks(layout: Layout, x0: float, x1: float, pixels: int, mask: np.ndarray | None = None) -> Blocks:
    """What to draw at ``pixels`` over ``[x0, x1]``: sub-pixel spans merged, and runs of alike
    blocks drawn as one (see :func:`.layout.runs`)."""
    return runs(layout, blocks(layout, x0, x1, pixels, mask), (x1 - x0) / max(1, pixels))


def every_span(layout: Layout, mask: np.ndarray | None = None) -> Blocks:
    """Every (unmasked) span as its own rectangle, in row then time order."""
    idx = np.arange(len(layout)) if mask is None else np.nonzero(mask)[0]
    idx = idx[np.lexsort((layout.left[idx], layout.row[idx]))]
    return Blocks(idx, np.ones(len(idx), dtype=np.int64), layout.right[idx], layout.right[idx] - layout.left[idx])


# ---------------------------------------------------------------------------- hover texts
def _parent_texts(a: Analysis, rows: np.ndarray) -> list[tuple[str, str, str]]:
    """(split, waiting by cause, longest blocker) hover texts of the invocation ``rows``."""
    c = a.causes
    top = a.top_blocker[rows]
    blocked = top[top >= 0]
    names, invs = op_names(a.table, c.blocked_op[blocked])
    label = iter(zip(names, invs.tolist(), strict=True))
    out = []
    caller = a.callers[rows].tolist()
    t = a.table
    names_of_inv = {int(i): t.strings[n] for i, n in zip(t.inv[a.parents].tolist(), t.name[a.parents].tolist(), strict=True)}
    mem = a.invocation_memory
    for k, (r, j, (py, sub, wait), ns) in enumerate(
        zip(rows.tolist(), top.tolist(), a.split[rows].tolist(), c.ns[rows].tolist(), strict=True)
    ):
        cpu = int(c.cpu[r])
        split = _split_text(py, sub, wait, cpu)
        if caller[k] >= 0:  # a custom op called inside another's Python
            split = f"called by {names_of_inv.get(caller[k], 'invocation')} #{caller[k]} · {split}"
        if mem is not None:  # memory recorded: its sub-ops' arrays, and the most alive while it ran
            split += f" · memory: {fmt_bytes(int(mem[0][r]))} allocated by its sub-ops, peak {fmt_bytes(int(mem[1][r]))}"
        why = _cause_text(c.keys, ns)
        blocker = ""
        if j >= 0:
            name, inv = next(label)
            blocker = _blocker_text(name, inv, int(c.blocked_var[j]), int(c.blocked_ns[j]), int(a.n_blockers[r]))
        out.append((split, why, blocker))
    return out


def _split_text(py: int, sub: int, wait: int, cpu: int = -1) -> str:
    """A parent's python / sub-ops / waiting (ns), with python on and off CPU when ``cpu`` is known
    (>= 0; the off part subtracted in whole ns, then shown: in µs floats it could round the other way)."""
    total = py + sub + wait or 1
    python = f"python {fmt_us(py / 1e3)} ({100 * py / total:.0f}%"
    if cpu >= 0:
        on, off, _ = (int(v[0]) for v in python_cpu_parts(np.array([py]), np.array([cpu])))
        python += f": {fmt_us(on / 1e3)} on CPU, {fmt_us(off / 1e3)} off"
    return (
        f"{python}) · sub-ops {fmt_us(sub / 1e3)} ({100 * sub / total:.0f}%) · "
        f"waiting {fmt_us(wait / 1e3)} ({100 * wait / total:.0f}%)"
    )


def _cause_text(keys: tuple[str, ...], ns: list[int]) -> str:
    """The waiting by cause, largest first, as ms (or µs) and % of the waiting."""
    total = sum(ns)
    if not total:
        return "none"
    parts = sorted((v, k) for k, v in zip(keys, ns, strict=True) if v > 0)[::-1]
    return " · ".join(f"{k} {fmt_us(v / 1e3)} ({100 * v / total:.0f}%)" for v, k in parts)


def _blocker_text(name: str, inv: int, var: int, ns: int, n: int) -> str:
    """``dependency 1.20 ms: Slow::_mul_scalar (invocation 3), var 11``: the op that held an
    invocation up longest (and how many others did)."""
    text = f"dependency {fmt_us(ns / 1e3)}: {name}"
    if inv >= 0:
        text += f" (invocation {inv})"
    if var >= 0:
        text += f", var {var}"
    if n > 1:
        text += f" (+{n - 1} more op{'s' if n > 2 else ''})"
    return text


def _site_text(site: str, wait: bool) -> str:
    """``pushed at model.py:42``: the user's line, by file name (a path's last part)."""
    return f"{'waited' if wait else 'pushed'} at {short_site(site)}"


def _args_text(args: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v}" for k, v in args.items() if k not in FAMILY_ARGS)
    return text if len(text) <= 200 else text[:199] + "…"


#: The hover's text columns beyond the name: each a code per span into the lookup ``detail``.
DETAIL_COLUMNS = ("detail", "why", "blocker")


def _details(a: Analysis, idx: np.ndarray) -> tuple[dict[str, np.ndarray], list[str]]:
    """Hover text beyond the name for the spans ``idx`` of the table, as codes into one list of
    texts: ``detail`` (a parent's split with its Python on and off CPU; else where the user's code
    pushed or waited, and the span's own args), ``why`` (a parent's waiting by cause) and
    ``blocker`` (the op that held it up longest). Only the spans given are looked at, and only
    spans that have args go through Python one by one."""
    t = a.table
    texts: dict[str, int] = {"": 0}
    codes = {c: np.zeros(len(idx), dtype=np.int32) for c in DETAIL_COLUMNS}
    is_parent = t.role[idx] == ROLE_CODE[Role.PARENT]
    if is_parent.any() and len(a.parents):
        where = np.flatnonzero(is_parent)
        pos = np.minimum(np.searchsorted(a.parents, idx[where]), len(a.parents) - 1)
        ok = a.parents[pos] == idx[where]
        for j, row in zip(where[ok].tolist(), _parent_texts(a, pos[ok]), strict=True):
            for col, text in zip(DETAIL_COLUMNS, row, strict=True):
                codes[col][j] = texts.setdefault(text, len(texts))
    # Sites: few distinct lines, so one text each and a vectorised lookup.
    site, is_wait = a.sites(idx)
    site = np.where(is_parent, -1, site)
    has_site = site >= 0
    site_of = np.full(len(idx), -1, dtype=np.int64)  # index into site_texts
    site_texts: list[str] = []
    if has_site.any():
        assert a.ops is not None
        key, inverse = np.unique(site[has_site] * 2 + is_wait[has_site], return_inverse=True)
        site_texts = [_site_text(a.ops.strings[k // 2], bool(k % 2)) for k in key.tolist()]
        site_of[has_site] = inverse.ravel()
        lookup = np.array([texts.setdefault(x, len(texts)) for x in site_texts], dtype=np.int32)
        codes["detail"][has_site] = lookup[site_of[has_site]]
    # The span's own wait for the GIL, where it was a fifth of it or more (a 3 ms sub-op of µs of work).
    gil_wait = a.span_gil_wait[idx]
    dur = t.end[idx] - t.start[idx]
    waited = np.flatnonzero((gil_wait * 5 >= dur) & (gil_wait >= 10_000) & ~is_parent)
    if len(waited):
        for j in waited.tolist():
            text = f"waited {fmt_us(gil_wait[j] / 1e3)} of its {fmt_us(dur[j] / 1e3)} for the GIL"
            if site_of[j] >= 0:
                text = f"{site_texts[site_of[j]]} · {text}"
            site_texts.append(text)
            site_of[j] = len(site_texts) - 1
            codes["detail"][j] = texts.setdefault(text, len(texts))
    if len(t.args_at):
        pos = np.minimum(np.searchsorted(t.args_at, idx), len(t.args_at) - 1)
        has = (t.args_at[pos] == idx) & ~is_parent
        for j, k in zip(np.flatnonzero(has).tolist(), pos[has].tolist(), strict=True):
            text = _args_text(t.args[k])
            if text:
                if site_of[j] >= 0:
                    text = f"{site_texts[site_of[j]]} · {text}"
                codes["detail"][j] = texts.setdefault(text, len(texts))
    return codes, list(texts)


# ---------------------------------------------------------------------------- the rectangles
def empty_flows() -> dict[str, Any]:
    return {k: np.zeros(0) for k in ("x0", "y0", "x1", "y1")}


def _flow_segments(trace: Trace, layout: Layout, invs: np.ndarray) -> dict[str, Any]:
    """Segments from each push (on the python span's row) to the sub-op it started, for ``invs``.

    A :class:`~opprof.trace.Flow` names threads and times, not invocations, so each flow is matched
    to the thread-lane span that starts where it arrives; only families in ``invs`` (those drawn
    unmerged) are kept, which bounds the size of a saved file.
    """
    out = {k: np.zeros(0) for k in ("x0", "y0", "x1", "y1")}
    out["inv"] = np.zeros(0, dtype=np.int32)
    if not trace.n_flows or not len(invs):
        return out
    thread_lane = np.array([ln.kind != LaneKind.CUSTOM for ln in layout.lanes])[layout.lane]
    fam_items = np.nonzero(thread_lane & np.isin(layout.invocation, invs))[0]
    if not len(fam_items):
        return out
    start_ns = np.rint(layout.left[fam_items] * 1e3).astype(np.int64)
    key = (layout.tid[fam_items].astype(np.int64) << 44) + start_ns
    order = np.argsort(key)
    key, fam_items = key[order], fam_items[order]
    flows = trace.flow_table
    dst = (flows.dst_tid << 44) + (flows.dst_ts - layout.t0_ns)
    pos = np.minimum(np.searchsorted(key, dst), len(key) - 1)
    hit = key[pos] == dst
    if not hit.any():
        return out
    items = fam_items[pos[hit]]
    src_tid = flows.src_tid[hit]
    src_us = (flows.src_ts[hit] - layout.t0_ns) / 1e3
    inv = layout.invocation[items]
    # The source row: the family's python span on the pushing thread, else that thread's first row.
    py = np.nonzero(thread_lane & (layout.role == ROLE_NAMES.index("python")) & np.isin(layout.invocation, inv))[0]
    py_mid = dict(zip(layout.invocation[py].tolist(), ((layout.top[py] + layout.bottom[py]) / 2).tolist(), strict=True))
    lane_mid = {ln.tid: ln.top + 0.5 for ln in layout.lanes if ln.kind == LaneKind.THREAD}
    y0 = np.array([py_mid.get(i, lane_mid.get(t, 0.0)) for i, t in zip(inv.tolist(), src_tid.tolist(), strict=True)])
    return {
        "x0": src_us,
        "y0": y0,
        "x1": layout.left[items],
        "y1": (layout.top[items] + layout.bottom[items]) / 2,
        "inv": inv.astype(np.int32),
    }


def span_columns(
    trace: Trace, layout: Layout, b: Blocks, analysis: Analysis | None = None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Columns for the rectangles in ``b``: (span source data, lookup tables, flow segments).

    Numeric columns travel as binary arrays; text goes through the ``names`` lookup so a name
    repeated a million times is sent once. A merged block has ``inv`` -1 (it belongs to no single
    family), its ``dur`` is the busy time of the spans it holds and its ``busy_fraction`` that time
    over its width (a span's is 1; it sets the fill's alpha). ``analysis`` is the figure's
    (computed here when not given).
    """
    if analysis is None:
        analysis = trace.analysis()
    items = b.items
    t = trace.table
    span_idx = layout.span_index[items]
    used, name_code = np.unique(t.name[span_idx], return_inverse=True)
    name_list = [t.strings[c] for c in used.tolist()]
    merged = b.counts > 1
    single = np.nonzero(~merged)[0]
    detail_codes = {c: np.zeros(len(items), dtype=np.int32) for c in DETAIL_COLUMNS}
    single_codes, detail_list = _details(analysis, span_idx[single])
    for c in DETAIL_COLUMNS:
        detail_codes[c][single] = single_codes[c]
    # Thread names of the drawn rectangles only (a lookup as long as the screen, not the trace).
    drawn_tids, thread_code = np.unique(layout.tid[items], return_inverse=True)
    names_of = layout.thread_labels or trace.thread_names()  # with its process, in a trace of several
    thread_labels = [names_of.get(x, f"thread {x}") for x in drawn_tids.tolist()]
    # int32: past 32,767 lanes an int16 overflowed (thread-pool servers have that many threads).
    thread_code = thread_code.ravel().astype(np.int32)
    inv = layout.invocation[items].astype(np.int32)
    inv[merged] = -1
    data = {
        "left": layout.left[items],
        "right": b.right,
        "top": layout.top[items].astype(np.float32),
        "bottom": layout.bottom[items].astype(np.float32),
        "dur": b.busy,
        "c": (layout.role[items] + np.where(merged, len(ROLE_NAMES), 0)).astype(np.int8),
        "name": name_code.ravel().astype(np.int32),
        "thread": thread_code,
        **detail_codes,
        "inv": inv,
        "count": b.counts.astype(np.int32),
        "busy_fraction": busy_fraction(layout, b),
    }
    n_lookup = max(len(name_list), len(thread_labels), len(detail_list))

    def pad(xs: list[str]) -> list[str]:
        return xs + [""] * (n_lookup - len(xs))

    names = {"name": pad(name_list), "thread": pad(thread_labels), "detail": pad(detail_list)}
    family_invs = np.unique(inv[inv >= 0])
    return data, names, _flow_segments(trace, layout, family_invs)


def busy_alpha(fraction: np.ndarray) -> np.ndarray:
    """The fill alpha drawn for a busy fraction (what the figure's interpolator does in the browser)."""
    return np.interp(fraction, (0.0, 1.0), BUSY_ALPHA)


def _empty_labels() -> dict[str, Any]:
    return {
        "x": np.zeros(0),
        "y": np.zeros(0, dtype=np.float32),
        "text": [],
        "c": np.zeros(0, dtype=np.int8),
        "i": np.zeros(0, dtype=np.int32),
    }


def label_columns(
    data: dict[str, Any],
    names: list[str],
    x0: float,
    x1: float,
    frame: tuple[float, float],
    rows: float,
    limit: int = LABEL_LIMIT,
) -> dict[str, Any]:
    """Names on the bars for the view ``[x0, x1]`` of the drawn rectangles ``data`` (the columns of
    :func:`span_columns`, ``names`` its name lookup), in a plot area of ``frame`` (width, height)
    pixels showing ``rows`` rows: see :data:`LABEL_FONT_SIZE`. Each label sits at its span's visible
    left edge (``max(left, x0)``: a span starting off screen keeps its name in view) in its top row
    (a parent's band holds its children below), ``i`` is its rectangle's row in ``data``.

    The browser runs the same rule (:mod:`.figure`'s ``_LABELS_JS``) with the frame's real size
    whenever the view moves; this is the first layout, and the widget's after each refinement. Only
    the spans wide enough are looked at by name, and at most ``limit`` texts are made
    (:data:`LABEL_LIMIT`; the figure passes the limit it gives the browser).
    """
    width_px, height_px = frame
    left = np.asarray(data["left"])
    if x1 <= x0 or width_px <= 0 or not len(left) or height_px / max(rows, 1e-9) < LABEL_MIN_ROW_PX:
        return _empty_labels()
    a = np.maximum(left, x0)
    room = (np.minimum(np.asarray(data["right"]), x1) - a) * (width_px / (x1 - x0)) - 2 * LABEL_PAD_PX
    cand = np.flatnonzero((np.asarray(data["count"]) == 1) & (room >= LABEL_CHAR_PX))
    used, code = np.unique(np.asarray(data["name"])[cand], return_inverse=True)
    length = np.array([len(names[k]) for k in used.tolist()], dtype=np.int64)[code.ravel()]
    fits = np.floor(room[cand] / LABEL_CHAR_PX).astype(np.int64)
    ok = (length > 0) & ((fits >= length) | (fits >= LABEL_MIN_CHARS + 1))
    cand, fits = cand[ok], fits[ok]
    if len(cand) > limit:
        keep = np.sort(np.lexsort((cand, -room[cand]))[:limit])  # the widest; ties by position, as in JS
        cand, fits = cand[keep], fits[keep]
    texts = [
        n if k >= len(n) else n[: k - 1] + "…"
        for n, k in zip((names[c] for c in np.asarray(data["name"])[cand].tolist()), fits.tolist(), strict=True)
    ]
    top, bottom = np.asarray(data["top"])[cand], np.asarray(data["bottom"])[cand]
    return {
        "x": a[cand],
        "y": ((top + np.minimum(bottom, top + ROW_HEIGHT - 0.04)) / 2).astype(np.float32),
        "text": texts,
        "c": np.asarray(data["c"])[cand].astype(np.int8),
        "i": cand.astype(np.int32),
    }


def op_type_splits(trace: Trace) -> dict[str, tuple[int, float, float, float]]:
    """Per custom-op name (forward and backward apart): calls and total python, sub-ops, waiting
    (µs), from the trace's per-op-type summary."""
    ot = trace.analysis().op_types
    return {
        name: (int(ot.calls[k]), float(ot.python[k]) / 1e3, float(ot.subops[k]) / 1e3, float(ot.waiting[k]) / 1e3)
        for k, name in enumerate(ot.names)
    }


# ---------------------------------------------------------------------------- critical path
@dataclass(eq=False)
class PathIndex:
    """The critical path laid onto the layout once: the rectangles of its spans, and its segments
    in order, each at its span's rectangle on a thread lane (what its hops join)."""

    items: np.ndarray  # layout items of the spans on the path (every copy: thread lane and band)
    width: np.ndarray  # their widths (us): the longest are drawn first
    seg_item: np.ndarray  # per path segment with a span: its thread-lane item, -1 (a parent: band only)
    seg_start: np.ndarray  # us since the trace's start
    seg_end: np.ndarray
    by_kind: dict[str, int]  # ns of the path per segment kind, largest first
    n_segments: int


def path_index(path: CriticalPath, layout: Layout) -> PathIndex:
    """The path on the layout: its rectangles, and its segments at their thread-lane rectangles."""
    seg = np.stack([path.seg_span, path.seg_start, path.seg_end], axis=1).astype(np.int64).reshape(-1, 3)
    n_segments = len(seg)
    by_kind = path.by_kind()
    seg = seg[seg[:, 0] >= 0]
    if not len(seg) or not len(layout):
        z = np.zeros(0, dtype=np.int64)
        return PathIndex(z, np.zeros(0), z, np.zeros(0), np.zeros(0), by_kind, n_segments)
    spans = np.unique(seg[:, 0])
    items = np.flatnonzero(np.isin(layout.span_index, spans))
    # Each span's rectangle on its thread's lane (a custom-op parent has only its band one).
    thread_lane = np.array([ln.kind != LaneKind.CUSTOM for ln in layout.lanes], dtype=bool)[layout.lane[items]]
    on_thread = items[thread_lane]
    prim = np.full(len(spans), -1, dtype=np.int64)
    prim[np.searchsorted(spans, layout.span_index[on_thread])] = on_thread
    seg_item = prim[np.searchsorted(spans, seg[:, 0])]
    t0 = layout.t0_ns
    width = layout.right[items] - layout.left[items]
    return PathIndex(items, width, seg_item, (seg[:, 1] - t0) / 1e3, (seg[:, 2] - t0) / 1e3, by_kind, n_segments)


def empty_path() -> tuple[dict[str, Any], dict[str, Any]]:
    rects = {k: np.zeros(0) for k in ("left", "right", "top", "bottom")}
    rects["span"] = np.zeros(0, dtype=np.int64)
    return rects, empty_flows()


def path_columns(
    pi: PathIndex, layout: Layout, lo: float, hi: float, mask: np.ndarray | None = None, limit: int = PATH_LIMIT
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(rectangles, hops) of the path in ``[lo, hi]``: every rectangle of a span on the path, at
    most ``limit`` of them (the widest), and an arrow wherever the path goes on from one lane to
    another (from the end of its last piece on one to the start of its next on the other)."""
    if not len(pi.items):
        return empty_path()
    items = pi.items
    on = (layout.right[items] >= lo) & (layout.left[items] <= hi)
    if mask is not None:
        on &= mask[items]
    sel = np.flatnonzero(on)
    if len(sel) > limit:
        sel = np.sort(sel[np.argpartition(-pi.width[sel], limit - 1)[:limit]])
    kept = items[sel]
    rects = {
        "left": layout.left[kept],
        "right": layout.right[kept],
        "top": layout.top[kept],
        "bottom": layout.bottom[kept],
        "span": layout.span_index[kept].astype(np.int64),
    }
    use = np.isin(pi.seg_item, kept)
    si, s0, s1 = pi.seg_item[use], pi.seg_start[use], pi.seg_end[use]
    if len(si) < 2:
        return rects, empty_flows()
    b = np.flatnonzero(si[1:] != si[:-1])  # the last piece of one rectangle, before the next's
    prev, nxt = si[b], si[b + 1]
    hop = layout.lane[prev] != layout.lane[nxt]
    b, prev, nxt = b[hop], prev[hop], nxt[hop]
    edges = {
        "x0": s1[b],
        "y0": (layout.top[prev] + layout.bottom[prev]) / 2,
        "x1": s0[b + 1],
        "y1": (layout.top[nxt] + layout.bottom[nxt]) / 2,
    }
    return rects, edges


# ---------------------------------------------------------------------------- the GIL strip
#: Where the strip lies under its thread's lane, in rows below the lane's last row: in the gap between
#: lanes (:data:`.layout.LANE_GAP` 0.6), inside the lane's shading (0.25), so spans keep their places.
STATE_STRIP = (0.03, 0.27)


@dataclass(eq=False)
class StateIndex:
    """The thread states laid onto the layout once: each run of a thread that has its own lane, as
    the strip's rectangle (x in µs, as the spans), sorted by (lane, start)."""

    lane: np.ndarray  # int32, index into layout.lanes
    left: np.ndarray  # us
    right: np.ndarray
    top: np.ndarray  # float32
    bottom: np.ndarray
    code: np.ndarray  # int8: the state's index in STATES (the palette's order)
    tid: np.ndarray  # int64
    holder: np.ndarray  # int64, -1: none or unknown
    start_ns: np.ndarray  # int64 (for what the holder ran, at the middle of a wait)
    end_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.left)


def state_index(trace: Trace, layout: Layout) -> StateIndex | None:
    """The trace's thread states on the layout's thread lanes (None: the trace holds none; a thread
    in the collapsed lane, or without spans and so without a lane, gets no strip). A wait's
    holder is the analysis's: named only where the holder's own runs allow it."""
    ts = trace.analysis().thread_states
    if ts is None:
        return None
    lane_of = {ln.tid: k for k, ln in enumerate(layout.lanes) if ln.kind == LaneKind.THREAD and ln.tid is not None}
    tids = np.array(sorted(lane_of), dtype=np.int64)
    keep = np.flatnonzero(np.isin(ts.tid, tids)) if len(tids) else np.zeros(0, dtype=np.int64)
    tid = ts.tid[keep]
    lane = (
        np.array([lane_of[t] for t in tids.tolist()], dtype=np.int32)[np.searchsorted(tids, tid)]
        if len(keep)
        else (np.zeros(0, dtype=np.int32))
    )
    order = np.lexsort((ts.start[keep], lane))
    keep, tid, lane = keep[order], tid[order], lane[order]
    floor = np.array([ln.top + ln.rows for ln in layout.lanes], dtype=np.float64)[lane] if len(lane) else np.zeros(0)
    code_of = np.zeros(max(int(s) for s in STATES) + 1, dtype=np.int8)
    code_of[[int(s) for s in STATES]] = np.arange(len(STATES))
    t0 = layout.t0_ns
    return StateIndex(
        lane=lane,
        left=(ts.start[keep] - t0) / 1e3,
        right=(ts.end[keep] - t0) / 1e3,
        top=(floor + STATE_STRIP[0]).astype(np.float32),
        bottom=(floor + STATE_STRIP[1]).astype(np.float32),
        code=code_of[ts.state[keep]],
        tid=tid,
        holder=ts.holder[keep],
        start_ns=ts.start[keep],
        end_ns=ts.end[keep],
    )


def empty_states() -> tuple[dict[str, Any], dict[str, Any]]:
    data: dict[str, Any] = {k: np.zeros(0) for k in ("left", "right", "top", "bottom", "dur")}
    data.update({k: np.zeros(0, dtype=np.int32) for k in ("c", "thread", "detail", "count")})
    return data, {"thread": [""], "detail": [""]}


def state_columns(
    trace: Trace,
    layout: Layout,
    si: StateIndex,
    lo: float,
    hi: float,
    pixels: int | None,
    lanes: np.ndarray | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(strip rectangles, lookup) for the view ``[lo, hi]`` at ``pixels`` wide (None: every run as
    itself). ``lanes``: the lanes shown (None: all).

    A run at least a pixel wide is drawn as itself; narrower ones in one lane and pixel column
    merge into a block of the state they spent most time in, at least a pixel wide, and touching
    blocks of one state in a lane are drawn as one (as :func:`.layout.runs` does for spans), so
    the strip holds about a rectangle per lane and pixel column whatever the trace holds. Column
    ``c`` is the state's index in :data:`~opprof.trace.threadstates.STATES`; ``detail`` a code
    into the lookup's texts: for a wait drawn as itself, its holder and what the holder ran; for a
    merged block, how many runs and each state's share of their time.
    """
    on = (si.right >= lo) & (si.left <= hi)
    if lanes is not None:
        on &= np.isin(si.lane, lanes)
    idx = np.flatnonzero(on)
    if not len(idx):
        return empty_states()
    n_states = len(STATES)
    if pixels is None:
        single, merged_first = idx, np.zeros(0, dtype=np.int64)
        m_right = np.zeros(0)
        m_count = np.zeros(0, dtype=np.int64)
        m_share = np.zeros((0, n_states))
        m_code = np.zeros(0, dtype=np.int8)
    else:
        px = (hi - lo) / max(1, pixels)
        width = si.right[idx] - si.left[idx]
        single = idx[width >= px]
        small = idx[width < px]
        col = np.clip(np.floor((si.left[small] - lo) / px).astype(np.int64), -1, pixels + 1) + 1
        key = si.lane[small].astype(np.int64) * (pixels + 3) + col
        used, group = np.unique(key, return_inverse=True)
        group = group.ravel()
        g = len(used)
        share = np.zeros((g, n_states))
        np.add.at(share, (group, si.code[small]), si.right[small] - si.left[small])
        first = np.full(g, len(small), dtype=np.int64)
        np.minimum.at(first, group, np.arange(len(small)))  # sorted by (lane, start): the leftmost
        right = np.full(g, -np.inf)
        np.maximum.at(right, group, si.right[small])
        count = np.bincount(group, minlength=g)
        code = np.argmax(share, axis=1).astype(np.int8)
        # Touching blocks (gap under a pixel, no run drawn as itself between) of one main state: one block.
        lane = si.lane[small][first]
        left = si.left[small][first]
        between = np.searchsorted(single, small[first])  # runs drawn as themselves before each block
        joins = (lane[1:] == lane[:-1]) & (code[1:] == code[:-1]) & (left[1:] - right[:-1] < px)
        joins &= between[1:] == between[:-1]
        starts = np.flatnonzero(np.concatenate(([True], ~joins))) if g else np.zeros(0, dtype=np.int64)
        merged_first = small[first][starts]
        m_right = np.maximum(np.maximum.reduceat(right, starts), si.left[merged_first] + px) if g else right
        m_count = np.add.reduceat(count, starts) if g else count
        m_share = np.add.reduceat(share, starts, axis=0) if g else share
        m_code = code[starts]
        # A "block" of one run is that run, drawn as it is.
        alone = m_count == 1
        single = np.sort(np.concatenate([single, merged_first[alone]]))
        keep = ~alone
        merged_first, m_right, m_count, m_share, m_code = (
            merged_first[keep],
            m_right[keep],
            m_count[keep],
            m_share[keep],
            m_code[keep],
        )
    texts: dict[str, int] = {"": 0}
    detail = np.zeros(len(single) + len(merged_first), dtype=np.int32)
    wait = np.flatnonzero(si.code[single] == STATES.index(ThreadState.WAIT))
    for j, text in zip(wait.tolist(), _holder_texts(trace, si, single[wait]), strict=True):
        detail[j] = texts.setdefault(text, len(texts))
    for j, (n, row) in enumerate(zip(m_count.tolist(), m_share.tolist(), strict=True)):
        detail[len(single) + j] = texts.setdefault(_merged_state_text(n, row), len(texts))
    items = np.concatenate([single, merged_first])
    drawn_tids, thread_code = np.unique(si.tid[items], return_inverse=True)
    names_of = layout.thread_labels or trace.thread_names()
    thread_list = [names_of.get(t, f"thread {t}") for t in drawn_tids.tolist()]
    data = {
        "left": si.left[items],
        "right": np.concatenate([si.right[single], m_right]),
        "top": si.top[items],
        "bottom": si.bottom[items],
        "dur": np.concatenate([si.right[single] - si.left[single], m_share.sum(axis=1)]),
        "c": np.concatenate([si.code[single], m_code]).astype(np.int32),
        "thread": thread_code.ravel().astype(np.int32),
        "detail": detail,
        "count": np.concatenate([np.ones(len(single), dtype=np.int32), m_count.astype(np.int32)]),
    }
    detail_list = list(texts)
    n = max(len(thread_list), len(detail_list))
    return data, {"thread": thread_list + [""] * (n - len(thread_list)), "detail": detail_list + [""] * (n - len(detail_list))}


def _merged_state_text(n: int, share: list[float]) -> str:
    """``1,234 runs merged (zoom in): holds the GIL 62% · waits for the GIL 30% · blocked 8%``."""
    total = sum(share) or 1.0
    parts = sorted(((v, k) for k, v in enumerate(share) if v > 0), reverse=True)
    words = " · ".join(f"{STATE_LABELS[STATES[k]]} {100 * v / total:.0f}%" for v, k in parts)
    return f"{n:,} runs merged (zoom in): {words}"


def _holder_texts(trace: Trace, si: StateIndex, rows: np.ndarray) -> list[str]:
    """For each wait run ``rows`` of ``si``: the thread that held the GIL and the deepest span it was
    running at the run's middle (``held by opprof-custom-0, running Hog::pure_python``)."""
    holder = si.holder[rows]
    mid = (si.start_ns[rows] + si.end_ns[rows]) // 2
    running = np.full(len(rows), -1, dtype=np.int64)
    t = trace.table
    for h in np.unique(holder[holder >= 0]).tolist():
        at = np.flatnonzero(holder == h)
        running[at] = span_at(t, h, mid[at])
    # How much of each wait its holder held the GIL off a CPU (the OS gave its core to other work).
    off = np.zeros(len(rows), dtype=np.int64)
    states = trace.analysis().thread_states
    if states is not None and len(rows):
        a, b = si.start_ns[rows], si.end_ns[rows]
        off = states.overlap(holder, a, b)[:, STATES.index(ThreadState.HELD_OFF_CPU)]
        dur = np.maximum(b - a, 1)
        off = np.where(off / dur >= OFF_CPU_WORTH_SAYING, 100 * off // dur, 0)
    names = trace.thread_names()
    out = []
    for h, r, m, pct in zip(holder.tolist(), running.tolist(), mid.tolist(), off.tolist(), strict=True):
        if h < 0:
            out.append("holder not known (the GIL changing hands, or a thread the sampler did not know)")
            continue
        no_cpu = f" (off a CPU {pct}% of it)" if pct else ""
        if r >= 0:
            out.append(f"held by {names.get(h, f'thread {h}')}, running {t.strings[t.name[r]]}{no_cpu}")
            continue
        (after,), (before,) = code_between(trace.ops, h, np.array([m], dtype=np.int64))
        out.append("held by " + GilHolder(h, names.get(h, f"thread {h}"), "", 0, after, before).describe() + no_cpu)
    return out
