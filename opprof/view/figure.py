"""Trace -> Bokeh timeline: a pure function of the trace, shared by the widget and saved HTML.

:func:`build_timeline` reads only a :class:`~opprof.trace.Trace` (through :mod:`.layout`),
so an imported trace draws exactly like one of ours, and returns the Bokeh objects by name so the
widget can drive them and tests can inspect them without a browser (as dask's
``profile_visualize`` does). :func:`save_html` writes one standalone file with BokehJS inline.
This module is the Bokeh half: models, glyphs, colours, hover tools, legend, toggles and the
JavaScript that runs in the browser. What they show is made without Bokeh, in :mod:`.layout`
(where each span goes, level of detail) and :mod:`.columns` (the columns drawn, hover texts,
names on the bars, the critical path's rectangles).

What keeps it fast at a million spans: rectangles, not spans, are drawn. :func:`.layout.blocks`
merges spans narrower than a pixel per row into counted blocks (:func:`.layout.runs` draws a
stretch of alike blocks as one), and the columns sent to the browser are numeric (names and hover
text go through small lookup tables, :func:`.columns.span_columns`), so size and draw time grow
with the screen, not the trace. What keeps it honest: a block is shaded by how busy its pixels are
(``busy_fraction`` sets its alpha), so a row busy 1 % of the time reads faint, not solid; zoomed
in, bars wide enough carry their names (:func:`.columns.label_columns`, laid out again in the
browser as the view moves).

What it shows beyond the spans: why custom ops wait (:mod:`opprof.trace.analysis.causes`: the split bars
break each op type's waiting into its causes, and a parent's hover gives its own with the op that
blocked it longest; a sub-op's or wait's hover the user's line that pushed it) and the critical
path (:mod:`opprof.trace.analysis.critical`: computed once per figure, outlined with its hops between
lanes behind a toggle that works in the browser alone). The analyses are read once into an
the trace's :meth:`~opprof.trace.Trace.analysis` and every hover text is made only for the rectangles actually drawn.

Where the trace holds the GIL's thread states (:mod:`opprof.trace.threadstates`), a thin strip
under each thread's lane says, in colour, whether the thread held the GIL, waited for it, was
blocked, ran without it or waited for a CPU (:func:`.columns.state_columns`: merged per pixel like
the spans); hovering a wait names the thread that held the GIL and what it ran.

What keeps it safe: a trace's names and args are data. Tooltips use plain ``@field`` placeholders
(Bokeh escapes them; ``{safe}`` is never used), axis labels and table cells are drawn as text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from bokeh.layouts import column, row
from bokeh.models import (
    Arrow,
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
    LinearInterpolator,
    NumberFormatter,
    PanTool,
    Range1d,
    RangeTool,
    ResetTool,
    SaveTool,
    StringFormatter,
    TableColumn,
    TapTool,
    Toggle,
    VeeHead,
    WheelZoomTool,
)
from bokeh.plotting import figure

from ..trace import Analysis, Trace
from ..trace.analysis.causes import has_edges
from ..trace.analysis.critical import CriticalPath
from ..trace.analysis.gil import PYTHON_GIL_PARTS
from ..trace.analysis.memory import live_from_counters
from ..trace.analysis.stats import stat_columns
from ..trace.formats.atomic import written
from ..trace.text import fmt_bytes, fmt_us
from ..trace.threadstates import STATE_LABELS, STATES, ThreadState
from .columns import (
    BUSY_ALPHA,
    LABEL_CHAR_PX,
    LABEL_FONT_SIZE,
    LABEL_LIMIT,
    LABEL_MIN_CHARS,
    LABEL_MIN_ROW_PX,
    LABEL_PAD_PX,
    PATH_LIMIT,
    PathIndex,
    StateIndex,
    busy_alpha,
    drawn_blocks,
    empty_flows,
    empty_path,
    every_span,
    label_columns,
    op_type_splits,
    path_columns,
    path_index,
    span_columns,
    state_columns,
    state_index,
)
from .layout import (
    LANE_GAP,
    MAX_LANES,
    ROLE_NAMES,
    ROW_HEIGHT,
    Blocks,
    LaneKind,
    Layout,
    build_layout,
    busy_fraction,
    process_starts,
)

__all__ = [
    "CAUSE_COLORS",
    "CAUSE_LABELS",
    "PATH_COLOR",
    "PATH_LIMIT",
    "ROLE_COLORS",
    "ROLE_LABELS",
    "STATE_COLORS",
    "Timeline",
    "build_timeline",
    "busy_alpha",
    "label_columns",
    "op_type_splits",
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
    "gc": "garbage collection",
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
    "gc": "#9c755f",  # brown: nobody's op, the interpreter's own pause
}
#: Colour index column ``c``: role code for a span, role code + len(ROLE_NAMES) for a block of
#: merged spans. A block has its role's colour too: its paleness is its alpha, which says how busy its pixels are.
PALETTE = [ROLE_COLORS[r] for r in ROLE_NAMES] * 2
#: Outlines: the same as the fill, except a parent's, so adjacent invocations stay apart; none for
#: a merged block. Blocks are a third of a screen pixel wide (merged at twice the figure's width,
#: for HiDPI screens, over a frame ~0.7 of it): a 1-pixel outline on each would overlap ~4 of them
#: a pixel and compound their alpha, 1 - 0.86**4 * 0.84 = 0.54 for blocks shaded 0.16 (1 % busy).
LINE_PALETTE = [("#a07d1c" if r == "parent" else ROLE_COLORS[r]) for r in ROLE_NAMES] + ["#00000000"] * len(ROLE_NAMES)
DETAIL_LIMIT = 100_000  # draw every span (no merging) up to this many rectangles
#: The frame (plot area) is the figure less its legend (~160 px at 9pt) and its lane labels (~7 px
#: a character and ~45 px of ticks): at width 1000 Chromium gave 697 px with 15-character lane
#: labels, 765 px with 9 (estimated 680 and 722), and the height less 79 px (title, toolbar, axis).
#: The estimate only places the first labels: the browser lays them out again with the real size.
FRAME_LEGEND_PX = 170
FRAME_AXIS_PX = 45
FRAME_TOP_BOTTOM_PX = 80


def _text_color(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill`` (WCAG 2 relative luminance)."""
    lin = [
        c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (int(fill[k : k + 2], 16) / 255 for k in (1, 3, 5))
    ]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


#: Label colour per colour index ``c`` (black on all but Dummy_Wait's #333333).
TEXT_PALETTE = [_text_color(c) for c in PALETTE]

#: The colour of a thread waiting for a CPU (the GIL strip's, :data:`STATE_COLORS`).
STATE_COLORS_RUNNABLE = "#f4a261"
#: The parts of a custom op's wall time in the split bars, in stacking order: (column, legend
#: label, colour). Python is split by its thread's CPU time where that was measured; waiting by
#: cause (:mod:`opprof.trace.analysis.causes`). Greens are Python, purple sub-ops, warm colours waiting.
PYTHON_PARTS = (
    ("py_on_cpu", "python on CPU", "#3f8f3a"),
    ("py_off_cpu", "python off CPU (GIL, sleep, I/O)", "#a6d99b"),
    ("py_cpu_unknown", "python (CPU not measured)", ROLE_COLORS["python"]),
)
#: Where the GIL was sampled, the Python off a CPU split by what its thread did meanwhile (the
#: why-text's split, :data:`~opprof.trace.analysis.gil.PYTHON_GIL_PARTS`): these replace the one
#: "off CPU (GIL, sleep, I/O)" part, in proportion to the sampled states (a Python too short for a
#: sample keeps its off-CPU time as "not sampled").
PYTHON_OFF_CPU_PARTS = (
    ("py_off_gil", "python waiting for the GIL", "#d6604d"),
    ("py_off_blocked", "python blocked (sleep, I/O, a lock)", "#b8c9a8"),
    ("py_off_cpu_wait", "python waiting for a CPU", STATE_COLORS_RUNNABLE),
    ("py_off_unsampled", "python off CPU, not sampled (GIL, sleep or I/O)", "#a6d99b"),
)
SUBOP_PART = ("sub-ops", "sub-ops", ROLE_COLORS["subop"])
#: Legend text and colour of each cause of waiting.
CAUSE_LABELS = {
    "custom_pool": "waiting: custom-op thread",
    "subop_queue": "waiting: sub-op queued",
    "dependency": "waiting: dependency",
    "completion": "waiting: completion",
    "unattributed": "waiting: unattributed (no edges)",
    # Where the GIL was sampled (causes.QUEUE_PARTS): the queues split; their own keys keep "all busy".
    "custom_pool_wake": "waiting: waking a custom-op thread",
    "custom_pool_gil": "waiting: custom-op thread wants the GIL",
    "subop_queue_wake": "waiting: waking an engine worker",
    "subop_queue_gil": "waiting: engine worker wants the GIL",
}
CAUSE_COLORS = {
    "custom_pool": "#f28e2b",
    "subop_queue": "#ffbe7d",
    "dependency": ROLE_COLORS["wait"],
    "completion": "#9c755f",
    "unattributed": "#f0abac",
    # The GIL in one hue (deep red), the hand-offs in another (sand), each pool a shade of it.
    "custom_pool_gil": "#8b1e3f",
    "subop_queue_gil": "#c2185b",
    "custom_pool_wake": "#d4a373",
    "subop_queue_wake": "#e9c46a",
}
#: The GIL strip's colour per thread state: holding it in the python green's darker shade, waiting
#: for it in the split bars' "wants the GIL" red, blocked a pale grey (idle), running without it a
#: dark slate (busy, no GIL), waiting for a CPU orange.
STATE_COLORS = {
    ThreadState.HELD: "#2a9d8f",
    ThreadState.WAIT: CAUSE_COLORS["custom_pool_gil"],
    ThreadState.BLOCKED: "#c9c9c9",
    ThreadState.RUNNING: "#264653",
    ThreadState.RUNNABLE: STATE_COLORS_RUNNABLE,
    # Holding the GIL with no CPU: the holder's teal turned towards the CPU wait's orange.
    ThreadState.HELD_OFF_CPU: "#a8a060",
}
#: The strip's palette, by column ``c`` (a state's index in STATES).
STATE_PALETTE = [STATE_COLORS[s] for s in STATES]

#: The critical path's highlight and its hops between lanes: a colour no role uses.
PATH_COLOR = "#e6007e"

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
    labels: ColumnDataSource  # names on the bars (see :func:`label_columns`)
    table: DataTable
    table_source: ColumnDataSource
    bars: Any
    note: Div
    tap_callback: CustomJS
    pixels: int
    full_detail: bool = False  # every span drawn as itself: the view never needs refining
    merged: int = 0  # spans folded into blocks in the current view
    window: tuple[float, float] = (0.0, 0.0)  # x range the current data was computed for
    view: tuple[float, float] = (0.0, 0.0)  # the view it was computed for (the window, or its middle half)
    frame_px: tuple[float, float] = (800.0, 300.0)  # the plot area's estimated (width, height) for the labels
    #: What the hover and the bars read (waiting causes, blockers, sites), computed once.
    analysis: Analysis | None = None
    #: The critical path (None: not computed, ``build_timeline(..., critical_path=False)``).
    path: CriticalPath | None = None
    path_source: ColumnDataSource | None = None  # outlined path rectangles (``span``: trace span index)
    path_edges: ColumnDataSource | None = None  # hops of the path between lanes
    path_toggle: Toggle | None = None
    path_summary: Div | None = None  # the line beside the toggle
    path_renderers: list[Any] = field(default_factory=list)  # what the toggle shows and hides
    path_drawn: int = 0  # path rectangles drawn in the current view
    path_total: int = 0  # path rectangles (every copy of every span on the path)
    _path_index: PathIndex | None = field(default=None, repr=False)
    #: The GIL strip (None: the trace holds no thread states): its rectangles and hover lookup.
    state_source: ColumnDataSource | None = None
    state_lookup: ColumnDataSource | None = None
    states_full: bool = True  # every run drawn as itself: the strip never needs refining
    _state_index: StateIndex | None = field(default=None, repr=False)
    #: The memory lane under the figure (None: no memory recorded), on the figure's time axis.
    memory_figure: Any = None

    def set_path(self, path: CriticalPath) -> None:
        """Draw ``path`` into the path layer made empty by ``build_timeline(..., critical_path="lazy")``
        (the widget computes it when its toggle is first switched on)."""
        if self.path_source is None or self.path_edges is None:
            raise ValueError("this timeline has no critical-path layer (built with critical_path=False)")
        pi = path_index(path, self.layout)
        self.path, self._path_index = path, pi
        lo, hi = self.window
        limit = len(self.layout) if self.full_detail else PATH_LIMIT
        rects, edges = path_columns(pi, self.layout, lo, hi, None, limit)
        self.path_source.data = rects
        self.path_edges.data = edges
        self.path_drawn, self.path_total = len(rects["span"]), len(pi.items)
        if self.path_summary is not None:
            self.path_summary.text = _path_summary(path, pi)
        if self.path_toggle is not None:
            self.path_toggle.label = _path_label(path.approximate)
            if not self.path_toggle.active:  # drawn with the figure: nothing to show, nothing to press
                self.path_toggle.disabled = not len(pi.items)
        self.note.text = f"{self.note.text} {_path_note(path, self.path_drawn, self.path_total)}"

    def refresh(self, x0: float, x1: float, mask: np.ndarray | None = None) -> None:
        """Recompute what is drawn for the x range ``[x0, x1]`` (level of detail, names on the bars) and push it."""
        w = x1 - x0
        lo, hi = x0 - w / 2, x1 + w / 2  # pan half a screen either way before refining again
        b = every_span(self.layout, mask) if self.full_detail else drawn_blocks(self.layout, lo, hi, self.pixels * 2, mask)
        data, names, flows_all = span_columns(self.trace, self.layout, b, self.analysis)
        self.names.data = names
        self.source.data = data
        self.flows_all.data = flows_all
        self.flows.data = empty_flows()
        self.source.selected.indices = []
        self.merged = int(b.counts[b.counts > 1].sum())
        self.window = (lo, hi)
        self.view = (x0, x1)
        rows = abs(float(self.figure.y_range.start) - float(self.figure.y_range.end))
        self.labels.data = label_columns(data, names["name"], x0, x1, self.frame_px, rows, limit=LABEL_LIMIT)
        if self.state_source is not None and self.state_lookup is not None and self._state_index is not None:
            lanes = None if mask is None else np.unique(self.layout.lane[mask])
            data, lookup = state_columns(
                self.trace, self.layout, self._state_index, lo, hi, None if self.states_full else self.pixels * 2, lanes
            )
            self.state_lookup.data = lookup
            self.state_source.data = data
        if self.path_source is not None and self.path_edges is not None and self._path_index is not None:
            limit = len(self.layout) if self.full_detail else PATH_LIMIT  # full detail: never refined, so all of it
            rects, edges = path_columns(self._path_index, self.layout, lo, hi, mask, limit)
            self.path_source.data = rects
            self.path_edges.data = edges
            self.path_drawn = len(rects["span"])


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
// A merged block: how many spans and how busy its pixels are ("1,234 spans merged, 3% busy").
const i = special_vars.index, n = source.data.count[i], text = names.data.name[value];
if (n <= 1) return text;
const pct = 100 * source.data.busy_fraction[i];
const busy = pct >= 1 ? Math.round(pct) : Number(pct.toPrecision(1));  // 3, 0.4, 0.05
return n.toLocaleString("en-US") + " spans merged, " + busy + "% busy (zoom in); first: " + text;
"""

_LABELS_JS = """
// Names on the bars, laid out again in the browser whenever the view moves or new spans arrive
// (a saved file has no kernel, and a widget at full detail never refines): label_columns' rule in
// Python, with the frame's real size. The label source is changed in place and told to redraw,
// so a widget sends nothing back to the kernel on each frame of a pan.
const w = fig.inner_width, h = fig.inner_height;
if (!(w > 0) || !(h > 0)) return;  // not laid out yet: keep the labels computed in Python
const d = source.data, names = lookup.data.name, x0 = fig.x_range.start, x1 = fig.x_range.end;
const rows = Math.abs(fig.y_range.end - fig.y_range.start);
const out = {x: [], y: [], text: [], c: [], i: []};
if (x1 > x0 && h / Math.max(rows, 1e-9) >= min_row_px) {
  const k = w / (x1 - x0), cand = [];
  for (let i = 0; i < d.left.length; i++) {
    if (d.count[i] != 1) continue;
    const a = Math.max(d.left[i], x0), room = (Math.min(d.right[i], x1) - a) * k - 2 * pad;
    if (room < char_px) continue;
    const len = names[d.name[i]].length, fits = Math.floor(room / char_px);
    if (len > 0 && (fits >= len || fits >= min_chars + 1)) cand.push([room, i, a, fits]);
  }
  if (cand.length > limit) {  // the widest, then back in order
    cand.sort((p, q) => q[0] - p[0] || p[1] - q[1]);
    cand.length = limit;
    cand.sort((p, q) => p[1] - q[1]);
  }
  for (const [, i, a, fits] of cand) {
    const name = names[d.name[i]];
    out.x.push(a);
    out.y.push((d.top[i] + Math.min(d.bottom[i], d.top[i] + row_h)) / 2);
    out.text.push(fits >= name.length ? name : name.slice(0, fits - 1) + "\u2026");
    out.c.push(d.c[i]);
    out.i.push(i);
  }
}
Object.assign(labels.data, out);
labels.change.emit();
"""


def _hover(source: ColumnDataSource, names: ColumnDataSource) -> HoverTool:
    thread = CustomJSHover(args={"names": names}, code="return value < 0 ? '' : names.data.thread[value];")
    text = CustomJSHover(args={"names": names}, code="return value < 0 ? '' : names.data.detail[value];")
    return HoverTool(
        tooltips=[
            ("name", "@name{custom}"),
            ("thread", "@thread{custom}"),
            ("start", "@left{custom}"),
            ("duration", "@dur{custom}"),
            ("spans", "@count"),
            ("detail", "@detail{custom}"),
            ("waiting by cause", "@why{custom}"),
            ("blocked by", "@blocker{custom}"),
        ],
        formatters={
            "@name": CustomJSHover(args={"names": names, "source": source}, code=_NAME_HOVER_JS),
            "@thread": thread,
            "@detail": text,
            "@why": text,
            "@blocker": text,
            "@left": CustomJSHover(code=_FMT_US_JS + "return fmt(value);"),
            "@dur": CustomJSHover(code=_FMT_US_JS + "return fmt(value);"),
        },
        renderers=[],
    )


#: Lane labels at least this many pixels apart (others are left unlabelled, not overprinted).
LABEL_SPACING_PX = 14


def _style_lanes(p: Any, layout: Layout, height_px: int, x_bounds: tuple[float, float]) -> None:
    """Lane labels on the y axis (drawn as canvas text), alternate lane shading, and in a trace of
    several processes a faint line between one process's lanes and the next's.

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
    starts = process_starts(layout)
    if starts:
        ys = [lanes[k].top - LANE_GAP / 2 for k in starts]
        p.segment(
            x0=x_bounds[0], x1=x_bounds[1], y0=ys, y1=ys, line_color="#888888", line_alpha=0.5, line_width=1,
            level="underlay", name="process_separators",
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


#: The queued causes' labels on a trace of the naive engine, which waits for no thread (its
#: own bookkeeping, inline: :attr:`~opprof.trace.data.TraceData.ran_inline`).
INLINE_CAUSE_LABELS = {
    "custom_pool": "waiting: the naive engine's bookkeeping before the Python",
    "subop_queue": "waiting: the naive engine's bookkeeping before a sub-op",
}


def _bar_parts(keys: tuple[str, ...], gil: bool = False, inline: bool = False) -> list[tuple[str, str, str]]:
    """(column, label, colour) of every part, in stacking order (``gil``: the Python off a CPU split
    by the GIL's evidence; ``inline``: a naive engine's trace)."""
    labels = {**CAUSE_LABELS, **INLINE_CAUSE_LABELS} if inline else CAUSE_LABELS
    causes = [(k, labels.get(k, f"waiting: {k}"), CAUSE_COLORS.get(k, ROLE_COLORS["wait"])) for k in keys]
    python = [PYTHON_PARTS[0], *PYTHON_OFF_CPU_PARTS, PYTHON_PARTS[2]] if gil else list(PYTHON_PARTS)
    return [*python, SUBOP_PART, *causes]


def _off_cpu_by_gil(a: Analysis, names: list[str], off_cpu: np.ndarray) -> dict[str, np.ndarray] | None:
    """Each type's Python off a CPU (ns), split as :data:`PYTHON_OFF_CPU_PARTS` in proportion to its
    sampled GIL wait, blocked and CPU wait (the rest, and all of it where none was sampled, "not
    sampled"); None without the GIL's evidence. The parts sum to ``off_cpu`` exactly."""
    by_type = a.python_gil_by_type
    if not by_type:
        return None
    k = PYTHON_GIL_PARTS.index
    seen = np.array(
        [by_type[n][0][[k("GIL wait"), k("blocked"), k("CPU wait")]] if n in by_type else np.zeros(3, np.int64) for n in names],
        dtype=np.float64,
    ).reshape(-1, 3)
    total = seen.sum(axis=1)
    share = np.divide(seen, total[:, None], out=np.zeros_like(seen), where=total[:, None] > 0)
    parts = np.floor(share * off_cpu[:, None])
    cols = [c for c, _, _ in PYTHON_OFF_CPU_PARTS]
    out = {c: parts[:, j] for j, c in enumerate(cols[:3])}
    out[cols[3]] = off_cpu - parts.sum(axis=1)
    return out


def _split_bars(a: Analysis, width: int, limit: int = 30) -> Any:
    """A stacked bar per custom-op type: where its wall time went (ms), the waiting by cause and
    the Python on and off CPU, with a legend; hovering a part says its ms and share of the wall."""
    ot = a.op_types
    parts_ns = ot.parts()
    kinds = ot.names[:limit]
    top = slice(0, len(kinds))
    wall = ot.wall[top] / 1e6
    off_by_gil = _off_cpu_by_gil(a, list(kinds), parts_ns["py_off_cpu"][top].astype(np.float64))
    if off_by_gil is not None:
        parts_ns = {**parts_ns, **off_by_gil}
    parts = _bar_parts(ot.causes, gil=off_by_gil is not None, inline=a.data.ran_inline)
    data: dict[str, Any] = {"op": kinds, "calls": ot.calls[top], "wall": wall, "py_off_cpu": parts_ns["py_off_cpu"][top] / 1e6}
    for col, _, _ in parts:
        v = parts_ns[col][: len(kinds)] / 1e6
        data[col] = v
        data[f"{col}_pct"] = 100 * v / np.maximum(wall, 1e-12)
    # The three totals of the split (what op_type_splits sums), for the eye and for tests.
    zero = np.zeros(len(kinds))
    data["python"] = sum((data[c] for c, _, _ in parts if c.startswith("py_")), zero)
    data["waiting"] = sum((data[k] for k in ot.causes), zero)
    src = ColumnDataSource(data, name="split_bars")
    p = figure(
        y_range=list(reversed(kinds)) or ["(no custom ops)"],
        width=width,
        height=max(200, 110 + 26 * len(kinds)),
        title="custom ops: where the wall time went (python on/off CPU, sub-ops, waiting by cause)",
        x_axis_label="total ms",
        tools="save",
        toolbar_location="right",
    )
    # The parts that hold any time (a trace without custom ops: every part, empty, for the legend).
    shown = [pt for pt in parts if len(kinds) and float(np.sum(data[pt[0]])) > 0] or parts
    if shown:
        rs = p.hbar_stack(
            [c for c, _, _ in shown], y="op", height=0.7, color=[c for _, _, c in shown], source=src, line_color=None
        )
        for r, (col, label, _) in zip(rs, shown, strict=True):
            r.nonselection_glyph = r.muted_glyph = None  # nothing selects or mutes a bar: two models fewer each
            p.add_tools(
                HoverTool(
                    renderers=[r],
                    tooltips=[
                        ("op", "@op"),
                        ("calls", "@calls{0,0}"),
                        (label, f"@{{{col}}}{{0,0.000}} ms (@{{{col}_pct}}{{0.0}}% of the wall time)"),
                        ("python", "@python{0,0.000} ms"),
                        ("sub-ops", "@{sub-ops}{0,0.000} ms"),
                        ("waiting", "@waiting{0,0.000} ms"),
                        ("wall", "@wall{0,0.000} ms"),
                    ],
                )
            )
        items = [LegendItem(label=label, renderers=[r]) for r, (_, label, _) in zip(rs, shown, strict=True)]
        legend = Legend(items=items, orientation="horizontal", label_text_font_size="9pt")
        if len(items) > 4:
            legend.nrows = 2
        p.add_layout(legend, "below")
    p.ygrid.grid_line_color = None
    return p


_LAZY_PATH_TEXT = "computed when first shown (about 1 s per million spans)"

_PATH_TOGGLE_JS = """
// Show or hide the critical path's outlines and hops: in the browser, no kernel round trip.
for (const r of renderers) { r.visible = cb_obj.active; }
"""


def _path_summary(path: CriticalPath, pi: PathIndex) -> str:
    """``9.75 ms end to end in 275 segments: queue 42% · custom_pool 31% · run 10% ...``"""
    if not pi.n_segments:
        return f"no critical path: {path.note}"
    total = path.total or 1
    kinds = " · ".join(f"{k} {100 * v / total:.0f}%" for k, v in list(pi.by_kind.items())[:6])
    return f"{fmt_us(path.total / 1e3)} end to end in {pi.n_segments:,} segments: {kinds}"


def _path_label(approximate: bool) -> str:
    return "critical path (approximate)" if approximate else "critical path"


def _path_layer(p: Any, approximate: bool = False) -> tuple[ColumnDataSource, ColumnDataSource, list[Any], Toggle, Div]:
    """The path's layer on ``p``, empty and hidden: outlines, hops between lanes, the toggle that
    shows them and its summary, for :meth:`Timeline.set_path` to fill (at once, or on the toggle's
    first use)."""
    rects, edges = empty_path()
    path_source = ColumnDataSource(rects, name="critical_path")
    path_edges = ColumnDataSource(edges, name="critical_path_edges")
    outline = p.quad(
        left="left", right="right", top="top", bottom="bottom", source=path_source, name="critical_path_outline",
        fill_color=PATH_COLOR, fill_alpha=0.06, line_color=PATH_COLOR, line_width=2.5, visible=False,
    )  # fmt: skip
    hops = Arrow(
        source=path_edges, x_start="x0", y_start="y0", x_end="x1", y_end="y1", name="critical_path_hops",
        line_color=PATH_COLOR, line_width=2, end=VeeHead(size=8, fill_color=PATH_COLOR, line_color=PATH_COLOR),
        visible=False,
    )  # fmt: skip
    p.add_layout(hops)
    renderers = [outline, hops]
    toggle = Toggle(label=_path_label(approximate), active=False, width=230, name="critical_path_toggle")
    toggle.js_on_change("active", CustomJS(args={"renderers": renderers}, code=_PATH_TOGGLE_JS))
    summary = Div(text=_LAZY_PATH_TEXT, render_as_text=True, name="critical_path_summary")
    return path_source, path_edges, renderers, toggle, summary


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
    critical_path: bool | CriticalPath | str = True,
) -> Timeline:
    """The timeline of ``trace``: main figure, overview strip, stats table, split bars, note.

    Up to ``detail_limit`` rectangles, every span is drawn as itself; beyond, spans narrower than a
    pixel (at ``pixels``, default ``width``) are merged into counted blocks.
    ``backend="webgl"`` draws with WebGL (faster pan on huge views in a real GPU browser; canvas
    is the default because software GL in headless browsers is slower and logs warnings).
    Past ``max_lanes`` threads, the busiest ``max_lanes - 1`` keep lanes and the rest share one
    collapsed lane; the note above the figure says so.

    The split bars break each custom op's waiting into its causes, and a parent's hover names its
    waiting by cause and the op that blocked it longest. The **critical path** is computed once
    here (``critical_path=False`` skips it; a :class:`~opprof.trace.analysis.critical.CriticalPath` already
    computed is used as is): its spans are outlined and its hops between lanes drawn as arrows,
    hidden until the "critical path" toggle above the figure shows them (in the browser, no kernel
    round trip). Where spans are merged, at most :data:`PATH_LIMIT` of its rectangles are drawn (the
    widest in view; the widget redraws them on zoom), else all of them. ``critical_path="lazy"``
    makes the layer and toggle empty, for :meth:`Timeline.set_path` later: the widget's choice,
    because the path costs up to half of the time to the first paint (1.0 of 1.9 s at 1M spans).
    """
    lazy = critical_path == "lazy"
    if isinstance(critical_path, str) and not lazy:
        raise ValueError(f"critical_path must be True, False, 'lazy' or a CriticalPath, got {critical_path!r}")
    layout = build_layout(trace, max_lanes)
    analysis = trace.analysis()
    # One merged block per CSS pixel column (was two, for HiDPI screens): BokehJS paints ~5 us per
    # rectangle in headless Chromium here, so halving them halves a refinement's paint (~150 ms
    # for 25k) and its transfer; on a HiDPI screen a block is then two device pixels wide.
    px = pixels or width
    x0, x1 = layout.extent
    pad = max((x1 - x0) * 0.01, 1e-3)
    full_detail = len(layout) <= detail_limit
    if full_detail:
        b = every_span(layout)
    else:
        b = drawn_blocks(layout, x0 - pad, x1 + pad, px)
    data, lookup, flows_all_data = span_columns(trace, layout, b, analysis)
    source = ColumnDataSource(data, name="spans")
    names = ColumnDataSource(lookup, name="lookup")
    flows_all = ColumnDataSource(flows_all_data, name="flows_all")
    flows = ColumnDataSource(empty_flows(), name="flows")

    si = state_index(trace, layout)
    # The legend's 13 entries with the GIL strip's need ~300 px (8 without: the 260 px floor holds them).
    fig_h = height or int(min(720, max(260 if si is None else 340, 60 + 22 * layout.height)))
    x_range = Range1d(x0 - pad, x1 + pad, bounds=(x0 - 20 * pad, x1 + 20 * pad))
    y_range = Range1d(layout.height + 0.3, -0.3)  # row 0 at the top
    wheel = WheelZoomTool(dimensions="width")
    tap = CustomJS(args={"source": source, "flows": flows, "flows_all": flows_all}, code=_TAP_JS)
    tap_tool = TapTool(callback=tap)
    hover = _hover(source, names)
    p = figure(
        title=title or f"opprof timeline: {trace.n_spans:,} spans on {len(trace.threads)} threads",
        width=width,
        height=fig_h,
        x_range=x_range,
        y_range=y_range,
        tools=[PanTool(dimensions="width"), wheel, BoxZoomTool(), ResetTool(), tap_tool, hover, SaveTool()],
        active_scroll=wheel,
        output_backend=backend,
        x_axis_label="time since trace start",
        toolbar_location="above",
        # BokehJS reports a wheel zoom's range (RangesUpdate, the refinement's trigger) only once the
        # gesture has been still for lod_timeout: 500 ms by default, the whole latency budget twice
        # over. 60 ms is past the ~16-40 ms between a wheel's ticks, so a scroll still asks once.
        lod_timeout=60,
    )
    p.xaxis.formatter = CustomJSTickFormatter(code=_TICK_JS)
    _style_lanes(p, layout, fig_h, (x0 - 20 * pad, x1 + 20 * pad))
    mapper = LinearColorMapper(palette=PALETTE, low=-0.5, high=len(PALETTE) - 0.5)
    color = {"field": "c", "transform": mapper}
    line_mapper = LinearColorMapper(palette=LINE_PALETTE, low=-0.5, high=len(PALETTE) - 0.5)
    fill_alpha = LinearInterpolator(x=[0.0, 1.0], y=list(BUSY_ALPHA))
    r = p.quad(
        left="left", right="right", top="top", bottom="bottom", source=source,
        fill_color=color, line_color={"field": "c", "transform": line_mapper}, line_alpha=0.9,
        fill_alpha={"field": "busy_fraction", "transform": fill_alpha},
        selection_line_color="black", selection_line_width=1.5,
        nonselection_fill_alpha=0.25, nonselection_line_alpha=0.25,
    )  # fmt: skip
    hover.renderers = [r]
    tap_tool.renderers = [r]  # a tap selects spans, never the path's outlines
    frame_px = _frame_estimate(layout, width, fig_h)
    first = label_columns(data, lookup["name"], x0 - pad, x1 + pad, frame_px, layout.height + 0.6, limit=LABEL_LIMIT)
    labels = _label_layer(p, source, names, first)
    p.segment(x0="x0", y0="y0", x1="x1", y1="y1", source=flows, line_color="black", line_width=1.5, line_dash="dashed")
    # Without engine edges the path is only the thread-order approximation (~1 s per million
    # spans): above APPROX_PATH_LIMIT spans it is left to the caller, and the note says so.
    skipped = critical_path is True and trace.n_spans > APPROX_PATH_LIMIT and not has_edges(trace.table, trace.ops)
    path: CriticalPath | None = critical_path if isinstance(critical_path, CriticalPath) else None
    if critical_path is True and not skipped:
        path = trace.critical_path()
    path_source: ColumnDataSource | None = None
    path_edges: ColumnDataSource | None = None
    path_renderers: list[Any] = []
    toggle: Toggle | None = None
    path_bar: Div | None = None
    if path is not None or lazy:
        approximate = path.approximate if path is not None else not has_edges(trace.table, trace.ops)
        path_source, path_edges, path_renderers, toggle, path_bar = _path_layer(p, approximate)
    state_source: ColumnDataSource | None = None
    state_lookup: ColumnDataSource | None = None
    # Every run as itself only where every span is, and both fit the budget together: else merged per pixel.
    states_full = si is None or (full_detail and len(layout) + len(si) <= detail_limit)
    if si is not None:
        state_source, state_lookup = _state_layer(p, trace, layout, si, (x0 - pad, x1 + pad), None if states_full else px)
    _legend(p, states=si is not None)
    # The overview shows the whole trace coarsely: the first view's blocks when it is merged
    # already (bounded by the pixels; one pass over 10M spans saved), else its own.
    overview = _overview(layout, x_range, width, backend, pad, None if full_detail else b)

    memory = _memory_lane(trace, analysis, layout, x_range, width, backend)
    table_source, table = _stats_table(trace)
    table_source.selected.js_on_change(
        "indices", CustomJS(args={"table": table_source, "names": names, "source": source, "flows": flows}, code=_TABLE_JS)
    )
    bars = _split_bars(analysis, width)
    n_merged = int(b.counts[b.counts > 1].sum())
    note_text = _note_text(len(layout), len(b), n_merged, layout.collapsed_threads, max_lanes)
    if si is not None:
        note_text += (
            " The strip under each thread's lane is the GIL, as sampled: "
            + ", ".join(f"{STATE_LABELS[s]} ({_COLOR_WORDS[s]})" for s in STATES)
            + "; hover a wait to see who held it."
        )
    if skipped:
        note_text += (
            f" No critical path: this trace has no engine edges and {trace.n_spans:,} spans, where its approximation "
            f"takes seconds; build_timeline(trace, critical_path=trace.critical_path()) draws it."
        )
    note = Div(text=note_text, render_as_text=True, width=width)
    table_title = Div(text=table.name, render_as_text=True)
    top = [note, row(toggle, path_bar)] if toggle is not None and path_bar is not None else [note]
    root = column(*top, p, *([memory] if memory is not None else []), overview, bars, table_title, table)
    tl = Timeline(
        trace=trace, layout=layout, root=root, figure=p, overview=overview, source=source, names=names,
        flows=flows, flows_all=flows_all, labels=labels, table=table, table_source=table_source, bars=bars, note=note,
        tap_callback=tap, pixels=px, full_detail=full_detail, merged=n_merged, window=(x0 - pad, x1 + pad),
        view=(x0 - pad, x1 + pad), frame_px=frame_px, analysis=analysis, path_source=path_source,
        path_edges=path_edges, path_toggle=toggle, path_summary=path_bar, path_renderers=path_renderers,
    )  # fmt: skip
    tl.state_source, tl.state_lookup, tl.states_full, tl._state_index = state_source, state_lookup, states_full, si
    tl.memory_figure = memory
    if path is not None:
        tl.set_path(path)
    return tl


#: The strip's colours in words, for the note above the figure.
_COLOR_WORDS = {
    ThreadState.HELD: "teal",
    ThreadState.WAIT: "red",
    ThreadState.BLOCKED: "grey",
    ThreadState.RUNNING: "slate",
    ThreadState.RUNNABLE: "orange",
    ThreadState.HELD_OFF_CPU: "olive",
}


def _state_layer(
    p: Any, trace: Trace, layout: Layout, si: StateIndex, window: tuple[float, float], pixels: int | None
) -> tuple[ColumnDataSource, ColumnDataSource]:
    """The GIL strip on ``p``: a quad per drawn run or merged block (:func:`.columns.state_columns`),
    coloured by state, with a hover of its own (state, thread, start, duration, runs, and a wait's
    holder). Drawn under the spans' renderers in the hover's and tap's eyes: neither selects it."""
    data, lookup = state_columns(trace, layout, si, window[0], window[1], pixels)
    source = ColumnDataSource(data, name="gil_states")
    names = ColumnDataSource(lookup, name="gil_lookup")
    mapper = LinearColorMapper(palette=STATE_PALETTE, low=-0.5, high=len(STATE_PALETTE) - 0.5)
    strip = p.quad(
        left="left", right="right", top="top", bottom="bottom", source=source, name="gil_strip",
        fill_color={"field": "c", "transform": mapper}, line_color=None, fill_alpha=0.95,
    )  # fmt: skip
    strip.nonselection_glyph = None
    strip.muted_glyph = None
    labels = [STATE_LABELS[s] for s in STATES]
    state = CustomJSHover(args={"labels": labels}, code="return labels[value];")
    thread = CustomJSHover(args={"names": names}, code="return value < 0 ? '' : names.data.thread[value];")
    detail = CustomJSHover(args={"names": names}, code="return value < 0 ? '' : names.data.detail[value];")
    p.add_tools(
        HoverTool(
            renderers=[strip],
            tooltips=[
                ("GIL", "@c{custom}"),
                ("thread", "@thread{custom}"),
                ("start", "@left{custom}"),
                ("duration", "@dur{custom}"),
                ("runs", "@count"),
                ("detail", "@detail{custom}"),
            ],
            formatters={
                "@c": state,
                "@thread": thread,
                "@detail": detail,
                "@left": CustomJSHover(code=_FMT_US_JS + "return fmt(value);"),
                "@dur": CustomJSHover(code=_FMT_US_JS + "return fmt(value);"),
            },
            name="gil_hover",
        )
    )
    return source, names


def _frame_estimate(layout: Layout, width: int, height: int) -> tuple[float, float]:
    """The plot area's (width, height) in pixels, on the low side (see :data:`FRAME_LEGEND_PX`)."""
    longest = max((len(ln.label) for ln in layout.lanes), default=0)
    w = width - FRAME_LEGEND_PX - FRAME_AXIS_PX - LABEL_CHAR_PX * longest
    return float(max(w, 100)), float(max(height - FRAME_TOP_BOTTOM_PX, 50))


def _label_layer(p: Any, source: ColumnDataSource, names: ColumnDataSource, first: dict[str, Any]) -> ColumnDataSource:
    """The names on the bars: a text glyph over the spans (never hovered nor tapped: those tools
    name their renderers), laid out again in the browser as the view moves (``_LABELS_JS``)."""
    labels = ColumnDataSource(first, name="span_labels")
    text_mapper = LinearColorMapper(palette=TEXT_PALETTE, low=-0.5, high=len(TEXT_PALETTE) - 0.5)
    p.text(
        x="x", y="y", text="text", source=labels, name="span_labels_text", x_offset=LABEL_PAD_PX,
        text_font_size=LABEL_FONT_SIZE, text_align="left", text_baseline="middle",
        text_color={"field": "c", "transform": text_mapper},
    )  # fmt: skip
    args = {
        "source": source, "lookup": names, "labels": labels, "fig": p, "pad": LABEL_PAD_PX, "char_px": LABEL_CHAR_PX,
        "min_chars": LABEL_MIN_CHARS, "limit": LABEL_LIMIT, "min_row_px": LABEL_MIN_ROW_PX, "row_h": ROW_HEIGHT - 0.04,
    }  # fmt: skip
    relabel = CustomJS(args=args, code=_LABELS_JS)
    for rng in (p.x_range, p.y_range):
        rng.js_on_change("start", relabel)
        rng.js_on_change("end", relabel)
    labels.js_on_change("data", relabel)  # after a refinement, with the real frame size
    return labels


def _legend(p: Any, states: bool = False) -> None:
    """Fixed legend entries: one off-data renderer whose rows (NaN: drawn nowhere) are the swatches,
    one legend item per row (``LegendItem.index``), and with ``states`` one per colour of the GIL
    strip. One renderer, not one per entry: a swatch renderer was 4 Bokeh models, ~10 KB of every
    timeline's document, which a notebook saves with each widget."""
    entries = [(ROLE_LABELS[r], ROLE_COLORS[r], 1.0) for r in ROLE_NAMES]
    entries.append(("merged: pale = idle", "#999999", 0.4))  # a merged block: paler the idler
    if states:
        entries += [(f"GIL: {STATE_LABELS[s]}", STATE_COLORS[s], 0.95) for s in STATES]
    nan = [float("nan")] * len(entries)
    swatches = ColumnDataSource(
        {
            "left": nan,
            "right": nan,
            "top": nan,
            "bottom": nan,
            "fill": [fill for _, fill, _ in entries],
            "alpha": [alpha for _, _, alpha in entries],
        },
        name="legend_swatches",
    )
    dummy = p.quad(
        left="left", right="right", top="top", bottom="bottom", source=swatches,
        fill_color="fill", line_color="fill", fill_alpha="alpha",
    )  # fmt: skip
    dummy.nonselection_glyph = None
    dummy.muted_glyph = None
    items = [LegendItem(label=label, renderers=[dummy], index=i) for i, (label, _, _) in enumerate(entries)]
    p.add_layout(Legend(items=items, click_policy="none", label_text_font_size="9pt"), "right")


#: The memory lane draws at most this many steps (a peak per pixel kept): a 100k-op profile's
#: 200k changes would be ~3 MB of columns in the page for a line 1,000 px wide.
MEMORY_POINTS = 4000


def _memory_lane(trace: Trace, analysis: Analysis, layout: Layout, x_range: Any, width: int, backend: str) -> Any:
    """Live bytes over time under the figure, on its axis (zoom and pan move both): a step line
    per process (a merged trace's each), hover with the bytes and the op whose array made the
    change; None without memory. Another tool's trace draws its ``Memory: cpu/0`` counter (MXNet's
    profile_memory) the same way."""
    m = analysis.memory
    series: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []  # (pid, ns, live, change index)
    if m is not None and len(m.ts):
        for pid in m.processes:
            idx = np.flatnonzero(m.pid == pid)
            series.append((pid, m.ts[idx], m.live[idx], idx))
    else:
        ts, live = live_from_counters(trace.counters)
        if not len(ts):
            return None
        series.append((0, ts, live, np.full(len(ts), -1)))
    f = figure(
        width=width, height=110, x_range=x_range, tools="", toolbar_location=None, output_backend=backend,
        y_axis_label="live MB",
    )  # fmt: skip
    dots = []
    several = len(series) > 1
    for k, (pid, ts, live, idx) in enumerate(series):
        columns = _memory_columns(m, layout, ts, live, idx, trace.process_name(pid))
        src = ColumnDataSource(columns, name="memory" if k == 0 else f"memory {pid}")
        color = MEMORY_COLORS[k % len(MEMORY_COLORS)]
        label = {"legend_label": trace.process_name(pid)} if several else {}
        f.step(x="x", y="mb", source=src, mode="after", line_color=color, line_width=1.5, **label)
        f.varea_step(x="x", y1=0, y2="mb", source=src, step_mode="after", fill_color=color, fill_alpha=0.12)
        # A step line is not hit-tested by Bokeh's hover: a dot per change is (drawn small, faint).
        dots.append(f.scatter(x="x", y="mb", source=src, size=5, fill_color=color, line_color=None, fill_alpha=0.6))
    tooltips = [("live", "@bytes"), ("changed by", "@op")] + ([("process", "@process")] if several else [])
    f.add_tools(HoverTool(renderers=dots, tooltips=tooltips, mode="vline"))
    if several:
        f.legend.location = "top_left"
        f.legend.label_text_font_size = "8pt"
    f.xaxis.formatter = CustomJSTickFormatter(code=_TICK_JS)
    f.ygrid.grid_line_alpha = 0.3
    peak = max(int(live.max()) for _, _, live, _ in series)
    f.title.text = f"memory: live NDArray bytes (peak {fmt_bytes(peak)})"
    return f


#: The memory lane's colour per process (the first: a single process's).
MEMORY_COLORS = ("#6a3d9a", "#b15928", "#1f78b4", "#33a02c", "#e31a1c", "#ff7f00")


def _memory_columns(m: Any, layout: Layout, ts: np.ndarray, live: np.ndarray, idx: np.ndarray, process: str) -> dict[str, Any]:
    """One process's steps as the lane's columns: at most :data:`MEMORY_POINTS` of them, each
    pixel column's peak and last value kept in time order (a 1 GB spike among 25,000 small arrays
    survives)."""
    x = (ts - layout.t0_ns) / 1e3
    keep = np.arange(len(x))
    if len(x) > MEMORY_POINTS:
        x0, x1 = layout.extent
        col = np.clip(((x - x0) / max(x1 - x0, 1e-9) * (MEMORY_POINTS // 2)).astype(np.int64), 0, MEMORY_POINTS // 2)
        last = np.flatnonzero(np.r_[col[1:] != col[:-1], True])
        order = np.lexsort((-live, col))
        peak = order[np.r_[True, col[order][1:] != col[order][:-1]]]
        keep = np.unique(np.concatenate([peak, last]))
    return {
        "x": x[keep],
        "mb": live[keep] / 1e6,
        "bytes": [fmt_bytes(int(v)) for v in live[keep].tolist()],
        "op": [m.maker_name(int(i)) if m is not None and i >= 0 else "" for i in idx[keep].tolist()],
        "process": [process] * len(keep),
    }


def _overview(layout: Layout, x_range: Any, width: int, backend: str, pad: float, ob: Blocks | None = None) -> Any:
    """The whole trace, coarse and fixed, with a range tool driving the main figure's ``x_range``."""
    x0, x1 = layout.extent
    if ob is None:
        ob = drawn_blocks(layout, x0 - pad, x1 + pad, width)
    overview = figure(
        width=width, height=90, x_range=Range1d(x0 - pad, x1 + pad), y_range=Range1d(layout.height + 0.3, -0.3),
        tools="", toolbar_location=None, output_backend=backend,
    )  # fmt: skip
    overview.quad(
        left=layout.left[ob.items], right=ob.right, top=layout.top[ob.items], bottom=layout.bottom[ob.items],
        fill_color=[PALETTE[c] for c in layout.role[ob.items].tolist()], line_color=None,
        fill_alpha=busy_alpha(busy_fraction(layout, ob)),  # shaded by how busy, as in the main figure
    )  # fmt: skip
    overview.xaxis.formatter = CustomJSTickFormatter(code=_TICK_JS)
    overview.yaxis.visible = False
    overview.grid.grid_line_color = None
    rt = RangeTool(x_range=x_range)
    rt.overlay.fill_color = "navy"
    rt.overlay.fill_alpha = 0.15
    overview.add_tools(rt)
    return overview


#: Above this many spans, a trace without engine edges gets no critical path unless asked for.
APPROX_PATH_LIMIT = 1_000_000


def _path_note(path: CriticalPath, drawn: int, total: int) -> str:
    """What the note says of the critical path: how to show it, what is drawn, and whether it is exact."""
    text = "Toggle 'critical path' to outline the spans that set the end-to-end time and its hops between threads"
    if total > drawn:
        text += (
            f" ({drawn:,} of its {total:,} rectangles drawn: the widest in view, at most {PATH_LIMIT:,}; the notebook "
            f"widget redraws them as you zoom)"
        )
    text += "."
    if path.approximate:
        text += f" The critical path is {path.note}."
    return text


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
            f"its thread and in the band): spans narrower than a pixel are shown as counted blocks, the paler the less "
            f"of their pixels' time they fill — zoom in the notebook widget (opprof.timeline) to see each span."
        )
    return " ".join([*parts, base])


def save_html(trace: Trace, path: str, *, title: str = "opprof timeline", **options: Any) -> Timeline:
    """Write the timeline of ``trace`` as one standalone HTML file with BokehJS inline (opens offline)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    tl = build_timeline(trace, **options)
    html = file_html(tl.root, INLINE, title=title)
    with written(path) as tmp, open(tmp, "w", encoding="utf-8") as f:  # the old file kept if this fails
        f.write(html)
    return tl
