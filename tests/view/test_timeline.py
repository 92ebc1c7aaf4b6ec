"""The timeline as Bokeh model objects and as layout columns (no browser): lanes, tools, colours,
the family highlight, containment of Dummy_Wait, level of detail on huge traces, and the analyses
it shows (waiting by cause in the split bars and the hover, the critical path's toggle)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from bokeh.models import (
    Arrow,
    BoxZoomTool,
    ColumnDataSource,
    CustomJS,
    CustomJSHover,
    HoverTool,
    LinearInterpolator,
    PanTool,
    Range1d,
    RangeTool,
    ResetTool,
    TapTool,
    Toggle,
    WheelZoomTool,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof
import opprof.demo
from opprof import nd
from opprof.trace import Span, ThreadInfo, Trace
from opprof.trace.analysis.summary import custom_op_summary
from opprof.trace.synthetic import many_threads_trace, synthetic_trace
from opprof.trace.text import fmt_us
from opprof.view import TimelineWidget
from opprof.view.figure import (
    CAUSE_COLORS,
    CAUSE_LABELS,
    LINE_PALETTE,
    PALETTE,
    PATH_COLOR,
    PATH_LIMIT,
    ROLE_COLORS,
    ROLE_LABELS,
    TEXT_PALETTE,
    build_timeline,
    busy_alpha,
    label_columns,
    op_type_splits,
    save_html,
)
from opprof.view.layout import (
    LANE_GAP,
    MAX_LANES,
    ROLE_NAMES,
    Blocks,
    LaneKind,
    blocks,
    build_layout,
    busy_fraction,
    process_starts,
    runs,
    thread_labels,
)

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


def _swatch(item) -> str:
    """A legend item's colour: its row of the one swatch renderer's source."""
    (r,) = item.renderers
    spec = r.glyph.fill_color
    return r.data_source.data[spec["field"] if isinstance(spec, dict) else spec][item.index]


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
        assert _swatch(item) == ROLE_COLORS[role]


def test_hover_shows_text_only(demo) -> None:
    (hover,) = [t for t in demo.figure.toolbar.tools if type(t).__name__ == "HoverTool" and t.name != "gil_hover"]
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


def test_runs_of_alike_blocks_keep_every_span_and_stop_at_gaps_spans_and_changes(big) -> None:
    lay = build_layout(big)
    x0, x1 = lay.extent
    b = blocks(lay, x0, x1, 2000)
    r = runs(lay, b, (x1 - x0) / 2000)
    assert int(r.counts.sum()) == int(b.counts.sum()) == len(lay) and r.busy.sum() == pytest.approx(b.busy.sum())
    assert len(r) < len(b) / 2
    # One row over 10 ms at 100 pixels (100 µs each): 1 µs spans every 10 µs (10 % busy), none from 4
    # to 6 ms, a 0.5 ms span at 7 ms, and every 2 µs from 8 to 9 ms (50 %, another level).
    ticks = [t for t in range(0, 10_000, 10) if not 4_000 <= t < 6_000 and not 7_000 <= t < 7_500 and not 8_000 <= t < 9_000]
    ticks += list(range(8_000, 9_000, 2))
    spans = [Span("tick", "c", 1, t * 1000, t * 1000 + 1000) for t in sorted(ticks)] + [
        Span("long", "c", 1, 7_000_000, 7_500_000)
    ]
    lay = build_layout(Trace(threads=[ThreadInfo(1, "main")], spans=spans))
    b = blocks(lay, 0.0, 10_000.0, 100)
    r = runs(lay, b, 100.0)
    assert int(r.counts.sum()) == len(lay)
    drawn = sorted(zip(lay.left[r.items].tolist(), r.right.tolist(), r.counts.tolist(), strict=True))
    edges = [(round(a), round(z)) for a, z, _ in drawn]
    # [0, 4 ms) | gap | [6, 7) | the span | [7.5, 8) | [8, 9) busier | [9, 10)
    assert edges == [(0, 4000), (6000, 7000), (7000, 7500), (7500, 8000), (8000, 9000), (9000, 10000)], edges
    f = busy_fraction(lay, r)[np.argsort(lay.left[r.items], kind="stable")]
    assert np.allclose(f, [0.1, 0.1, 1.0, 0.1, 0.5, 0.1], atol=0.01)
    # Two blocks that touch, with a span drawn as itself between them (a lone one, narrower than
    # the pixel): not joined over it; without it, one run of their spans.
    lay = build_layout(
        Trace(
            threads=[ThreadInfo(1, "main")],
            spans=[Span(n, "c", 1, a, a + 1_000) for n, a in (("a", 0), ("s", 70_000), ("d", 100_000))],
        )
    )
    k = {n: int(np.flatnonzero(lay.left == a)[0]) for n, a in (("a", 0.0), ("s", 70.0), ("d", 100.0))}
    two = Blocks(np.array([k["a"], k["d"]]), np.array([2, 2]), np.array([100.0, 200.0]), np.array([15.0, 15.0]))
    assert len(runs(lay, two, 100.0)) == 1 and runs(lay, two, 100.0).counts.tolist() == [4]
    three = Blocks(
        np.array([k["a"], k["s"], k["d"]]), np.array([2, 1, 2]), np.array([100.0, 71.0, 200.0]), np.array([15.0, 1.0, 15.0])
    )
    assert sorted(runs(lay, three, 100.0).counts.tolist()) == [1, 2, 2]


def test_huge_trace_draws_a_bounded_number_of_rectangles(big, tmp_path: Path) -> None:
    tl = save_html(big, str(tmp_path / "big.html"), width=800)
    drawn = len(tl.source.data["left"])
    assert drawn < 60_000 < len(tl.layout)
    assert int(np.asarray(tl.source.data["count"]).sum()) == len(tl.layout)
    assert tl.merged > 0 and "merged" in tl.note.text and "zoom in the notebook widget" in tl.note.text
    assert np.all(np.asarray(tl.source.data["inv"])[np.asarray(tl.source.data["count"]) > 1] == -1)
    html = (tmp_path / "big.html").read_text()
    assert "cdn.bokeh.org" not in html and len(html) < 15_000_000


def _busy_rows_trace(n: int = 10_000) -> Trace:
    """Two threads over 1 s: "sparse" runs 1 µs in every 100 µs (1 % busy), "dense" 100 µs spans
    back to back (100 % busy)."""
    sparse = [Span("tick", "c", 1, k * 100_000, k * 100_000 + 1_000) for k in range(n)]
    dense = [Span("work", "c", 2, k * 100_000, (k + 1) * 100_000) for k in range(n)]
    return Trace(threads=[ThreadInfo(1, "sparse"), ThreadInfo(2, "dense")], spans=sparse + dense)


def test_merged_blocks_show_how_busy_their_pixels_are() -> None:
    """Zoomed out (~10 spans a pixel), a row busy 1 % of the time merges into blocks ~0.01 busy,
    drawn faint, one busy throughout into solid blocks; alike blocks side by side draw as one run;
    the hover says how busy and the overview shades them alike."""
    trace = _busy_rows_trace()
    lay = build_layout(trace)
    x0, x1 = lay.extent
    b = blocks(lay, x0, x1, 1000)
    f = busy_fraction(lay, b)
    lanes = {ln.label: k for k, ln in enumerate(lay.lanes)}
    merged = b.counts > 1
    assert merged.all() and 8 <= np.median(b.counts) <= 12
    order = np.argsort(lay.left[b.items])
    sparse = f[order][lay.lane[b.items[order]] == lanes["sparse"]][1:-1]  # the pixels at the ends hold a few spans
    dense = f[order][lay.lane[b.items[order]] == lanes["dense"]][1:-1]
    assert len(sparse) > 900 and np.all((sparse > 0.005) & (sparse < 0.02)) and np.mean(sparse) == pytest.approx(0.01, rel=0.1)
    assert len(dense) > 900 and np.all(dense > 0.98) and np.all(dense <= 1.0)
    # Runs: a row as busy all along is one rectangle (its first and last pixels apart), holding every span.
    r = runs(lay, b, (x1 - x0) / 1000)
    assert int(r.counts.sum()) == len(lay) and len(r) <= 6
    rf = busy_fraction(lay, r)
    big = r.counts > 1_000
    assert sorted(np.round(rf[big], 3).tolist()) == [pytest.approx(0.01, abs=0.001), 1.0]

    tl = build_timeline(trace, width=500, detail_limit=1_000, critical_path=False)
    d = tl.source.data
    count, f = np.asarray(d["count"]), np.asarray(d["busy_fraction"])
    thread = np.array([tl.names.data["thread"][t] for t in d["thread"]])
    assert int(count.sum()) == len(tl.layout) and len(count) <= 6 and tl.merged == len(tl.layout)
    (sparse_run,) = f[(thread == "sparse") & (count > 1_000)]
    (dense_run,) = f[(thread == "dense") & (count > 1_000)]
    assert sparse_run == pytest.approx(0.01, rel=0.05) and dense_run == pytest.approx(1.0, abs=0.001)
    single = build_timeline(_label_trace(), critical_path=False).source.data
    assert np.all(np.asarray(single["busy_fraction"]) == 1.0)  # a span is drawn as before
    # The fill's alpha follows: what the browser's interpolator makes of the column.
    (r,) = [r for r in tl.figure.renderers if r.data_source is tl.source]
    interp = r.glyph.fill_alpha.transform
    assert isinstance(interp, LinearInterpolator) and r.glyph.fill_alpha.field == "busy_fraction"
    assert np.allclose(np.interp([0.01, 1.0], interp.x, interp.y), busy_alpha(np.array([0.01, 1.0])))
    assert (
        busy_alpha(np.array([sparse_run]))[0] == pytest.approx(0.1585, abs=0.01) and busy_alpha(np.array([dense_run]))[0] > 0.99
    )
    assert LINE_PALETTE[len(ROLE_NAMES) :] == ["#00000000"] * len(ROLE_NAMES)  # no outline: blocks a third of a pixel wide
    # The hover of a merged block: "1,234 spans merged, 3% busy".
    (hover,) = [t for t in tl.figure.toolbar.tools if isinstance(t, HoverTool) and t.name != "gil_hover"]
    js = hover.formatters["@name"].code
    assert "spans merged, " in js and "% busy" in js and "busy_fraction" in js and 'toLocaleString("en-US")' in js
    # The overview shades its merged blocks alike.
    (ov,) = [r for r in tl.overview.renderers if "fill_alpha" in r.data_source.data]
    alpha = np.asarray(ov.data_source.data["fill_alpha"])
    width = np.asarray(ov.data_source.data["right"]) - np.asarray(ov.data_source.data["left"])
    top = np.asarray(ov.data_source.data["top"])
    rows = {ln.label: ln for ln in tl.layout.lanes}
    faint = alpha[(top >= rows["sparse"].top) & (top < rows["sparse"].top + 1) & (width > 100_000)]
    solid = alpha[(top >= rows["dense"].top) & (top < rows["dense"].top + 1) & (width > 100_000)]
    assert len(faint) == len(solid) == 1 and faint[0] < 0.2 and solid[0] > 0.99
    assert "the paler the less" in tl.note.text


def _label_trace() -> Trace:
    """Spans on one thread, named and sized to test names on the bars (times in µs x 1000)."""
    spans = [
        ("ScaledTanh::pure_python", 0, 400),
        ("elemwise_add", 400, 460),
        ("relu", 460, 480),
        ("dot", 480, 510),
        ("_copyto", 600, 1000),
        ("RowSquaredError", 1050, 1300),
    ]
    return Trace(threads=[ThreadInfo(1, "main")], spans=[Span(n, "c", 1, a * 1000, b * 1000) for n, a, b in spans])


def _labels(tl) -> dict[str, float]:
    """Label text -> its x."""
    d = tl.labels.data
    return dict(zip(d["text"], np.asarray(d["x"]).tolist(), strict=True))


def test_names_on_the_bars_fit_their_spans_cut_with_an_ellipsis(monkeypatch) -> None:
    import opprof.view.figure as fig

    tl = build_timeline(_label_trace(), critical_path=False)
    (text,) = [r for r in tl.figure.renderers if r.name == "span_labels_text"]
    assert text.data_source is tl.labels and isinstance(tl.labels, ColumnDataSource) and text.visible
    assert text.glyph.text_color.transform.palette == TEXT_PALETTE
    assert TEXT_PALETTE[ROLE_NAMES.index("dummy_wait")] == "#ffffff" and TEXT_PALETTE[ROLE_NAMES.index("parent")] == "#000000"
    # 1 px per µs (frame 1000 px wide, view 1000 µs), 3 px padding, ~7 px a character.
    tl.frame_px = (1000.0, 400.0)
    tl.refresh(100.0, 1100.0)
    assert _labels(tl) == {
        "ScaledTanh::pure_python": 100.0,  # starts off screen: at the view's left edge, in full (294 px)
        "elemwi…": 400.0,  # 54 px: 7 characters, the last an ellipsis
        "dot": 480.0,  # 24 px hold its 3 characters
        "_copyto": 600.0,
        "RowSq…": 1050.0,  # 44 px visible of its 250
    }  # "relu" (14 px: 2 characters) gets none
    d, i = tl.source.data, np.asarray(tl.labels.data["i"])
    assert np.allclose(tl.labels.data["y"], (np.asarray(d["top"])[i] + np.asarray(d["bottom"])[i]) / 2)
    names = [tl.names.data["name"][d["name"][k]] for k in i.tolist()]
    assert all(n.startswith(t.rstrip("…")) for n, t in zip(names, tl.labels.data["text"], strict=True))
    # Zoomed out, nothing fits; zoomed in, everything on screen does (recomputed on every refresh).
    tl.refresh(0.0, 100_000.0)
    assert _labels(tl) == {}
    tl.refresh(450.0, 520.0)
    assert set(_labels(tl)) == {"elemwise_add", "relu", "dot"}
    # At most LABEL_LIMIT, the widest.
    monkeypatch.setattr(fig, "LABEL_LIMIT", 3)
    tl.refresh(100.0, 1100.0)
    assert list(_labels(tl)) == ["ScaledTanh::pure_python", "elemwi…", "_copyto"]


def test_labels_only_on_single_spans_in_rows_tall_enough() -> None:
    tl = build_timeline(_busy_rows_trace(2_000), width=500, detail_limit=100, critical_path=False)
    d = tl.source.data
    assert (np.asarray(d["count"]) > 1).any()
    x0, x1 = tl.layout.extent
    frame = (400.0, 300.0)
    assert label_columns(d, tl.names.data["name"], x0, x1, frame, 2.6)["text"] == []  # merged blocks: no names
    tl.refresh(50_000.0, 50_300.0)  # three 100 µs "work" spans and ticks of 1 µs
    d = tl.source.data
    assert label_columns(d, tl.names.data["name"], 50_000.0, 50_300.0, frame, 2.6)["text"] == ["work"] * 3
    assert label_columns(d, tl.names.data["name"], 50_000.0, 50_300.0, (400.0, 30.0), 2.6)["text"] == []  # 11 px rows


def test_save_html_small_trace_has_every_span_and_no_merge_note(demo_trace, tmp_path: Path) -> None:
    path = tmp_path / "t.html"
    tl = opprof.save_html(demo_trace, str(path))
    assert tl.merged == 0 and "merged" not in tl.note.text
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Bokeh" in html and "cdn.bokeh.org" not in html


@pytest.mark.e2e  # a fresh interpreter in a subprocess
def test_import_opprof_does_not_import_bokeh() -> None:
    code = "import sys, opprof; print(any(m.split('.')[0] in ('bokeh', 'ipywidgets', 'jupyter_bokeh') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    code = "import opprof.view, opprof, opprof.trace as t; print(type(opprof.timeline(t.Trace(), load_js=False)).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "TimelineWidget"


# ---------------------------------------------------------------------------- several processes
@pytest.fixture(scope="module")
def three_processes() -> Trace:
    """Three processes of four threads each (main, two engine threads, one custom-op thread), listed
    in the reverse of pid order: the lanes must still go by pid."""
    trace = synthetic_trace(3_000, processes=3, engine_threads=2, custom_threads=1)
    trace.threads = trace.threads[::-1]
    return trace


def test_lanes_of_each_process_lie_together_in_pid_order_each_labelled_with_its_process(three_processes: Trace) -> None:
    trace = three_processes
    lay = build_layout(trace)
    lanes = [ln for ln in lay.lanes if ln.kind == LaneKind.THREAD]
    assert len(lanes) == len(trace.threads) and lay.lanes[-1].kind == LaneKind.CUSTOM
    assert [ln.pid for ln in lanes] == [0] * 4 + [1] * 4 + [2] * 4
    names = {th.tid: th.name for th in trace.threads}
    assert [ln.label for ln in lanes] == [f"{trace.processes[ln.pid]} · {names[ln.tid]}" for ln in lanes]
    assert lanes[0].label == "client · opprof-custom-0" and lanes[4].label == "worker-1 · opprof-custom-0"
    position = [th.tid for th in trace.threads]
    for pid in range(3):  # inside a process, the trace's own thread order
        tids = [ln.tid for ln in lanes if ln.pid == pid]
        assert tids == sorted(tids, key=position.index)
    assert process_starts(lay) == [4, 8]
    assert lay.thread_labels == {ln.tid: ln.label for ln in lanes}


def test_a_trace_of_one_process_keeps_its_lane_labels_whatever_its_pid() -> None:
    trace = synthetic_trace(2_000)
    plain = [ln.label for ln in build_layout(trace).lanes]
    assert plain == [th.name for th in trace.threads] + ["custom ops"]
    trace.threads = [ThreadInfo(th.tid, th.name, 7) for th in trace.threads]
    trace.processes = {7: "worker-7"}
    lay = build_layout(trace)
    assert [ln.label for ln in lay.lanes] == plain and process_starts(lay) == []


def test_a_thread_named_after_its_process_already_is_not_named_twice() -> None:
    trace = Trace(
        threads=[ThreadInfo(0, "pid 3 / tid 1", 0), ThreadInfo(1, "MainThread", 1), ThreadInfo(2, "MainThread", 2)],
        processes={0: "pid 3", 1: "trainer"},
    )
    assert thread_labels(trace) == {0: "pid 3 / tid 1", 1: "trainer · MainThread", 2: "process 2 · MainThread"}


def test_the_timeline_of_several_processes_draws_a_line_between_them_and_hover_names_the_process(
    three_processes: Trace,
) -> None:
    tl = build_timeline(three_processes)
    lanes = tl.layout.lanes
    assert sorted(tl.figure.yaxis.major_label_overrides.values()) == sorted(ln.label for ln in lanes)
    (line,) = tl.figure.select(name="process_separators")
    assert list(line.data_source.data["y0"]) == [lanes[k].top - LANE_GAP / 2 for k in (4, 8)]
    threads = {tl.names.data["thread"][c] for c in tl.source.data["thread"]}
    assert threads and all(" · " in name for name in threads)
    assert not build_timeline(synthetic_trace(2_000)).figure.select(name="process_separators")


# ---------------------------------------------------------------------------- many threads
@pytest.mark.e2e  # ~3 s
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


# ---------------------------------------------------------------------------- why ops wait, critical path
class Slow(opprof.operator.CustomOp):
    """Two sub-ops, the second waiting on the first (a ``dependency``), and a wait in its Python."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        y = in_data[0] * 2  # site: push
        y.wait_to_read()  # site: wait
        self.assign(out_data[0], req[0], y + 1)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):  # type: ignore[no-untyped-def]
        self.assign(in_grad[0], req[0], out_grad[0] * 2)


@opprof.operator.register("TimelineSlow")
class SlowProp(opprof.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return Slow()


def _line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (where the profiler records a push or wait)."""
    lines = Path(__file__).read_text().splitlines()
    return next(k for k, line in enumerate(lines, 1) if line.rstrip().endswith(marker))


@pytest.fixture(scope="module")
def edges_trace() -> Trace:
    """A profile on the threaded engine (so with the engine's edges): chains of two custom ops
    whose second sub-op waits for the first, recorded for autograd with a backward, three times.

    Never read ``.spans`` of it: the list view is rebuilt without the engine's edges.
    """
    opprof.set_engine("threaded", workers=2, custom_workers=2)
    try:
        x = nd.array(np.ones((200, 200)))
        x.attach_grad()
        with opprof.profile() as prof:
            for _ in range(3):
                with opprof.autograd.record():
                    y = nd.Custom(x, op_type="TimelineSlow")
                    z = nd.Custom(y, op_type="TimelineSlow")
                z.backward()
                w = z * 0.5
            w.wait_to_read()
    finally:
        opprof.set_engine("threaded")
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    assert trace.ops is not None and trace.waiting_causes().has_edges and not trace.has_span_list
    return trace


@pytest.fixture(scope="module")
def edges_tl(edges_trace: Trace):
    return build_timeline(edges_trace)


def _bar_source(tl):
    (src,) = {r.data_source for r in tl.bars.renderers}
    return src


def test_split_bars_break_waiting_into_its_causes_summed_per_op_type(edges_tl, edges_trace: Trace) -> None:
    trace, tl = edges_trace, edges_tl
    c = trace.waiting_causes()
    # Where the GIL was sampled, the queues' parts follow (causes.QUEUE_PARTS).
    gil_parts = ("custom_pool_wake", "custom_pool_gil", "subop_queue_wake", "subop_queue_gil")
    assert c.keys in (
        ("custom_pool", "subop_queue", "dependency", "completion"),
        ("custom_pool", "subop_queue", "dependency", "completion", *gil_parts),
    )
    t = trace.table
    parent_names = [t.strings[k] for k in t.name[c.parents].tolist()]
    wall_ns = t.end[c.parents] - t.start[c.parents]
    ot = trace.analysis().op_types
    src = _bar_source(tl).data
    assert list(src["op"]) == ot.names and set(ot.names) == {"TimelineSlow", "_backward_TimelineSlow"}
    for j, op in enumerate(src["op"]):
        rows = [k for k, n in enumerate(parent_names) if n == op]
        assert src["calls"][j] == len(rows) == 6
        for col, key in enumerate(c.keys):
            want = int(c.ns[rows, col].sum())  # waiting_causes() summed by op type
            assert ot.of(op)[key] == want
            assert src[key][j] == pytest.approx(want / 1e6, rel=1e-12, abs=1e-12)
        # The three totals still add up to the wall time, the python parts to the python.
        wall = int(wall_ns[rows].sum()) / 1e6
        assert src["wall"][j] == pytest.approx(wall, rel=1e-12)
        assert src["python"][j] + src["sub-ops"][j] + src["waiting"][j] == pytest.approx(wall, rel=1e-9)
        py = src["py_on_cpu"][j] + src["py_off_cpu"][j] + src["py_cpu_unknown"][j]
        assert py == pytest.approx(src["python"][j], rel=1e-9) and src["py_cpu_unknown"][j] == 0
        # Where the GIL was sampled, the Python off a CPU is stacked by what its thread did meanwhile.
        off_parts = ("py_off_gil", "py_off_blocked", "py_off_cpu_wait", "py_off_unsampled")
        if trace.thread_states is not None:
            assert sum(src[k][j] for k in off_parts) == pytest.approx(src["py_off_cpu"][j], rel=1e-9, abs=1e-9)
            assert min(src[k][j] for k in off_parts) >= 0
        else:
            assert not set(off_parts) & set(src)
        assert src["waiting"][j] == pytest.approx(sum(src[k][j] for k in c.keys), rel=1e-9)
        assert src["dependency_pct"][j] == pytest.approx(100 * src["dependency"][j] / wall, rel=1e-9)
    # What op_type_splits returned before still holds, and the per-invocation oracle agrees.
    for op, (calls, py_us, sub_us, wait_us) in op_type_splits(trace).items():
        parts = ot.of(op)
        assert parts["calls"] == calls
        assert (parts["py_on_cpu"] + parts["py_off_cpu"] + parts["py_cpu_unknown"]) / 1e3 == pytest.approx(py_us)
        assert parts["sub-ops"] / 1e3 == pytest.approx(sub_us)
        assert sum(parts[k] for k in c.keys) / 1e3 == pytest.approx(wait_us)
    for row in custom_op_summary(trace.custom_ops()):
        parts = ot.of(row.name)
        assert {k: parts[k] for k in c.keys} == {k: row.waiting_by_cause.get(k, 0) for k in c.keys}
        assert row.python_cpu_ns is not None and parts["py_on_cpu"] <= row.python_cpu_ns
    # Each cause is its own stacked part, coloured and labelled as such, with a hover per part in ms.
    stacked = {r.name: r for r in tl.bars.renderers}
    shown = [k for k in c.keys if float(np.sum(src[k])) > 0]
    # Every call hands its Python to the pool (a queue wait, split into waking and the GIL where
    # they were timed); the second sub-op waits for the first.
    assert "dependency" in shown and any(k.startswith("custom_pool") for k in shown)
    assert set(shown) <= set(stacked)
    for key in shown:
        assert stacked[key].glyph.fill_color == CAUSE_COLORS[key]
    assert len({r.glyph.fill_color for r in stacked.values()}) == len(stacked)
    (legend,) = tl.bars.legend
    labels = {item.label["value"] for item in legend.items}
    assert {CAUSE_LABELS[k] for k in shown} | {"python on CPU", "sub-ops"} <= labels
    hovers = [h for h in tl.bars.toolbar.tools if isinstance(h, HoverTool)]
    by_renderer = {h.renderers[0].name: dict(h.tooltips) for h in hovers}
    assert set(by_renderer) == set(stacked)
    assert by_renderer["dependency"][CAUSE_LABELS["dependency"]].startswith("@{dependency}{0,0.000} ms")


def _drawn_parents(tl):
    d = tl.source.data
    return [j for j, c in enumerate(d["c"]) if c == ROLE_NAMES.index("parent")]


def test_parent_hover_says_waiting_by_cause_python_cpu_and_the_top_blocker(edges_tl, edges_trace: Trace) -> None:
    t = edges_trace.table
    causes = edges_trace.waiting_causes()
    d, texts = edges_tl.source.data, edges_tl.names.data["detail"]
    lay = edges_tl.layout
    items = _items(edges_tl)
    parents = _drawn_parents(edges_tl)
    assert len(parents) == len(causes.parents) == 12
    named = 0
    for j in parents:
        k = int(np.searchsorted(causes.parents, lay.span_index[items[j]]))
        assert causes.parents[k] == lay.span_index[items[j]]
        why = texts[d["why"][j]]
        total = int(causes.ns[k].sum())
        for key, ns in causes.of(k).items():
            if ns:
                assert f"{key} {fmt_us(ns / 1e3)} ({100 * ns / total:.0f}%)" in why, why
            else:  # not even as a word (custom_pool_gil is another key)
                assert not re.search(rf"(?<!\w){key}(?!\w)", why), why
        detail = texts[d["detail"][j]]
        py = int(edges_tl.analysis.split[k, 0])
        on = min(int(causes.cpu[k]), py)
        assert causes.cpu[k] >= 0 and f"{fmt_us(on / 1e3)} on CPU, {fmt_us((py - on) / 1e3)} off" in detail
        blockers = causes.all_blockers(t)[k]
        blocker = texts[d["blocker"][j]]
        if not blockers:
            assert blocker == ""
            continue
        top = blockers[0]
        want = f"dependency {fmt_us(top.ns / 1e3)}: {top.name} (invocation {top.invocation}), var {top.var}"
        assert blocker.startswith(want), (blocker, want)
        # Each forward's _plus_scalar waits for its _mul_scalar, and its output's copy for the
        # _plus_scalar: which waited longest depends on the recording (3.13 in one CI run: the copy).
        assert top.invocation == int(t.inv[causes.parents[k]]), top
        assert top.name.rpartition("::")[0].endswith("TimelineSlow") and top.name.endswith(("_mul_scalar", "_plus_scalar")), top
        named += 1
    assert named >= 6
    (hover,) = [t for t in edges_tl.figure.toolbar.tools if isinstance(t, HoverTool) and t.name != "gil_hover"]
    fields = dict(hover.tooltips)
    assert fields["waiting by cause"] == "@why{custom}" and fields["blocked by"] == "@blocker{custom}"
    assert all(isinstance(f, CustomJSHover) for f in hover.formatters.values())


def test_subop_and_wait_hover_names_the_users_line(edges_tl) -> None:
    d, texts, names = edges_tl.source.data, edges_tl.names.data["detail"], edges_tl.names.data["name"]
    detail = {}
    for j, c in enumerate(d["name"]):
        detail.setdefault(names[c], set()).add(texts[d["detail"][j]])
    # Each text is the line, then (where the span waited a fifth of itself or more for the GIL) how long.
    lines = {k: {x.split(" · ")[0] for x in v} for k, v in detail.items()}
    assert lines["TimelineSlow::_mul_scalar"] == {f"pushed at test_timeline.py:{_line_of('# site: push')}"}
    assert lines["TimelineSlow::WaitForVar"] == {f"waited at test_timeline.py:{_line_of('# site: wait')}"}
    assert lines["TimelineSlow::_plus_scalar"] == {f"pushed at test_timeline.py:{_line_of('# site: wait') + 1}"}
    assert detail["_mul_scalar"] <= {""} | {x for x in detail["_mul_scalar"] if x.endswith("for the GIL")}  # no line


def test_a_spans_own_wait_for_the_gil_is_in_its_hover() -> None:
    """Known answer: a 3.2 ms _copyto whose thread waited 3 ms of it for the GIL held by MainThread."""
    from opprof.trace.threadstates import ThreadState, ThreadStates

    spans = [Span("_copyto", "operator", 2, 0, 3_200_000), Span("_plus_scalar", "operator", 2, 4_000_000, 4_100_000)]
    states = ThreadStates(
        [1, 2, 2], [int(ThreadState.HELD), int(ThreadState.HELD), int(ThreadState.WAIT)],
        [0, 0, 100_000], [5_000_000, 100_000, 3_100_000], [-1, -1, 1], 1_000_000,
    )  # fmt: skip
    trace = Trace([ThreadInfo(1, "MainThread"), ThreadInfo(2, "opprof-engine-0")], spans, thread_states=states)
    assert trace.analysis().span_gil_wait.tolist() == [3_000_000, 0]
    tl = build_timeline(trace)
    d, texts, names = tl.source.data, tl.names.data["detail"], tl.names.data["name"]
    detail = {names[c]: texts[d["detail"][j]] for j, c in enumerate(d["name"])}
    assert detail == {"_copyto": "waited 3.00 ms of its 3.20 ms for the GIL", "_plus_scalar": ""}


def test_critical_path_toggle_outlines_exactly_the_paths_spans_and_hops_between_lanes(edges_tl, edges_trace: Trace) -> None:
    tl = edges_tl
    path = edges_trace.critical_path()
    assert not path.approximate and tl.path is not None and not tl.path.approximate
    lay = tl.layout
    rects = tl.path_source.data
    spans = np.asarray(rects["span"])
    assert set(spans.tolist()) == set(path.spans.tolist()) and len(path.spans) > 10
    # Every rectangle of every span on the path (a child's on its thread and in the band), once.
    on_path = np.isin(lay.span_index, path.spans)
    assert len(spans) == int(on_path.sum()) == tl.path_total == tl.path_drawn
    where = {
        (int(s), float(a), float(t)) for s, a, t in zip(lay.span_index[on_path], lay.left[on_path], lay.top[on_path], strict=True)
    }
    assert {(int(s), float(a), float(t)) for s, a, t in zip(spans, rects["left"], rects["top"], strict=True)} == where
    # Hops: between different lanes, forward in time, from and to rectangles of the path.
    e = tl.path_edges.data
    assert len(e["x0"]) > 0

    def lane(y: float) -> int:
        return next(k for k, ln in enumerate(lay.lanes) if ln.top <= y <= ln.top + ln.rows)

    mids = {round(float((tp + bt) / 2), 4) for tp, bt in zip(rects["top"], rects["bottom"], strict=True)}
    for x0, y0, x1, y1 in zip(e["x0"], e["y0"], e["x1"], e["y1"], strict=True):
        assert x0 <= x1 + 1e-9 and lane(y0) != lane(y1)
        assert round(float(y0), 4) in mids and round(float(y1), 4) in mids
    # Drawn, hidden until the toggle shows them, by a browser-side callback on exactly those.
    (outline,) = [r for r in tl.figure.renderers if r.name == "critical_path_outline"]
    (hops,) = [a for a in tl.figure.center if isinstance(a, Arrow)]
    assert outline.data_source is tl.path_source and hops.source is tl.path_edges
    assert tl.path_renderers == [outline, hops] and not outline.visible and not hops.visible
    assert outline.glyph.line_color == PATH_COLOR == hops.line_color
    toggle = tl.path_toggle
    assert isinstance(toggle, Toggle) and toggle.label == "critical path" and not toggle.active and not toggle.disabled
    (cb,) = toggle.js_property_callbacks["change:active"]
    assert isinstance(cb, CustomJS) and cb.args["renderers"] == [outline, hops] and "visible" in cb.code
    assert any(toggle in getattr(child, "children", []) for child in tl.root.children)  # placed with the figure
    # A tap selects spans only, never the outlines; the hover is the spans' too.
    (tap,) = [t for t in tl.figure.toolbar.tools if isinstance(t, TapTool)]
    (hover,) = [t for t in tl.figure.toolbar.tools if isinstance(t, HoverTool) and t.name != "gil_hover"]
    assert tap.renderers == hover.renderers and hover.renderers[0].data_source is tl.source


def test_trace_without_edges_gets_the_approximate_path_said_in_the_note() -> None:
    trace = synthetic_trace(5_000, seed=5)
    tl = build_timeline(trace)
    assert tl.path is not None and tl.path.approximate
    assert tl.path_toggle.label == "critical path (approximate)"
    assert tl.path.note in tl.note.text and "approximate" in tl.note.text
    assert set(np.asarray(tl.path_source.data["span"]).tolist()) == set(tl.path.spans.tolist())
    src = _bar_source(tl).data
    assert {"custom_pool", "unattributed"} <= set(src) and "dependency" not in src
    (legend,) = tl.bars.legend
    assert CAUSE_LABELS["unattributed"] in {item.label["value"] for item in legend.items}
    # A parent's hover: its waiting is custom_pool and unattributed, and nothing is named as a blocker.
    d, texts = tl.source.data, tl.names.data["detail"]
    parents = _drawn_parents(tl)
    assert parents and all(texts[d["blocker"][j]] == "" for j in parents)
    assert all("unattributed" in texts[d["why"][j]] for j in parents)
    assert all(set(texts[d["why"][j]].split(" ")) & {"custom_pool", "unattributed"} for j in parents)


def test_huge_trace_draws_a_bounded_path_and_the_widget_redraws_it_on_zoom(big: Trace) -> None:
    tl = build_timeline(big, width=800)
    assert tl.path is not None and tl.path_total > PATH_LIMIT
    assert tl.path_drawn == len(tl.path_source.data["span"]) == PATH_LIMIT
    assert f"of its {tl.path_total:,} rectangles drawn" in tl.note.text
    # The widest are kept.
    lay = tl.layout
    w = np.asarray(tl.path_source.data["right"]) - np.asarray(tl.path_source.data["left"])
    on_path = np.isin(lay.span_index, tl.path.spans)
    all_w = np.sort(lay.right[on_path] - lay.left[on_path])[::-1]
    assert w.min() >= all_w[PATH_LIMIT - 1] - 1e-9
    # Zoomed in (as the widget does on a range change): every path rectangle in the window.
    x0, x1 = lay.extent
    a, b = x0 + (x1 - x0) * 0.5, x0 + (x1 - x0) * 0.501
    tl.refresh(a, b)
    lo, hi = tl.window
    left, right = np.asarray(tl.path_source.data["left"]), np.asarray(tl.path_source.data["right"])
    inside = on_path & (lay.right >= lo) & (lay.left <= hi)
    assert 0 < tl.path_drawn == int(inside.sum()) < PATH_LIMIT
    assert np.all((right >= lo) & (left <= hi))


def test_critical_path_can_be_given_or_left_out_and_the_widget_computes_it_once(edges_trace: Trace, monkeypatch) -> None:
    none = build_timeline(edges_trace, critical_path=False)
    assert none.path is None and none.path_toggle is None and none.path_source is None
    assert not any(r.name == "critical_path_outline" for r in none.figure.renderers) and "critical path" not in none.note.text
    path = edges_trace.critical_path()
    given_path = build_timeline(edges_trace, critical_path=path)
    assert given_path.path is path
    calls = []
    real = Trace.critical_path

    def counting(self):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(self)

    monkeypatch.setattr(Trace, "critical_path", counting)
    w = TimelineWidget(edges_trace)
    w._repr_mimebundle_()  # the widget and its still picture compute no path before it is asked for
    assert calls == [] and w.timeline.path is None and w.timeline.path_toggle is not None
    assert w.timeline.path_summary is not None and "when first shown" in w.timeline.path_summary.text
    w.timeline.path_toggle.active = True  # what the browser's click sends: the path is computed, once
    w.timeline.path_toggle.active = False
    w.timeline.path_toggle.active = True
    assert len(calls) == 1 and w.timeline.path is not None
    assert w.timeline.path_drawn > 0 and len(w.timeline.path_source.data["span"]) == w.timeline.path_drawn
    assert "end to end" in w.timeline.path_summary.text and "critical path" in w.timeline.note.text
    assert w.timeline.path_toggle in w.timeline.root.children[1].children
    # Empty traces have no path and a disabled toggle, and still draw.
    empty = build_timeline(Trace())
    assert empty.path_toggle is not None and empty.path_toggle.disabled and empty.path_drawn == 0


# ---------------------------------------------------------------------------- the GIL strip
def _with_states(trace: Trace) -> Trace:
    """``trace`` (a copy: the fixture is shared) with hand-made thread states: each custom op's
    Python blocked for its first half and waiting for the GIL, held by the main thread, for its
    second; the main thread holding the GIL from its first span to its last."""
    from opprof.trace import Role
    from opprof.trace.threadstates import ThreadState, ThreadStates

    out = Trace(trace.threads, trace.table, trace.instants, trace.counters, trace.flow_table, trace.metadata, trace.ops)
    t = out.table
    main = next(th.tid for th in out.threads if th.name == "MainThread")
    on_main = np.flatnonzero(t.tid == main)
    rows = [(main, ThreadState.HELD, int(t.start[on_main].min()), int(t.end[on_main].max()), -1)]
    for i in np.flatnonzero(t.role_is(Role.PYTHON)).tolist():
        a, b, tid = int(t.start[i]), int(t.end[i]), int(t.tid[i])
        rows += [(tid, ThreadState.BLOCKED, a, (a + b) // 2, -1), (tid, ThreadState.WAIT, (a + b) // 2, b, main)]
    rows.sort(key=lambda r: (r[0], r[2]))
    # Back-to-back Pythons on one thread: each run ends where the next begins at the latest.
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)]
    out.thread_states = ThreadStates(*cols, period_ns=200_000)
    assert out.validate() == [], out.validate()
    return out


def _strip(tl):
    (r,) = tl.figure.select(name="gil_strip")
    return r


def test_the_gil_strip_lies_under_each_threads_lane_coloured_by_state_and_a_wait_names_its_holder(edges_trace) -> None:
    from opprof.trace.threadstates import STATE_LABELS, STATES, ThreadState
    from opprof.view.figure import STATE_COLORS

    trace = _with_states(edges_trace)
    tl = build_timeline(trace)
    ts = trace.thread_states
    d = tl.state_source.data
    assert tl.states_full and len(d["left"]) == len(ts)  # a small trace: every run drawn as itself
    # Each run where it happened, on its own thread's lane, in the gap under the lane's last row.
    lanes = {ln.tid: ln for ln in tl.layout.lanes if ln.kind == LaneKind.THREAD}
    labels = tl.state_lookup.data["thread"]
    by_label = {tl.layout.thread_labels[tid]: ln for tid, ln in lanes.items()}
    t0 = tl.layout.t0_ns
    want = sorted(zip(((ts.start - t0) / 1e3).tolist(), ((ts.end - t0) / 1e3).tolist(), strict=True))
    assert sorted(zip(np.asarray(d["left"]).tolist(), np.asarray(d["right"]).tolist(), strict=True)) == want
    for top, bottom, th in zip(d["top"], d["bottom"], d["thread"], strict=True):
        ln = by_label[labels[th]]
        assert ln.top + ln.rows < top < bottom < ln.top + ln.rows + LANE_GAP / 2
    # Colours: one per state, none a role's, in the palette the renderer maps ``c`` through.
    colors = [STATE_COLORS[s] for s in STATES]
    assert len(set(colors)) == len(STATES) and not set(colors) & set(ROLE_COLORS.values())
    assert list(_strip(tl).glyph.fill_color.transform.palette) == colors
    codes = Counter(STATES[c] for c in np.asarray(d["c"]).tolist())
    assert codes == Counter(ThreadState(s) for s in ts.state.tolist())
    # The hover of a wait names the thread that held the GIL; other runs say nothing more.
    details = tl.state_lookup.data["detail"]
    waits = [j for j, c in enumerate(d["c"]) if STATES[c] == ThreadState.WAIT]
    assert waits and all(details[d["detail"][j]].startswith("held by MainThread") for j in waits)
    assert all(details[d["detail"][j]] == "" for j in range(len(d["c"])) if j not in set(waits))
    (hover,) = tl.figure.select(name="gil_hover")
    assert hover.renderers == [_strip(tl)] and not any("{safe}" in v for _, v in hover.tooltips)
    assert hover.formatters["@c"].args["labels"] == [STATE_LABELS[s] for s in STATES]
    # Neither the spans' hover nor a tap picks the strip; the legend names each colour.
    assert all(_strip(tl) not in t.renderers for t in tl.figure.select({"type": TapTool}))
    legend = {item.label["value"]: _swatch(item) for item in tl.figure.legend[0].items}
    assert all(legend[f"GIL: {STATE_LABELS[s]}"] == STATE_COLORS[s] for s in STATES)
    assert "the GIL, as sampled" in tl.note.text


def test_a_wait_names_what_its_holder_ran(edges_trace) -> None:
    """The hover names the deepest span open on the holder thread at the middle of the wait, a wait
    left out (it runs no Python: a holder inside one ran the Python around it)."""
    from opprof.trace import Role
    from opprof.trace.ops import WAIT_ID_BASE
    from opprof.trace.threadstates import ThreadState, ThreadStates

    trace = Trace(edges_trace.threads, edges_trace.table, metadata=edges_trace.metadata)
    t = trace.table
    parent = t.role_is(Role.PARENT)  # no custom-op parent: it is no thread's span
    py = int(np.flatnonzero(t.role_is(Role.PYTHON))[0])
    holder, a, b = int(t.tid[py]), int(t.start[py]), int(t.end[py])
    spans = np.flatnonzero((t.tid == holder) & ~parent & (t.op < WAIT_ID_BASE)).tolist()
    deepest = [i for i in spans if t.start[i] <= (a + b) // 2 < t.end[i]]
    name = t.strings[t.name[min(deepest, key=lambda i: t.end[i] - t.start[i])]]
    waiter = next(th.tid for th in trace.threads if th.tid != holder)
    trace.thread_states = ThreadStates([waiter], [ThreadState.WAIT], [a], [b], [holder])
    tl = build_timeline(trace, critical_path=False)
    (text,) = [x for x in tl.state_lookup.data["detail"] if x]
    assert text == f"held by {trace.thread_names()[holder]}, running {name}"


def test_a_wait_whose_holder_had_no_cpu_says_for_what_share(edges_trace) -> None:
    """Known answer: the holder held the GIL off a CPU for the second 60 % of the wait (the OS gave
    its core to other work): the hover says 60 %; a holder off a CPU for 5 % of it says nothing."""
    from opprof.trace.threadstates import ThreadState, ThreadStates

    trace = Trace(edges_trace.threads, edges_trace.table, metadata=edges_trace.metadata)
    holder, waiter = (th.tid for th in trace.threads[:2])
    a, ms = int(trace.table.start.min()), 1_000_000
    texts = []
    for off_ns in (600_000, 50_000):
        trace.thread_states = ThreadStates(
            [waiter, holder, holder],
            [ThreadState.WAIT, ThreadState.HELD, ThreadState.HELD_OFF_CPU],
            [a, a, a + ms - off_ns],
            [a + ms, a + ms - off_ns, a + ms],
            [holder, -1, -1],
        )
        tl = build_timeline(trace, critical_path=False)
        texts.append([x for x in tl.state_lookup.data["detail"] if x.startswith("held by")])
    assert len(texts[0]) == 1 and texts[0][0].endswith(" (off a CPU 60% of it)"), texts
    assert len(texts[1]) == 1 and "off a CPU" not in texts[1][0], texts


def test_a_wait_does_not_name_a_holder_its_own_lane_shows_parked(edges_trace) -> None:
    """Known answer: a 1 ms wait names the thread that held the GIL as it began, and that thread
    parked halfway through it. The strip draws the wait in two pieces: the first half names it,
    the second says the holder is not known (the analysis's checked runs, not the raw ones)."""
    from opprof.trace.threadstates import STATES, ThreadState, ThreadStates

    trace = Trace(edges_trace.threads, edges_trace.table, metadata=edges_trace.metadata)
    holder, waiter = (th.tid for th in trace.threads[:2])
    a, ms = int(trace.table.start.min()), 1_000_000
    trace.thread_states = ThreadStates(
        [waiter, holder, holder],
        [ThreadState.WAIT, ThreadState.HELD, ThreadState.BLOCKED],
        [a, a, a + ms // 2],
        [a + ms, a + ms // 2, a + ms],
        [holder, -1, -1],
    )
    tl = build_timeline(trace, critical_path=False)
    d, texts = tl.state_source.data, tl.state_lookup.data["detail"]
    waits = [j for j in range(len(d["left"])) if d["c"][j] == STATES.index(ThreadState.WAIT)]
    pieces = sorted((d["left"][j], texts[d["detail"][j]]) for j in waits)
    assert len(pieces) == 2, pieces
    assert pieces[0][1].startswith(f"held by {trace.thread_names()[holder]}")
    assert pieces[1][1].startswith("holder not known"), pieces


def test_a_trace_without_thread_states_draws_no_strip(demo_trace) -> None:
    trace = Trace(demo_trace.threads, demo_trace.table, metadata=demo_trace.metadata)
    assert trace.thread_states is None
    tl = build_timeline(trace, critical_path=False)
    assert tl.state_source is None and tl.state_lookup is None
    assert not list(tl.figure.select(name="gil_strip")) and not list(tl.figure.select(name="gil_hover"))
    assert not [s for s in tl.root.select({"type": ColumnDataSource}) if s.name in ("gil_states", "gil_lookup")]
    labels = [item.label["value"] for item in tl.figure.legend[0].items]
    assert labels == [*(ROLE_LABELS[r] for r in ROLE_NAMES), "merged: pale = idle"]
    assert "GIL" not in tl.note.text


def test_the_gil_strip_merges_runs_narrower_than_a_pixel_and_the_widget_refines_it() -> None:
    """100,000 runs on 4 threads: the strip draws about a block per lane and pixel column, each of
    its main state, and every run drawn or in a block; zoomed in, runs are drawn as themselves."""
    from opprof.trace.threadstates import STATES, ThreadStates

    trace = synthetic_trace(2_000, seed=5)
    tab = trace.table
    lo, hi = int(tab.start.min()), int(tab.end.max())
    tids = sorted({int(x) for x in np.unique(tab.tid)})[:4]
    rng = np.random.default_rng(1)
    per = 25_000
    cols = []
    for tid in tids:
        edges = np.concatenate(([lo], np.sort(rng.integers(lo, hi, per - 1)), [hi]))
        state = np.where(np.arange(per) % 10 < 7, 1, rng.integers(2, 6, per))  # mostly held
        cols.append((np.full(per, tid), state, edges[:-1], edges[1:], np.where(state == 2, tids[0], -1)))
    trace.thread_states = ThreadStates(*(np.concatenate(c) for c in zip(*cols, strict=True)), period_ns=1_000)
    tl = build_timeline(trace, width=800, critical_path=False)
    d = tl.state_source.data
    assert not tl.states_full and len(d["left"]) <= len(tids) * (800 + 3)
    drawn = trace.analysis().thread_states  # the runs with holders checked: a wait split where its holder was parked
    assert drawn is not None and len(drawn) > len(trace.thread_states)
    assert int(np.sum(d["count"])) == len(drawn)  # every run drawn or merged, once
    merged = np.asarray(d["count"]) > 1
    assert merged.any() and (np.asarray(d["right"])[merged] - np.asarray(d["left"])[merged]).min() > 0
    assert Counter(np.asarray(d["c"])[merged].tolist()).most_common(1)[0][0] == 0  # held, the main state
    texts = tl.state_lookup.data["detail"]
    assert all("runs merged (zoom in)" in texts[k] for k in np.asarray(d["detail"])[merged].tolist())
    w = TimelineWidget(trace, width=800, picture=False, critical_path=False)
    x0, x1 = w.timeline.layout.extent
    span = (x1 - x0) / 50_000  # a few runs in view
    assert w.redraw(view=(x0 + (x1 - x0) / 2, x0 + (x1 - x0) / 2 + span))
    d = w.timeline.state_source.data
    assert len(d["left"]) and set(np.asarray(d["count"]).tolist()) == {1} and len(d["left"]) < 100
    assert set(np.asarray(d["c"]).tolist()) <= set(range(len(STATES)))
    w.close()


@pytest.mark.skipif(not __import__("opprof.engine.gil", fromlist=["AVAILABLE"]).AVAILABLE, reason="no GIL evidence here")
def test_a_python_that_sleeps_is_stacked_as_blocked_not_as_the_gil() -> None:
    """Known answer: a custom op whose Python sleeps 20 ms (the GIL released, off a CPU): the split
    bar stacks its off-CPU Python as blocked, not as waiting for the GIL."""
    from tests.profiler import test_gil_known_answers  # noqa: F401 - registers KnownNap

    opprof.set_engine("threaded", workers=2, custom_workers=1)
    try:
        x = nd.ones((4, 4))
        with opprof.profile() as prof:
            for _ in range(3):
                nd.Custom(x, op_type="KnownNap").wait_to_read()
    finally:
        opprof.set_engine("threaded")
    src = _bar_source(build_timeline(prof.trace)).data
    j = list(src["op"]).index("KnownNap")
    assert src["py_off_cpu"][j] >= 0.8 * 3 * 20  # ms
    assert src["py_off_blocked"][j] >= 0.8 * src["py_off_cpu"][j], {k: src[k][j] for k in src if k.startswith("py_")}
    assert src["py_off_gil"][j] <= 0.1 * src["py_off_cpu"][j]
