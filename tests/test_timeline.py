"""The timeline as Bokeh model objects and as layout columns (no browser): lanes, tools, colours,
the family highlight, containment of Dummy_Wait, and level of detail on huge traces."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from bokeh.models import BoxZoomTool, CustomJS, CustomJSHover, PanTool, Range1d, RangeTool, ResetTool, TapTool, WheelZoomTool
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof
import opprof.demo
from opprof.trace import Span, ThreadInfo, Trace
from opprof.trace.synthetic import many_threads_trace, synthetic_trace
from opprof.trace.text import fmt_us
from opprof.view.figure import PALETTE, ROLE_COLORS, ROLE_LABELS, build_timeline, save_html
from opprof.view.layout import MAX_LANES, ROLE_NAMES, LaneKind, blocks, build_layout

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def demo_trace() -> Trace:
    with opprof.profile() as prof:
        opprof.demo.train(3)
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    return trace


@pytest.fixture(scope="module")
def demo(demo_trace):
    return build_timeline(demo_trace)


def _lane_of(tl, i: int) -> int:
    return int(tl.layout.lane[i])


def _items(tl) -> np.ndarray:
    """Layout item index of each drawn rectangle (full detail draws every item exactly once)."""
    lay = tl.layout
    key = {(float(a), float(t)): k for k, (a, t) in enumerate(zip(lay.left, lay.top.astype(np.float32), strict=True))}
    return np.array([key[(float(a), float(t))] for a, t in zip(tl.source.data["left"], tl.source.data["top"], strict=True)])


# ---------------------------------------------------------------------------- lanes and rows
def test_one_lane_per_thread_named_as_the_trace_names_it_plus_custom_ops(demo, demo_trace) -> None:
    lay = demo.layout
    used = {s.tid for s in demo_trace.spans if s.role != "parent"}
    assert [ln.label for ln in lay.lanes] == [t.name for t in demo_trace.threads if t.tid in used] + ["custom ops"]
    labels = demo.figure.yaxis.major_label_overrides
    assert sorted(labels.values()) == sorted(ln.label for ln in lay.lanes)
    # Full detail: every span on its thread lane, every parent and a copy of each child in the band.
    assert demo.merged == 0
    drawn = len(demo.source.data["left"])
    children = sum(1 for s in demo_trace.spans if s.role in ("python", "subop", "wait", "dummy_wait"))
    assert drawn == len(demo_trace.spans) + children == len(lay)
    per_lane = Counter(lay.lane[_items(demo)].tolist())
    for k, ln in enumerate(lay.lanes):
        if ln.kind == "thread":
            assert per_lane[k] == sum(1 for s in demo_trace.spans if s.tid == ln.tid and s.role != "parent"), ln.label
        else:
            assert per_lane[k] == children + sum(1 for s in demo_trace.spans if s.role == "parent")


def test_rows_never_overlap_and_depth_stacks_nested_spans() -> None:
    t = Trace(
        threads=[ThreadInfo(1, "main")],
        spans=[
            Span("outer", "c", 1, 0, 100),
            Span("inner", "c", 1, 10, 50),
            Span("leaf", "c", 1, 20, 30),
            Span("zero", "c", 1, 20, 20),
            Span("sibling", "c", 1, 60, 90),
            Span("next", "c", 1, 100, 120),
        ],
    )
    lay = build_layout(t)
    depth = dict(zip((t.spans[i].name for i in lay.span_index), (lay.row - lay.row.min()).tolist(), strict=True))
    assert depth == {"outer": 0, "inner": 1, "leaf": 2, "zero": 3, "sibling": 1, "next": 0}
    for tr in (t, synthetic_trace(20_000, seed=3)):
        lay = build_layout(tr)
        o = np.lexsort((lay.left, lay.row))
        same = lay.row[o][1:] == lay.row[o][:-1]
        assert not (same & (lay.left[o][1:] < lay.right[o][:-1] - 1e-9)).any()


def test_every_child_and_dummy_wait_lies_inside_its_parent_rectangle(demo, demo_trace) -> None:
    lay = demo.layout
    d = demo.source.data
    band = len(lay.lanes) - 1
    items = _items(demo)
    rects = {}
    for j, i in enumerate(items.tolist()):
        if lay.lane[i] == band and lay.role[i] == ROLE_NAMES.index("parent"):
            rects[int(lay.invocation[i])] = (d["left"][j], d["right"][j], d["top"][j], d["bottom"][j])
    n_dummy = 0
    for j, i in enumerate(items.tolist()):
        if lay.lane[i] != band or lay.role[i] == ROLE_NAMES.index("parent"):
            continue
        left, right, top, bottom = rects[int(lay.invocation[i])]
        assert left <= d["left"][j] and d["right"][j] <= right and top <= d["top"][j] and d["bottom"][j] <= bottom
        n_dummy += lay.role[i] == ROLE_NAMES.index("dummy_wait")
    assert n_dummy == len(rects) == sum(1 for s in demo_trace.spans if s.role == "parent") > 0


# ---------------------------------------------------------------------------- tools, ranges, colours
def test_tools_ranges_and_overview(demo) -> None:
    p = demo.figure
    tools = {type(t): t for t in p.toolbar.tools}
    assert tools[WheelZoomTool].dimensions == "width" and p.toolbar.active_scroll is tools[WheelZoomTool]
    assert tools[PanTool].dimensions == "width"
    assert BoxZoomTool in tools and ResetTool in tools and TapTool in tools
    x0, x1 = demo.layout.extent
    assert isinstance(p.x_range, Range1d) and p.x_range.start <= x0 and p.x_range.end >= x1
    assert p.y_range.start > p.y_range.end  # row 0 at the top
    (rt,) = [t for t in demo.overview.toolbar.tools if isinstance(t, RangeTool)]
    assert rt.x_range is p.x_range
    assert p.xaxis.axis_label == "time since trace start"


def test_colours_are_fixed_per_role_with_a_legend(demo) -> None:
    assert PALETTE[: len(ROLE_NAMES)] == [ROLE_COLORS[r] for r in ROLE_NAMES]
    assert len(set(ROLE_COLORS.values())) == len(ROLE_COLORS)
    lay = demo.layout
    c = np.asarray(demo.source.data["c"])
    assert np.array_equal(c, lay.role[_items(demo)])  # colour index = role code at full detail
    (legend,) = demo.figure.legend
    labels = [item.label["value"] for item in legend.items]
    assert labels[: len(ROLE_NAMES)] == [ROLE_LABELS[r] for r in ROLE_NAMES]
    for item, role in zip(legend.items, ROLE_NAMES, strict=False):
        assert item.renderers[0].glyph.fill_color == ROLE_COLORS[role]


def test_hover_shows_text_only(demo) -> None:
    (hover,) = [t for t in demo.figure.toolbar.tools if type(t).__name__ == "HoverTool"]
    fields = dict(hover.tooltips)
    assert set(fields) >= {"name", "thread", "start", "duration", "detail"}
    assert not any("{safe}" in v for v in fields.values())
    assert all(isinstance(f, CustomJSHover) for f in hover.formatters.values())
    d = demo.source.data
    names = demo.names.data["name"]
    details = demo.names.data["detail"]
    parents = [j for j, c in enumerate(d["c"]) if c == ROLE_NAMES.index("parent")]
    assert parents and all("python" in details[d["detail"][j]] and "waiting" in details[d["detail"][j]] for j in parents)
    assert {names[k] for k in d["name"]} <= set(names)


def test_tap_highlights_the_whole_family_with_its_flows(demo, demo_trace) -> None:
    (tap,) = [t for t in demo.figure.toolbar.tools if isinstance(t, TapTool)]
    cb = tap.callback
    assert isinstance(cb, CustomJS) and cb is demo.tap_callback
    assert cb.args["source"] is demo.source and cb.args["flows_all"] is demo.flows_all and cb.args["flows"] is demo.flows
    assert "inv" in cb.code and "selected.indices" in cb.code
    d = demo.source.data
    fams = demo_trace.families()
    lay = demo.layout
    items = _items(demo)
    fa = demo.flows_all.data
    for inv, spans in list(fams.items())[:10]:
        rows = [j for j, v in enumerate(d["inv"]) if v == inv]
        assert len(rows) == 2 * len(spans) - 1  # parent once, each child on its thread and in the band
        lanes = {lay.lanes[lay.lane[items[j]]].label for j in rows}
        assert "custom ops" in lanes and len(lanes) >= 3  # across lanes
        subop_starts = {(s.tid, s.start) for s in spans if s.role == "subop"}
        n_flows = sum(1 for f in demo_trace.flows if (f.dst_tid, f.dst_ts) in subop_starts)
        assert int((np.asarray(fa["inv"]) == inv).sum()) == n_flows > 0
    assert len(demo.flows.data["x0"]) == 0  # nothing highlighted until a tap


def test_fmt_us_picks_sensible_units() -> None:
    assert fmt_us(0.25) == "250 ns"
    assert fmt_us(12.345) == "12.3 µs"
    assert fmt_us(1234.5) == "1.23 ms"
    assert fmt_us(2_500_000) == "2.50 s"


# ---------------------------------------------------------------------------- level of detail
@pytest.fixture(scope="module")
def big() -> Trace:
    return synthetic_trace(300_000, seed=1)


def test_lod_counts_sum_to_the_spans_and_stay_under_a_budget(big) -> None:
    lay = build_layout(big)
    x0, x1 = lay.extent
    rows = sum(ln.rows for ln in lay.lanes)
    for pixels in (800, 2000):
        b = blocks(lay, x0, x1, pixels)
        assert int(b.counts.sum()) == len(lay)
        assert len(b) <= 2 * rows * pixels
        assert np.all(b.right >= lay.left[b.items])
    counts = blocks(lay, x0, x1, 1000).counts
    assert int(counts.sum()) == len(lay)
    # Zoomed to 1/1000 of the trace: only what is on screen, mostly unmerged.
    w = (x1 - x0) / 1000
    b = blocks(lay, x0 + 500 * w, x0 + 501 * w, 1000)
    assert 0 < len(b) < 500 and (b.counts == 1).mean() > 0.9
    mask = lay.role == ROLE_NAMES.index("subop")
    b = blocks(lay, x0, x1, 1000, mask)
    assert int(b.counts.sum()) == int(mask.sum()) and set(lay.role[b.items].tolist()) == {ROLE_NAMES.index("subop")}


def test_huge_trace_draws_a_bounded_number_of_rectangles(big, tmp_path: Path) -> None:
    tl = save_html(big, str(tmp_path / "big.html"), width=800)
    drawn = len(tl.source.data["left"])
    assert drawn < 60_000 < len(tl.layout)
    assert int(np.asarray(tl.source.data["count"]).sum()) == len(tl.layout)
    assert tl.merged > 0 and "merged" in tl.note.text and "zoom in the notebook widget" in tl.note.text
    assert np.all(np.asarray(tl.source.data["inv"])[np.asarray(tl.source.data["count"]) > 1] == -1)
    html = (tmp_path / "big.html").read_text()
    assert "cdn.bokeh.org" not in html and len(html) < 15_000_000


def test_save_html_small_trace_has_every_span_and_no_merge_note(demo_trace, tmp_path: Path) -> None:
    path = tmp_path / "t.html"
    tl = opprof.save_html(demo_trace, str(path))
    assert tl.merged == 0 and "merged" not in tl.note.text
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Bokeh" in html and "cdn.bokeh.org" not in html


def test_import_opprof_does_not_import_bokeh() -> None:
    code = "import sys, opprof; print(any(m.split('.')[0] in ('bokeh', 'ipywidgets', 'jupyter_bokeh') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    code = "import opprof.view, opprof, opprof.trace as t; print(type(opprof.timeline(t.Trace(), load_js=False)).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "TimelineWidget"


# ---------------------------------------------------------------------------- many threads
def test_a_hundred_thousand_threads_draw_with_the_rest_collapsed_and_the_note_says_so(tmp_path: Path) -> None:
    trace = many_threads_trace(100_000)
    tl = build_timeline(trace)
    lanes = tl.layout.lanes
    assert len(lanes) == MAX_LANES  # 499 busiest threads, then one collapsed lane
    assert [ln.kind for ln in lanes].count(LaneKind.COLLAPSED) == 1
    assert lanes[-1].kind == LaneKind.COLLAPSED and lanes[-1].label == "99,501 more threads (collapsed)"
    assert tl.layout.collapsed_threads == 99_501
    assert "99,501 threads share the lane" in tl.note.text
    # Every span is placed, and the kept lanes are the busiest threads.
    assert len(tl.layout) == trace.n_spans and (tl.layout.lane >= 0).all()
    t = trace.table
    busy = np.bincount(t.tid, weights=np.where(t.name == t.strings.index("handle_request"), t.end - t.start, 0))
    kept = {ln.tid for ln in lanes if ln.kind == LaneKind.THREAD}
    assert min(busy[list(kept)]) >= max(np.delete(busy, [0, *kept]))
    # Hover names any thread, collapsed or not.
    assert all(name.startswith("worker-") for name in tl.names.data["thread"] if name)
    save_html(trace, str(tmp_path / "t.html"))


def test_ten_thousand_threads_each_get_a_lane_when_asked() -> None:
    trace = many_threads_trace(10_000)
    layout = build_layout(trace, max_lanes=10_000)
    assert len(layout.lanes) == 10_000 and layout.collapsed_threads == 0
    assert [ln.tid for ln in layout.lanes] == [th.tid for th in trace.threads]
    tl = build_timeline(trace, max_lanes=10_000)
    assert "collapsed" not in tl.note.text
    ticks = tl.figure.yaxis.ticker.ticks
    assert 10 <= len(ticks) < 200, "labels thinned to what 720 pixels show"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 30), st.integers(0, 12)), max_size=40), st.integers(1, 5))
def test_rows_are_each_threads_own_nesting_depth_however_many_lanes(raw: list[tuple[int, int, int]], max_lanes: int) -> None:
    """Placing all threads at once (own lanes or collapsed) gives each span its depth on its own
    thread: the number of spans before it (by start, longer first) still open at its start."""
    spans, open_until = [], {}
    for tid, start, dur in sorted(raw, key=lambda r: (r[1], -r[2])):
        stack = [e for e in open_until.get(tid, []) if e > start]
        end = min([start + dur, *stack])  # inside every span still open on its thread
        spans.append(Span(f"s{len(spans)}", "python", tid, start, end))
        open_until[tid] = [*stack, end]
    trace = Trace(threads=[ThreadInfo(t, f"t{t}") for t in range(1, 5)], spans=spans)
    assert trace.validate() == []
    layout = build_layout(trace, max_lanes=max_lanes)
    first_row = np.concatenate(([0], np.cumsum([ln.rows for ln in layout.lanes])))
    for tid in range(1, 5):
        mine = sorted((i for i, s in enumerate(spans) if s.tid == tid), key=lambda i: (spans[i].start, -spans[i].end))
        if not mine:
            continue
        want = [sum(spans[j].end > spans[i].start for j in mine[:k]) for k, i in enumerate(mine)]
        pos = [int(np.flatnonzero(layout.span_index == i)[0]) for i in mine]
        got = [int(layout.row[p] - first_row[layout.lane[p]]) for p in pos]
        assert got == want
