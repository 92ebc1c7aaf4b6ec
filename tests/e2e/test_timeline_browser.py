"""A saved timeline in a real browser: it draws, hovers, highlights a family, runs no injected code,
and its critical-path toggle shows and hides the path with no kernel; a parent's hover says why it waited;
merged blocks are shaded by how busy they are, and zoomed in with no kernel, bars carry their names.

Headless Debian Chromium through playwright (see ``chromium_page`` in conftest). Without Chromium
the test skips with the reason, or fails when ``CI`` is set. The screenshot is kept in the test's
tmp dir (pytest prints its path on failure; ``--basetemp`` puts it where you want).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from opprof.trace import Flow, Span, ThreadInfo, Trace
from opprof.view import save_html
from opprof.view.layout import ROLE_NAMES

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=2</script>"
ARG = "<svg onload=window.__pwned=3>"


def _malicious_trace() -> Trace:
    fam = {"op_type": "Evil", "invocation": 1, "backward": False}
    spans = [
        Span(IMG, "operator", 1, 0, 400_000, {"note": ARG}),
        Span(SCRIPT, "operator", 1, 500_000, 900_000),
        Span("Evil", "custom", 2, 100_000, 800_000, {**fam, "role": "parent"}),
        Span("Evil::pure_python", "custom", 3, 150_000, 400_000, {**fam, "role": "python"}),
        Span("Evil::_plus_scalar", "custom", 2, 450_000, 600_000, {**fam, "role": "subop"}),
        Span("Evil::Dummy_Wait", "custom", 2, 700_000, 800_000, {**fam, "role": "dummy_wait"}),
    ]
    threads = [ThreadInfo(1, "MainThread"), ThreadInfo(2, "opprof-engine-0"), ThreadInfo(3, "opprof-custom-0")]
    flows = [Flow(1, "Evil::_plus_scalar", "push", 3, 200_000, 2, 450_000)]
    return Trace(threads=threads, spans=spans, flows=flows)


_READY_JS = "() => window.Bokeh && Bokeh.documents.length > 0 && [...Bokeh.index].length > 0"

# The main figure's view, found by its title, with helpers to map data to page coordinates.
_FIND_JS = """
window.__tl = () => {
  const stack = [...Bokeh.index];
  while (stack.length) {
    const v = stack.pop();
    if (v.model.type === "Figure" && v.model.title && String(v.model.title.text).startsWith("opprof timeline")) return v;
    stack.push(...(v.child_views ?? []));
  }
  return null;
};
window.__src = (name) => window.__tl().model.renderers.find((r) => r.data_source.name === name).data_source;
window.__at = (x, y) => {
  const v = window.__tl(), r = v.canvas_view.el.getBoundingClientRect();
  return [r.left + v.frame.x_scale.compute(x), r.top + v.frame.y_scale.compute(y)];
};
"""

_PIXELS_JS = """
() => {
  const c = window.__tl().canvas_view.primary.canvas;
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let painted = 0;
  for (let i = 0; i < d.length; i += 4) { if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) painted++; }
  return painted;
}
"""


def _center(page: Any, index: int) -> tuple[float, float]:
    """Page coordinates of the middle of drawn rectangle ``index``."""
    return page.evaluate(
        """(i) => { const d = window.__src("spans").data;
                    return window.__at((d.left[i] + d.right[i]) / 2, (d.top[i] + d.bottom[i]) / 2); }""",
        index,
    )


def _open_painted(page: Any, path: Path) -> None:
    """Open a saved timeline and wait until its main canvas is painted."""
    page.goto(path.as_uri())
    page.wait_for_function(_READY_JS)
    page.evaluate(_FIND_JS)
    page.wait_for_function("() => window.__tl() && window.__tl().canvas_view")
    page.wait_for_timeout(300)
    assert page.evaluate(_PIXELS_JS) > 2000, "the main canvas looks blank"


def test_saved_timeline_draws_hovers_and_runs_no_injected_code(chromium_page, tmp_path: Path) -> None:
    page, console, page_errors = chromium_page
    trace = _malicious_trace()
    assert trace.validate() == []
    path = tmp_path / "timeline.html"
    tl = save_html(trace, str(path))
    html = path.read_text()
    assert "cdn.bokeh.org" not in html and "<script src=" not in html  # inline resources: opens offline

    page.goto(path.as_uri())
    page.wait_for_function(_READY_JS)
    page.evaluate(_FIND_JS)
    page.wait_for_function("() => window.__tl() && window.__tl().canvas_view")
    page.wait_for_timeout(300)
    painted = page.evaluate(_PIXELS_JS)
    assert painted > 2000, f"the main canvas looks blank ({painted} painted pixels)"

    # Hover the span named like an <img> tag: the tooltip shows the literal text, nothing runs.
    names = tl.names.data["name"]
    img_row = next(i for i, c in enumerate(tl.source.data["name"]) if names[c] == IMG)
    x, y = _center(page, img_row)
    page.mouse.move(x, y)
    tip = page.get_by_text(IMG, exact=False)
    tip.first.wait_for(state="visible", timeout=10_000)
    tip_text = tip.first.inner_text()
    assert IMG in tip_text
    assert page.get_by_text(ARG, exact=False).first.is_visible()  # args shown as text too
    page.screenshot(path=str(tmp_path / "timeline-hover.png"))

    # Hover the <script> span too, then click the python span: its whole family lights up.
    x, y = _center(page, next(i for i, c in enumerate(tl.source.data["name"]) if names[c] == SCRIPT))
    page.mouse.move(x, y)
    page.get_by_text(SCRIPT, exact=False).first.wait_for(state="visible", timeout=10_000)
    py_row = next(i for i, c in enumerate(tl.source.data["name"]) if names[c] == "Evil::pure_python")
    x, y = _center(page, py_row)
    page.mouse.click(x, y)
    page.wait_for_function("""() => window.__src("spans").selected.indices.length > 1""")
    selected = page.evaluate("""() => window.__src("spans").selected.indices""")
    family = [i for i, inv in enumerate(tl.source.data["inv"]) if inv == 1]
    assert sorted(selected) == family and len(family) == 7  # parent + 3 children on threads + 3 copies in the band
    flows = page.evaluate("""() => window.__src("flows").data.x0.length""")
    assert flows == 1
    page.mouse.move(5, 5)
    page.wait_for_timeout(200)
    page.screenshot(path=str(tmp_path / "timeline.png"), full_page=True)

    assert page.evaluate("() => window.__pwned") is None
    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)
    print(f"\nscreenshots: {tmp_path / 'timeline.png'}, {tmp_path / 'timeline-hover.png'}")


def test_a_thousand_threads_draw_collapsed_with_the_note_and_hover_names_each_thread(chromium_page, tmp_path: Path) -> None:
    """Past max_lanes the saved timeline shows the busiest lanes, one collapsed lane and the note
    saying so; hovering a span in the collapsed lane names that span's own thread."""
    from opprof.trace.synthetic import many_threads_trace

    page, console, page_errors = chromium_page
    trace = many_threads_trace(1_000)
    path = tmp_path / "threads.html"
    tl = save_html(trace, str(path), max_lanes=40)
    assert tl.layout.collapsed_threads == 961
    _open_painted(page, path)
    assert page.get_by_text("961 threads share the lane", exact=False).first.is_visible()
    # A span drawn in the collapsed lane, hovered: the tooltip names its own worker thread.
    collapsed_top = tl.layout.lanes[-1].top
    drawn = zip(tl.source.data["top"], tl.source.data["count"], strict=True)
    rows = [i for i, (top, n) in enumerate(drawn) if n == 1 and top >= collapsed_top]
    assert rows, "a single span drawn in the collapsed lane"
    i = rows[0]
    thread = tl.names.data["thread"][tl.source.data["thread"][i]]
    x, y = _center(page, i)
    page.mouse.move(x, y)
    tip = page.get_by_text(thread, exact=True)
    tip.first.wait_for(state="visible", timeout=10_000)
    assert thread.startswith("worker-")
    page.screenshot(path=str(tmp_path / "threads.png"))
    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)


def test_a_trace_of_several_processes_draws_its_lanes_by_process_and_hover_names_the_process(
    chromium_page, tmp_path: Path
) -> None:
    """A trace merged from three processes: lanes grouped by process with a line between them, and
    hovering a span names its thread with its process first."""
    from opprof.trace.synthetic import synthetic_trace

    page, console, page_errors = chromium_page
    trace = synthetic_trace(600, processes=3, engine_threads=2, custom_threads=1)
    path = tmp_path / "processes.html"
    tl = save_html(trace, str(path))
    _open_painted(page, path)
    assert page.evaluate("""() => window.__tl().model.renderers.some((r) => r.name === "process_separators")""")
    # The widest span of worker-2's main thread, hovered: the tooltip says its process and thread.
    label = "worker-2 · MainThread"
    lane = next(k for k, ln in enumerate(tl.layout.lanes) if ln.label == label)
    data = tl.source.data
    on_lane = [i for i, top in enumerate(data["top"]) if tl.layout.lanes[lane].top <= top < tl.layout.lanes[lane].top + 1]
    i = max(on_lane, key=lambda i: data["right"][i] - data["left"][i])
    assert tl.names.data["thread"][data["thread"][i]] == label
    x, y = _center(page, i)
    page.mouse.move(x, y)
    page.get_by_text(label, exact=True).first.wait_for(state="visible", timeout=10_000)
    page.screenshot(path=str(tmp_path / "processes.png"))
    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)
    print(f"\nscreenshot: {tmp_path / 'processes.png'}")


# ---------------------------------------------------------------------------- why ops wait, critical path
_PATH_JS = """
window.__model = (name) => Bokeh.documents[0].get_model_by_name(name);
window.__magenta = () => {
  // Pixels of the critical path's colour (#e6007e) on the main figure's canvas.
  const c = window.__tl().canvas_view.primary.canvas;
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 0 && d[i] > 180 && d[i + 1] < 90 && d[i + 2] > 80 && d[i + 2] < 180) n++;
  }
  return n;
};
"""


def _profiled_trace() -> Trace:
    """The demo under the profiler on the threaded engine: a trace with the engine's edges."""
    import opprof
    import opprof.demo

    opprof.set_engine("threaded", workers=2, custom_workers=2)
    try:
        with opprof.profile() as prof:
            opprof.demo.train(2)
    finally:
        opprof.set_engine("threaded")
    trace = prof.trace
    assert trace is not None and trace.validate() == [] and trace.waiting_causes().has_edges
    return trace


def test_critical_path_toggle_shows_and_hides_the_path_and_the_hover_says_why_ops_waited(chromium_page, tmp_path: Path) -> None:
    page, console, page_errors = chromium_page
    trace = _profiled_trace()
    path = tmp_path / "why.html"
    tl = save_html(trace, str(path))
    assert tl.path is not None and not tl.path.approximate and tl.path_drawn > 0 and len(tl.path_edges.data["x0"]) > 0
    page.goto(path.as_uri())
    page.wait_for_function(_READY_JS)
    page.evaluate(_FIND_JS)
    page.evaluate(_PATH_JS)
    page.wait_for_function("() => window.__tl() && window.__tl().canvas_view")
    page.wait_for_timeout(300)

    # Off: the outlines and hops exist in the document but are hidden, and no pixel has their colour.
    state = """() => ["critical_path_outline", "critical_path_hops"].map((n) => __model(n).visible)
                       .concat([__model("critical_path_toggle").active])"""
    assert page.evaluate(state) == [False, False, False]
    assert page.evaluate("() => __model('critical_path_outline').data_source.data.span.length") == tl.path_drawn
    # Anti-aliased edges of other colours land near magenta too: a few hundred pixels at most.
    before = page.evaluate("() => window.__magenta()")
    assert before < 300, before
    page.screenshot(path=str(tmp_path / "path-off.png"), full_page=True)

    # On: one click, in the browser only (this page has no kernel), draws them.
    toggle = page.get_by_role("button", name="critical path")
    toggle.click()
    page.wait_for_function("() => __model('critical_path_outline').visible && __model('critical_path_hops').visible")
    page.wait_for_function(f"() => window.__magenta() > {before + 1500}")
    assert page.evaluate(state) == [True, True, True]
    page.screenshot(path=str(tmp_path / "path-on.png"), full_page=True)

    # Off again.
    toggle.click()
    page.wait_for_function("() => !__model('critical_path_outline').visible && !__model('critical_path_hops').visible")
    page.wait_for_function(f"() => window.__magenta() <= {before + 20}")
    assert page.evaluate(state) == [False, False, False]

    # Hover a custom-op parent on its own row of the band: its waiting by cause and top blocker.
    d, texts = tl.source.data, tl.names.data["detail"]
    parent = ROLE_NAMES.index("parent")
    rows = [j for j, c in enumerate(d["c"]) if c == parent and texts[d["blocker"][j]]]
    j = max(rows, key=lambda i: d["right"][i] - d["left"][i])
    why, blocker = texts[d["why"][j]], texts[d["blocker"][j]]
    assert "custom_pool" in why and blocker.startswith("dependency ")
    x, y = page.evaluate(
        "(i) => { const d = window.__src('spans').data; return window.__at((d.left[i] + d.right[i]) / 2, d.top[i] + 0.45); }", j
    )
    page.mouse.move(x, y)
    page.get_by_text(why, exact=False).first.wait_for(state="visible", timeout=10_000)
    assert page.get_by_text(blocker, exact=False).first.is_visible()
    assert page.get_by_text("on CPU", exact=False).first.is_visible()
    page.screenshot(path=str(tmp_path / "parent-hover.png"))

    # Hover a sub-op its custom op's Python pushed: the user's file and line.
    sites = [i for i, c in enumerate(d["detail"]) if re.fullmatch(r"pushed at [^/\\]+\.py:\d+", texts[c]) and d["c"][i] != parent]
    i = max(sites, key=lambda k: d["right"][k] - d["left"][k])
    page.evaluate(
        """(i) => { const d = window.__src('spans').data, r = window.__tl().model.x_range, w = d.right[i] - d.left[i];
                    r.start = d.left[i] - 2 * w; r.end = d.right[i] + 2 * w; }""",
        i,
    )
    page.wait_for_timeout(300)
    page.mouse.move(5, 5)
    x, y = _center(page, i)
    page.mouse.move(x, y)
    page.get_by_text(texts[d["detail"][i]], exact=True).first.wait_for(state="visible", timeout=10_000)
    page.screenshot(path=str(tmp_path / "subop-hover.png"))

    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)
    print(f"\nscreenshots: {tmp_path}")


# ---------------------------------------------------------------------------- level of detail, names on the bars
def _busy_and_named_trace() -> Trace:
    """1 s on three threads: "sparse" busy 1 µs in every 100 (1 %), "dense" busy throughout, and
    "main" with a few named spans half way (times in µs x 1000)."""
    n = 10_000
    spans = [Span("tick", "c", 1, k * 100_000, k * 100_000 + 1_000) for k in range(n)]
    spans += [Span("work", "c", 2, k * 100_000, (k + 1) * 100_000) for k in range(n)]
    named = [
        ("ScaledTanh::pure_python", 0, 1200),
        ("elemwise_add", 1200, 1380),
        ("_copyto", 1800, 3000),
        ("RowSquaredError", 3150, 3900),
    ]
    spans += [Span(name, "c", 3, (500_000 + a) * 1000, (500_000 + b) * 1000) for name, a, b in named]
    threads = [ThreadInfo(1, "sparse"), ThreadInfo(2, "dense"), ThreadInfo(3, "main")]
    return Trace(threads=threads, spans=spans)


# Mean colour of the main canvas along data row y (across the frame), and the labels as laid out.
_LOD_JS = """
window.__model = (name) => Bokeh.documents[0].get_model_by_name(name);
window.__row = (y) => {
  const v = window.__tl(), c = v.canvas_view.primary.canvas, k = c.width / v.canvas_view.bbox.width;
  const f = v.frame.bbox, py = Math.round(v.frame.y_scale.compute(y) * k);
  const d = c.getContext("2d").getImageData(Math.round(f.left * k), py, Math.round(f.width * k), 1).data;
  const m = [0, 0, 0];
  for (let i = 0; i < d.length; i += 4) { for (let j = 0; j < 3; j++) m[j] += d[i + j]; }
  return m.map((s) => s / (d.length / 4));
};
window.__labels = () => {
  // Each label with the visible width of its rectangle (px) and its text's measured width (px).
  const v = window.__tl(), l = __model("span_labels").data, s = window.__src("spans").data, xr = v.model.x_range;
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = "11px helvetica";
  const sx = (x) => v.frame.x_scale.compute(x);
  return l.text.map((t, k) => {
    const i = l.i[k], a = Math.max(s.left[i], xr.start), z = Math.min(s.right[i], xr.end);
    return {text: t, room: sx(z) - sx(a), width: ctx.measureText(t).width, y: l.y[k], top: s.top[i], bottom: s.bottom[i]};
  });
};
"""


def test_merged_blocks_are_shaded_by_busy_share_and_zoomed_bars_carry_their_names(chromium_page, tmp_path: Path) -> None:
    page, console, page_errors = chromium_page
    trace = _busy_and_named_trace()
    path = tmp_path / "lod.html"
    tl = save_html(trace, str(path), detail_limit=1_000, critical_path=False)
    assert tl.merged > 15_000
    page.goto(path.as_uri())
    page.wait_for_function(_READY_JS)
    page.evaluate(_FIND_JS)
    page.evaluate(_LOD_JS)
    page.wait_for_function("() => window.__tl() && window.__tl().canvas_view")
    page.wait_for_timeout(300)

    # Zoomed out: the 1 %-busy row is a faint wash of the op colour (#4e79a7), the busy one solid.
    lanes = {ln.label: ln for ln in tl.layout.lanes}
    sparse = page.evaluate("(y) => window.__row(y)", lanes["sparse"].top + 0.5)
    dense = page.evaluate("(y) => window.__row(y)", lanes["dense"].top + 0.5)
    assert min(sparse) > 200 and sparse[0] < 250, sparse  # alpha ~0.16-0.25: R ~ 255 - 0.2 * 177
    assert dense[0] < 110 and dense[2] < 190, dense  # #4e79a7 = (78, 121, 167)
    assert page.evaluate("() => __model('span_labels').data.text.length") == 0  # nothing wide enough
    page.screenshot(path=str(tmp_path / "lod-zoomed-out.png"))

    # Hover a merged block of the sparse row: how many spans, and how busy.
    d = tl.source.data
    top = lanes["sparse"].top
    rows = [i for i, (t, n) in enumerate(zip(d["top"], d["count"], strict=True)) if n > 1 and top <= t < top + 1]
    i = rows[len(rows) // 4]
    x, y = _center(page, i)
    page.mouse.move(x, y)
    tip = page.get_by_text(re.compile(r"\d+ spans merged, (1|0\.9)% busy"))
    tip.first.wait_for(state="visible", timeout=10_000)
    page.screenshot(path=str(tmp_path / "lod-hover.png"))
    page.mouse.move(5, 5)

    # Zoom in the browser (no kernel) to the named spans: their names appear, each fitting its bar.
    page.evaluate("() => { const r = window.__tl().model.x_range; r.start = 500300; r.end = 503300; }")
    page.wait_for_function("() => __model('span_labels').data.text.length > 0")
    page.wait_for_timeout(300)
    labels = page.evaluate("() => window.__labels()")
    texts = [lb["text"] for lb in labels]
    assert "ScaledTanh::pure_python" in texts and "_copyto" in texts, texts
    assert any(t.startswith("Row") and t.endswith("…") for t in texts), texts  # 150 µs of it on screen: cut
    assert any(t.startswith("elem") and t.endswith("…") for t in texts), texts  # alone in its pixel: drawn, named
    for lb in labels:
        assert lb["width"] + 2 * 3 <= lb["room"] + 0.5, lb  # the text fits its bar's visible part
        assert lb["top"] <= lb["y"] <= lb["bottom"]
    assert page.evaluate("() => __model('span_labels_text').visible") is True
    # Pixels: black text (all channels < 60) inside the ScaledTanh bar, which is #4e79a7 otherwise.
    k = texts.index("ScaledTanh::pure_python")
    dark = page.evaluate(
        """(y) => {
          const v = window.__tl(), c = v.canvas_view.primary.canvas, s = c.width / v.canvas_view.bbox.width;
          const f = v.frame.bbox, py = Math.round(v.frame.y_scale.compute(y) * s);
          const d = c.getContext("2d").getImageData(Math.round(f.left * s), py - 6 * s, Math.round(220 * s), 12 * s).data;
          let n = 0;
          for (let i = 0; i < d.length; i += 4) { if (d[i] < 60 && d[i + 1] < 60 && d[i + 2] < 60) n++; }
          return n;
        }""",
        labels[k]["y"],
    )
    assert dark > 100, dark
    page.screenshot(path=str(tmp_path / "lod-names.png"))
    # Zoomed out again: the names go.
    page.evaluate("() => { const r = window.__tl().model.x_range; r.start = -10000; r.end = 1010000; }")
    page.wait_for_function("() => __model('span_labels').data.text.length === 0")

    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)
    print(f"\nscreenshots: {tmp_path}")


# ---------------------------------------------------------------------------- the GIL strip
_GIL_RED_JS = """
() => {
  // Pixels of the strip's "waits for the GIL" colour (#8b1e3f) on the main figure's canvas.
  const c = window.__tl().canvas_view.primary.canvas;
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 0 && Math.abs(d[i] - 139) < 20 && Math.abs(d[i + 1] - 30) < 20 && Math.abs(d[i + 2] - 63) < 20) n++;
  }
  return n;
}
"""


def test_the_gil_strip_draws_and_a_waits_hover_names_its_holder_as_text(chromium_page, tmp_path: Path) -> None:
    import numpy as np

    from opprof.trace.threadstates import ThreadState as S
    from opprof.trace.threadstates import ThreadStates

    page, console, page_errors = chromium_page
    trace = _malicious_trace()
    runs = [
        (1, S.HELD, 0, 400_000, -1), (1, S.BLOCKED, 400_000, 500_000, -1), (1, S.HELD, 500_000, 900_000, -1),
        (2, S.BLOCKED, 0, 450_000, -1), (2, S.RUNNING, 450_000, 600_000, -1), (2, S.RUNNABLE, 600_000, 700_000, -1),
        (3, S.HELD, 150_000, 250_000, -1), (3, S.WAIT, 250_000, 400_000, 1),
    ]  # fmt: skip
    trace.thread_states = ThreadStates(*(np.array(c, dtype=np.int64) for c in zip(*runs, strict=True)), period_ns=1_000)
    assert trace.validate() == []
    path = tmp_path / "gil.html"
    tl = save_html(trace, str(path))
    assert tl.state_source is not None and len(tl.state_source.data["left"]) == len(runs)
    _open_painted(page, path)
    assert page.evaluate("() => window.__src('gil_states').data.left.length") == len(runs)
    assert page.evaluate(_GIL_RED_JS) > 100, "the wait's red is not on the canvas"
    # Hover the wait: its holder and what the holder ran, the span named like an <img> tag, as text.
    d = tl.state_source.data
    (j,) = [i for i, c in enumerate(d["detail"]) if tl.state_lookup.data["detail"][c]]
    x, y = page.evaluate(
        """(i) => { const d = window.__src('gil_states').data;
                    return window.__at((d.left[i] + d.right[i]) / 2, (d.top[i] + d.bottom[i]) / 2); }""",
        j,
    )
    page.mouse.move(x, y)
    tip = page.get_by_text(f"held by MainThread, running {IMG}", exact=False)
    tip.first.wait_for(state="visible", timeout=10_000)
    assert page.get_by_text("waits for the GIL", exact=False).first.is_visible()
    page.screenshot(path=str(tmp_path / "gil-hover.png"))
    assert page.evaluate("() => window.__pwned") is None
    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)
    print(f"\nscreenshot: {tmp_path / 'gil-hover.png'}")


# ---------------------------------------------------------------------------- make demo's picture
def test_the_demos_timeline_shows_the_causes_and_the_exact_critical_path(chromium_page, tmp_path: Path) -> None:
    """`opprof demo` (what `make demo` runs) prints why each custom op waits and an exact critical
    path; its timeline.html must show the same, not the approximation of a trace without edges."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "opprof.cli", "demo", "--steps", "3", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "timeline written to" in r.stdout and "critical path" in r.stdout.lower()
    page, console, page_errors = chromium_page
    _open_painted(page, tmp_path / "timeline.html")
    page.evaluate(_PATH_JS)
    # Exact: the toggle does not say "approximate", and nothing on the page apologises for edges.
    assert page.evaluate("() => __model('critical_path_toggle').label") == "critical path"
    text = page.evaluate("() => document.body.innerText")
    assert "approximate" not in text and "no recorded engine edges" not in text
    # The causes: every parent's hover names its waiting by opprof's causes, none "unattributed".
    why = page.evaluate(
        """() => { const s = window.__src("spans").data, t = __model("lookup").data.detail;
                   return [...new Set(Array.from(s.why, (k) => t[k]).filter((x) => x))]; }"""
    )
    assert why, "no parent carries its causes"
    assert not any("unattributed" in w for w in why), why
    assert any(c in " ".join(why) for c in ("custom_pool", "subop_queue", "dependency", "completion")), why
    toggle = page.get_by_role("button", name="critical path")
    toggle.click()
    page.wait_for_function("() => __model('critical_path_outline').visible")
    assert page.evaluate("() => __model('critical_path_outline').data_source.data.span.length") > 0
    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)


# The memory lane's view (found by its title) and the page position of its step ``k``.
_MEMORY_JS = """(k) => {
  const stack = [...Bokeh.index];
  let v = null;
  while (stack.length && !v) {
    const w = stack.pop();
    if (w.model.type === "Figure" && w.model.title && String(w.model.title.text).startsWith("memory:")) v = w;
    else stack.push(...(w.child_views ?? []));
  }
  if (!v || !v.canvas_view) return null;
  v.canvas_view.el.scrollIntoView({block: "center"});
  const src = v.model.renderers[0].data_source, d = src.data, r = v.canvas_view.el.getBoundingClientRect();
  const c = v.canvas_view.primary.canvas, px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let painted = 0;
  for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && (px[i] < 235 || px[i + 1] < 235 || px[i + 2] < 235)) painted++;
  return {title: v.model.title.text, n: d.x.length, painted,
          at: [r.left + v.frame.x_scale.compute(d.x[k]), r.top + v.frame.y_scale.compute(d.mb[k])]};
}"""


def test_the_memory_lane_draws_under_the_spans_and_its_hover_says_bytes_and_op(chromium_page, tmp_path: Path) -> None:
    """A profile with memory: a lane of live bytes on the figure's time axis; hovering the peak
    gives its bytes and the op whose array made it."""
    import opprof
    import opprof as mx

    page, console, page_errors = chromium_page
    with opprof.profile(memory=True) as prof:
        a = mx.nd.ones((1000, 1000))
        for k in range(5):
            a = a + k
        a.wait_to_read()
    path = tmp_path / "memory.html"
    tl = save_html(prof.trace, str(path))
    assert tl.memory_figure is not None
    _open_painted(page, path)
    peak = max(
        range(len(tl.memory_figure.renderers[0].data_source.data["mb"])),
        key=lambda k: tl.memory_figure.renderers[0].data_source.data["mb"][k],
    )
    lane = page.evaluate(_MEMORY_JS, peak)
    assert lane is not None and lane["title"].endswith("(peak 8.0 MB)") and lane["painted"] > 300, lane
    page.mouse.move(*lane["at"])
    tip = page.get_by_text("8.0 MB", exact=False)
    tip.first.wait_for(state="visible", timeout=10_000)
    assert page.get_by_text("_plus_scalar", exact=False).first.is_visible()
    page.screenshot(path=str(tmp_path / "memory-hover.png"))
    errors = [text for kind, text in console if kind == "error"]
    assert errors == [] and page_errors == [], (errors, page_errors)
