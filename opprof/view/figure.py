"""Trace -> Bokeh timeline: a pure function of the trace, shared by the widget and saved HTML.

:func:`build_timeline` reads only a :class:`~opprof.trace.Trace` (through :mod:`.layout`),
so an imported trace draws exactly like one of ours, and returns the Bokeh objects by name so the
widget can drive them and tests can inspect them without a browser (as dask's
``profile_visualize`` does). :func:`save_html` writes one standalone file with BokehJS inline.

What keeps it fast at a million spans: rectangles, not spans, are drawn. :func:`.layout.blocks`
merges spans narrower than a pixel per row into counted blocks, and the columns sent to the
browser are numeric (names and hover text go through small lookup tables), so size and draw time
grow with the screen, not the trace.

What keeps it safe: a trace's names and args are data. Tooltips use plain ``@field`` placeholders
(Bokeh escapes them; ``{safe}`` is never used), axis labels and table cells are drawn as text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from bokeh.layouts import column
from bokeh.models import (
    BoxZoomTool,
    ColumnDataSource,
    CustomJS,
    CustomJSHover,
    CustomJSTickFormatter,
    DataTable,
    Div,
    FixedTicker,
    HoverTool,
    Legend,
    LegendItem,
    LinearColorMapper,
    NumberFormatter,
    PanTool,
    Range1d,
    RangeTool,
    ResetTool,
    SaveTool,
    StringFormatter,
    TableColumn,
    TapTool,
    WheelZoomTool,
)
from bokeh.plotting import figure

from ..trace import Role, SpanTable, Trace
from ..trace.columns import ROLE_CODE
from ..trace.records import FAMILY_ARGS
from ..trace.split import family_splits
from ..trace.stats import stat_columns
from ..trace.text import fmt_us
from .layout import MAX_LANES, ROLE_NAMES, Blocks, LaneKind, Layout, blocks, build_layout

__all__ = [
    "ROLE_COLORS",
    "ROLE_LABELS",
    "Timeline",
    "build_timeline",
    "save_html",
    "span_columns",
]

#: Legend text per role code (the order of :data:`.layout.ROLE_NAMES`).
ROLE_LABELS = {
    "op": "regular op",
    "parent": "custom-op parent",
    "python": "python",
    "subop": "sub-op",
    "wait": "wait",
    "dummy_wait": "Dummy_Wait",
}
#: Fixed colours, so a role looks the same in every trace and every session. The parent is pale
#: because its children are drawn on top of it.
ROLE_COLORS = {
    "op": "#4e79a7",
    "parent": "#f1ce63",
    "python": "#59a14f",
    "subop": "#b07aa1",
    "wait": "#e15759",
    "dummy_wait": "#333333",
}
_MERGED_COLORS = {
    "op": "#a7bcd3",
    "parent": "#f8e6b1",
    "python": "#acd0a7",
    "subop": "#d7bcd0",
    "wait": "#f0abac",
    "dummy_wait": "#999999",
}
#: Colour index column ``c``: role code for a span, role code + 6 for a block of merged spans.
PALETTE = [ROLE_COLORS[r] for r in ROLE_NAMES] + [_MERGED_COLORS[r] for r in ROLE_NAMES]
#: Outlines: the same as the fill, except a parent's, so adjacent invocations stay apart.
LINE_PALETTE = [("#a07d1c" if r == "parent" else ROLE_COLORS[r]) for r in ROLE_NAMES] + [_MERGED_COLORS[r] for r in ROLE_NAMES]
DETAIL_LIMIT = 100_000  # draw every span (no merging) up to this many rectangles

# Microseconds to readable text, in the browser (ticks and hover) and in Python (tests, notes).
_FMT_US_JS = """
function fmt(us, step) {
  const a = Math.abs(step === undefined ? us : step);
  let unit = "s", scale = 1e6;
  if (a < 1) { unit = "ns"; scale = 1e-3; }
  else if (a < 1e3) { unit = "\\u00b5s"; scale = 1; }
  else if (a < 1e6) { unit = "ms"; scale = 1e3; }
  const v = us / scale;
  const ref = Math.abs((step === undefined ? us : step) / scale);
  const digits = ref === 0 ? 0 : Math.max(0, Math.min(6, 2 - Math.floor(Math.log10(ref))));
  return v.toFixed(digits) + " " + unit;
}
"""
_TICK_JS = _FMT_US_JS + "const step = ticks.length > 1 ? ticks[1] - ticks[0] : tick; return fmt(tick, step);"


@dataclass
class Timeline:
    """The Bokeh objects of one timeline, by name; ``root`` is what gets shown or saved."""

    trace: Trace
    layout: Layout
    root: Any
    figure: Any
    overview: Any
    source: ColumnDataSource  # the drawn rectangles (see :func:`span_columns`)
    names: ColumnDataSource  # lookup tables for the hover: names, thread labels, detail text
    flows: ColumnDataSource  # flow segments of the highlighted family (filled on tap)
    flows_all: ColumnDataSource  # flow segments of every family on screen
    table: DataTable
    table_source: ColumnDataSource
    bars: Any
    note: Div
    tap_callback: CustomJS
    pixels: int
    full_detail: bool = False  # every span drawn as itself: the view never needs refining
    merged: int = 0  # spans folded into blocks in the current view
    window: tuple[float, float] = (0.0, 0.0)  # x range the current data was computed for

    def refresh(self, x0: float, x1: float, mask: np.ndarray | None = None) -> None:
        """Recompute what is drawn for the x range ``[x0, x1]`` (level of detail) and push it."""
        w = x1 - x0
        lo, hi = x0 - w / 2, x1 + w / 2  # pan half a screen either way before refining again
        b = _every_span(self.layout, mask) if self.full_detail else blocks(self.layout, lo, hi, self.pixels * 2, mask)
        data, names, flows_all = span_columns(self.trace, self.layout, b)
        self.names.data = names
        self.source.data = data
        self.flows_all.data = flows_all
        self.flows.data = _empty_flows()
        self.source.selected.indices = []
        self.merged = int(b.counts[b.counts > 1].sum())
        self.window = (lo, hi)


# ---------------------------------------------------------------------------- columns
def _split_text(py: float, sub: float, wait: float) -> str:
    total = py + sub + wait or 1.0
    return (
        f"python {fmt_us(py)} ({100 * py / total:.0f}%) · sub-ops {fmt_us(sub)} ({100 * sub / total:.0f}%) · "
        f"waiting {fmt_us(wait)} ({100 * wait / total:.0f}%)"
    )


def _args_text(args: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v}" for k, v in args.items() if k not in FAMILY_ARGS)
    return text if len(text) <= 200 else text[:199] + "…"


def _details(t: SpanTable, idx: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Hover text beyond the name for the spans ``idx`` of the table: a parent's split, else the
    span's own args (sparse: only spans that have any are looked at). (code per span, texts)."""
    details: dict[str, int] = {"": 0}
    code = np.zeros(len(idx), dtype=np.int32)
    is_parent = t.role[idx] == ROLE_CODE[Role.PARENT]
    if is_parent.any():
        parents, split = family_splits(t)
        where = np.flatnonzero(is_parent)
        pos = np.minimum(np.searchsorted(parents, idx[where]), max(len(parents) - 1, 0))
        ok = (parents[pos] == idx[where]) if len(parents) else np.zeros(len(where), dtype=bool)
        for j, row in zip(where[ok].tolist(), (split[pos[ok]] / 1e3).tolist(), strict=True):
            code[j] = details.setdefault(_split_text(*row), len(details))
    if len(t.args_at):
        pos = np.minimum(np.searchsorted(t.args_at, idx), len(t.args_at) - 1)
        has = (t.args_at[pos] == idx) & ~is_parent
        for j, k in zip(np.flatnonzero(has).tolist(), pos[has].tolist(), strict=True):
            text = _args_text(t.args[k])
            if text:
                code[j] = details.setdefault(text, len(details))
    return code, list(details)


def _empty_flows() -> dict[str, Any]:
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


def span_columns(trace: Trace, layout: Layout, b: Blocks) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Columns for the rectangles in ``b``: (span source data, lookup tables, flow segments).

    Numeric columns travel as binary arrays; text goes through the ``names`` lookup so a name
    repeated a million times is sent once. A merged block has ``inv`` -1 (it belongs to no single
    family) and its ``dur`` is the busy time of the spans it holds.
    """
    items = b.items
    t = trace.table
    span_idx = layout.span_index[items]
    used, name_code = np.unique(t.name[span_idx], return_inverse=True)
    name_list = [t.strings[c] for c in used.tolist()]
    merged = b.counts > 1
    single = np.nonzero(~merged)[0]
    detail_code = np.zeros(len(items), dtype=np.int32)
    single_code, detail_list = _details(t, span_idx[single])
    detail_code[single] = single_code
    # Thread names of the drawn rectangles only (a lookup as long as the screen, not the trace).
    drawn_tids, thread_code = np.unique(layout.tid[items], return_inverse=True)
    names_of = trace.thread_names()
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
        "detail": detail_code,
        "inv": inv,
        "count": b.counts.astype(np.int32),
    }
    n_lookup = max(len(name_list), len(thread_labels), len(detail_list))

    def pad(xs: list[str]) -> list[str]:
        return xs + [""] * (n_lookup - len(xs))

    names = {"name": pad(name_list), "thread": pad(thread_labels), "detail": pad(detail_list)}
    family_invs = np.unique(inv[inv >= 0])
    return data, names, _flow_segments(trace, layout, family_invs)


# ---------------------------------------------------------------------------- figures
_TAP_JS = """
// Highlight every span of the tapped spans' invocations (thread lanes and the custom-op band),
// and draw the flows from each push to its sub-op.
const inv = source.data.inv;
const fams = new Set();
for (const i of source.selected.indices) { if (inv[i] >= 0) fams.add(inv[i]); }
const out = {x0: [], y0: [], x1: [], y1: []};
if (fams.size > 0) {
  const sel = [];
  for (let i = 0; i < inv.length; i++) { if (fams.has(inv[i])) sel.push(i); }
  source.selected.indices = sel;
  const fa = flows_all.data;
  for (let i = 0; i < fa.inv.length; i++) {
    if (fams.has(fa.inv[i])) { out.x0.push(fa.x0[i]); out.y0.push(fa.y0[i]); out.x1.push(fa.x1[i]); out.y1.push(fa.y1[i]); }
  }
}
flows.data = out;
"""

_TABLE_JS = """
// Highlight the spans whose name is selected in the stats table.
const wanted = new Set(table.selected.indices.map((i) => table.data.name[i]));
const text = names.data.name, code = source.data.name, count = source.data.count;
const sel = [];
for (let i = 0; i < code.length; i++) { if (count[i] == 1 && wanted.has(text[code[i]])) sel.push(i); }
source.selected.indices = sel;
flows.data = {x0: [], y0: [], x1: [], y1: []};
"""

_NAME_HOVER_JS = """
const i = special_vars.index, n = source.data.count[i], text = names.data.name[value];
return n > 1 ? n + " spans merged (zoom in); first: " + text : text;
"""


def _hover(source: ColumnDataSource, names: ColumnDataSource) -> HoverTool:
    lookup = {
        col: CustomJSHover(args={"names": names}, code=f"return value < 0 ? '' : names.data.{col}[value];")
        for col in ("thread", "detail")
    }
    return HoverTool(
        tooltips=[
            ("name", "@name{custom}"),
            ("thread", "@thread{custom}"),
            ("start", "@left{custom}"),
            ("duration", "@dur{custom}"),
            ("spans", "@count"),
            ("detail", "@detail{custom}"),
        ],
        formatters={
            "@name": CustomJSHover(args={"names": names, "source": source}, code=_NAME_HOVER_JS),
            "@thread": lookup["thread"],
            "@detail": lookup["detail"],
            "@left": CustomJSHover(code=_FMT_US_JS + "return fmt(value);"),
            "@dur": CustomJSHover(code=_FMT_US_JS + "return fmt(value);"),
        },
        renderers=[],
    )


#: Lane labels at least this many pixels apart (others are left unlabelled, not overprinted).
LABEL_SPACING_PX = 14


def _style_lanes(p: Any, layout: Layout, height_px: int, x_bounds: tuple[float, float]) -> None:
    """Lane labels on the y axis (drawn as canvas text) and alternate lane shading.

    The shading is one glyph for all lanes (a BoxAnnotation each was quadratic: 23 s at 8,000
    lanes), and labels are thinned to what the figure's height can show.
    """
    lanes = layout.lanes
    mids = [ln.top + ln.rows / 2 for ln in lanes]
    rows_per_px = (layout.height + 0.6) / max(1, height_px - 60)
    step = max(1, math.ceil(LABEL_SPACING_PX * rows_per_px / max(1.0, layout.height / max(1, len(lanes)))))
    shown = [k for k in range(len(lanes)) if k % step == 0 or lanes[k].kind != LaneKind.THREAD]
    p.yaxis.ticker = FixedTicker(ticks=[mids[k] for k in shown])
    p.yaxis.major_label_overrides = {mids[k]: lanes[k].label for k in shown}
    p.ygrid.grid_line_color = None
    band = [k for k, ln in enumerate(lanes) if k % 2 == 0 or ln.kind == LaneKind.CUSTOM]
    custom = [lanes[k].kind == LaneKind.CUSTOM for k in band]
    tops = [lanes[k].top - 0.25 for k in band]
    bottoms = [lanes[k].top + lanes[k].rows + 0.25 for k in band]
    p.quad(
        left=x_bounds[0], right=x_bounds[1], top=tops, bottom=bottoms,
        fill_color=["#fff4d6" if c else "#000000" for c in custom], fill_alpha=[0.5 if c else 0.035 for c in custom],
        line_alpha=0, level="underlay",
    )  # fmt: skip


def _stats_table(trace: Trace, limit: int = 500) -> tuple[ColumnDataSource, DataTable]:
    """Aggregate stats by name (the table highlights spans by name), the ``limit`` largest totals."""
    st = stat_columns(trace.table, by_category=False)
    k = len(st)
    top = slice(0, limit)
    src = ColumnDataSource(
        {
            "name": st.names[top],
            "count": st.count[top],
            "total_ms": st.total[top] / 1e6,
            "avg_us": st.total[top] / np.maximum(st.count[top], 1) / 1e3,
            "min_us": st.min[top] / 1e3,
            "max_us": st.max[top] / 1e3,
        }
    )
    num = NumberFormatter(format="0,0.000")
    cols = [
        TableColumn(field="name", title="name", formatter=StringFormatter(), width=260),
        TableColumn(field="count", title="count", formatter=NumberFormatter(format="0,0"), width=70),
        TableColumn(field="total_ms", title="total (ms)", formatter=num, width=90),
        TableColumn(field="avg_us", title="avg (µs)", formatter=num, width=80),
        TableColumn(field="min_us", title="min (µs)", formatter=num, width=80),
        TableColumn(field="max_us", title="max (µs)", formatter=num, width=80),
    ]
    title = f"top {limit} of {k} names by total time" if k > limit else "aggregate stats"
    table = DataTable(
        source=src, columns=cols, sortable=True, reorderable=False, selectable=True, width=680, height=260, index_position=None
    )
    table.name = title
    return src, table


def op_type_splits(trace: Trace) -> dict[str, tuple[int, float, float, float]]:
    """Per custom-op name (forward and backward apart): calls and total python, sub-ops, waiting (us),
    summed over the parents' splits by name code."""
    t = trace.table
    parents, split = family_splits(t)
    if not len(parents):
        return {}
    used, group = np.unique(t.name[parents], return_inverse=True)
    group = group.ravel()
    k = len(used)
    calls = np.bincount(group, minlength=k)
    sums = [np.bincount(group, weights=split[:, j] / 1e3, minlength=k) for j in range(3)]
    return {
        t.strings[c]: (int(calls[g]), float(sums[0][g]), float(sums[1][g]), float(sums[2][g]))
        for g, c in enumerate(used.tolist())
    }


def _split_bars(trace: Trace, width: int) -> Any:
    """A stacked bar per custom-op type: where its wall time went (ms)."""
    splits = op_type_splits(trace)
    kinds = sorted(splits, key=lambda k: -sum(splits[k][1:]))[:30]
    src = ColumnDataSource(
        {
            "op": kinds,
            "calls": [splits[k][0] for k in kinds],
            "python": [splits[k][1] / 1e3 for k in kinds],
            "sub-ops": [splits[k][2] / 1e3 for k in kinds],
            "waiting": [splits[k][3] / 1e3 for k in kinds],
        }
    )
    p = figure(
        y_range=list(reversed(kinds)) or ["(no custom ops)"],
        width=width,
        height=max(180, 90 + 26 * len(kinds)),
        title="custom ops: where the wall time went",
        x_axis_label="total ms",
        tools="hover,save",
        tooltips=[("op", "@op"), ("calls", "@calls"), ("part", "$name"), ("ms", "@$name{0,0.000}")],
        toolbar_location="right",
    )
    colors = [ROLE_COLORS["python"], ROLE_COLORS["subop"], ROLE_COLORS["wait"]]
    rs = p.hbar_stack(["python", "sub-ops", "waiting"], y="op", height=0.7, color=colors, source=src, line_color=None)
    p.add_layout(Legend(items=[LegendItem(label=r.name, renderers=[r]) for r in rs], orientation="horizontal"), "below")
    p.ygrid.grid_line_color = None
    return p


def build_timeline(
    trace: Trace,
    *,
    width: int = 1000,
    height: int | None = None,
    detail_limit: int = DETAIL_LIMIT,
    pixels: int | None = None,
    backend: str = "canvas",
    title: str | None = None,
    max_lanes: int = MAX_LANES,
) -> Timeline:
    """The timeline of ``trace``: main figure, overview strip, stats table, split bars, note.

    Up to ``detail_limit`` rectangles, every span is drawn as itself; beyond, spans narrower than a
    pixel (at ``pixels``, default twice ``width`` for HiDPI screens) are merged into counted blocks.
    ``backend="webgl"`` draws with WebGL (faster pan on huge views in a real GPU browser; canvas
    is the default because software GL in headless browsers is slower and logs warnings).
    Past ``max_lanes`` threads, the busiest ``max_lanes - 1`` keep lanes and the rest share one
    collapsed lane; the note above the figure says so.
    """
    layout = build_layout(trace, max_lanes)
    px = pixels or 2 * width
    x0, x1 = layout.extent
    pad = max((x1 - x0) * 0.01, 1e-3)
    full_detail = len(layout) <= detail_limit
    if full_detail:
        b = _every_span(layout)
    else:
        b = blocks(layout, x0 - pad, x1 + pad, px)
    data, lookup, flows_all_data = span_columns(trace, layout, b)
    source = ColumnDataSource(data, name="spans")
    names = ColumnDataSource(lookup, name="lookup")
    flows_all = ColumnDataSource(flows_all_data, name="flows_all")
    flows = ColumnDataSource(_empty_flows(), name="flows")

    fig_h = height or int(min(720, max(260, 60 + 22 * layout.height)))
    x_range = Range1d(x0 - pad, x1 + pad, bounds=(x0 - 20 * pad, x1 + 20 * pad))
    y_range = Range1d(layout.height + 0.3, -0.3)  # row 0 at the top
    wheel = WheelZoomTool(dimensions="width")
    tap = CustomJS(args={"source": source, "flows": flows, "flows_all": flows_all}, code=_TAP_JS)
    hover = _hover(source, names)
    p = figure(
        title=title or f"opprof timeline: {trace.n_spans:,} spans on {len(trace.threads)} threads",
        width=width,
        height=fig_h,
        x_range=x_range,
        y_range=y_range,
        tools=[PanTool(dimensions="width"), wheel, BoxZoomTool(), ResetTool(), TapTool(callback=tap), hover, SaveTool()],
        active_scroll=wheel,
        output_backend=backend,
        x_axis_label="time since trace start",
        toolbar_location="above",
    )
    p.xaxis.formatter = CustomJSTickFormatter(code=_TICK_JS)
    _style_lanes(p, layout, fig_h, (x0 - 20 * pad, x1 + 20 * pad))
    mapper = LinearColorMapper(palette=PALETTE, low=-0.5, high=len(PALETTE) - 0.5)
    color = {"field": "c", "transform": mapper}
    line_mapper = LinearColorMapper(palette=LINE_PALETTE, low=-0.5, high=len(PALETTE) - 0.5)
    r = p.quad(
        left="left", right="right", top="top", bottom="bottom", source=source,
        fill_color=color, line_color={"field": "c", "transform": line_mapper}, line_alpha=0.9,
        selection_line_color="black", selection_line_width=1.5,
        nonselection_fill_alpha=0.25, nonselection_line_alpha=0.25,
    )  # fmt: skip
    hover.renderers = [r]
    p.segment(x0="x0", y0="y0", x1="x1", y1="y1", source=flows, line_color="black", line_width=1.5, line_dash="dashed")
    _legend(p)
    # The overview shows the whole trace coarsely: the first view's blocks when it is merged
    # already (bounded by the pixels; one pass over 10M spans saved), else its own.
    overview = _overview(layout, x_range, width, backend, pad, None if full_detail else b)

    table_source, table = _stats_table(trace)
    table_source.selected.js_on_change(
        "indices", CustomJS(args={"table": table_source, "names": names, "source": source, "flows": flows}, code=_TABLE_JS)
    )
    bars = _split_bars(trace, width)
    n_merged = int(b.counts[b.counts > 1].sum())
    note_text = _note_text(len(layout), len(b), n_merged, layout.collapsed_threads, max_lanes)
    note = Div(text=note_text, render_as_text=True, width=width)
    table_title = Div(text=table.name, render_as_text=True)
    root = column(note, p, overview, bars, table_title, table)
    return Timeline(
        trace=trace, layout=layout, root=root, figure=p, overview=overview, source=source, names=names,
        flows=flows, flows_all=flows_all, table=table, table_source=table_source, bars=bars, note=note,
        tap_callback=tap, pixels=px, full_detail=full_detail, merged=n_merged, window=(x0 - pad, x1 + pad),
    )  # fmt: skip


def _legend(p: Any) -> None:
    """Fixed legend entries: one off-data renderer per role (a NaN point draws nothing but its swatch)."""
    items = []
    nan = [float("nan")]
    for role, fill in [*((r, ROLE_COLORS[r]) for r in ROLE_NAMES), ("merged", "#cccccc")]:
        dummy = p.quad(left=nan, right=nan, top=nan, bottom=nan, fill_color=fill, line_color=fill)
        items.append(LegendItem(label=ROLE_LABELS.get(role, "pale: merged spans"), renderers=[dummy]))
    p.add_layout(Legend(items=items, click_policy="none", label_text_font_size="9pt"), "right")


def _overview(layout: Layout, x_range: Any, width: int, backend: str, pad: float, ob: Blocks | None = None) -> Any:
    """The whole trace, coarse and fixed, with a range tool driving the main figure's ``x_range``."""
    x0, x1 = layout.extent
    if ob is None:
        ob = blocks(layout, x0 - pad, x1 + pad, width)
    overview = figure(
        width=width, height=90, x_range=Range1d(x0 - pad, x1 + pad), y_range=Range1d(layout.height + 0.3, -0.3),
        tools="", toolbar_location=None, output_backend=backend,
    )  # fmt: skip
    overview.quad(
        left=layout.left[ob.items], right=ob.right, top=layout.top[ob.items], bottom=layout.bottom[ob.items],
        fill_color=[PALETTE[c] for c in layout.role[ob.items].tolist()], line_color=None,
    )  # fmt: skip
    overview.xaxis.formatter = CustomJSTickFormatter(code=_TICK_JS)
    overview.yaxis.visible = False
    overview.grid.grid_line_color = None
    rt = RangeTool(x_range=x_range)
    rt.overlay.fill_color = "navy"
    rt.overlay.fill_alpha = 0.15
    overview.add_tools(rt)
    return overview


def _every_span(layout: Layout, mask: np.ndarray | None = None) -> Blocks:
    """Every (unmasked) span as its own rectangle, in row then time order."""
    idx = np.arange(len(layout)) if mask is None else np.nonzero(mask)[0]
    idx = idx[np.lexsort((layout.left[idx], layout.row[idx]))]
    return Blocks(idx, np.ones(len(idx), dtype=np.int64), layout.right[idx], layout.right[idx] - layout.left[idx])


def _note_text(n_items: int, n_drawn: int, n_merged: int, collapsed: int = 0, max_lanes: int = MAX_LANES) -> str:
    base = "Scroll to zoom in time, drag to pan, click a span to highlight its custom-op invocation."
    parts = []
    if collapsed:
        parts.append(
            f"{collapsed:,} threads share the lane '{collapsed:,} more threads (collapsed)' at the bottom, their spans "
            f"overlaid by nesting depth: only the {max_lanes - 1} busiest threads have lanes of their own "
            f"(build_timeline(..., max_lanes=N) to change)."
        )
    if n_merged:
        parts.append(
            f"{n_merged:,} of {n_items:,} span rectangles are merged ({n_drawn:,} drawn; a custom-op child is drawn on "
            f"its thread and in the band): spans narrower than a pixel are shown as pale counted blocks — zoom in "
            f"the notebook widget (opprof.timeline) to see each span."
        )
    return " ".join([*parts, base])


def save_html(trace: Trace, path: str, *, title: str = "opprof timeline", **options: Any) -> Timeline:
    """Write the timeline of ``trace`` as one standalone HTML file with BokehJS inline (opens offline)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    tl = build_timeline(trace, **options)
    html = file_html(tl.root, INLINE, title=title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return tl
