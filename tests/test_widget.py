"""The widget without a browser (as ipympl tests its widget): drive the controls in Python, feed
BokehJS-style events to the BokehModel, and check the drawn columns and the comm's messages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opprof
from opprof.jupyter import load_bokehjs
from opprof.trace import Trace
from opprof.trace.synthetic import synthetic_trace
from opprof.trace.text import text_summary as summary
from opprof.view import TimelineWidget
from opprof.view.layout import ROLE_NAMES

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def small() -> Trace:
    return synthetic_trace(2_000, seed=2)


@pytest.fixture
def widget(small: Trace) -> TimelineWidget:
    return opprof.timeline(small, width=800)


@pytest.fixture(scope="module")
def big() -> Trace:
    return synthetic_trace(150_000, seed=4)


def _names(w: TimelineWidget) -> list[str]:
    tl = w.timeline
    return [tl.names.data["name"][c] for c in tl.source.data["name"]]


def _sent(w: TimelineWidget, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Capture what BokehModel sends over the comm (there is no kernel)."""
    sent: list[Any] = []
    monkeypatch.setattr(w.bokeh, "send", lambda content, buffers=None: sent.append((content, buffers)))
    return sent


def test_name_filter_substring_and_regex(widget: TimelineWidget, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _sent(widget, monkeypatch)
    everything = len(widget.timeline.source.data["left"])
    widget.name_filter.value = "Dummy_Wait"
    names = _names(widget)
    assert names and all("Dummy_Wait" in n for n in names)
    assert any(c.get("msg") == "patch" for c, _ in sent)  # the new columns went to the browser
    widget.regex.value = True
    widget.name_filter.value = r"^ScaledTanh::(pure_python|Dummy_Wait)$"
    assert set(_names(widget)) == {"ScaledTanh::pure_python", "ScaledTanh::Dummy_Wait"}
    widget.name_filter.value = "(unclosed"
    assert widget.status.value.startswith("bad regex")
    widget.name_filter.value = ""
    assert len(widget.timeline.source.data["left"]) == everything
    assert not widget.status.value.startswith("bad regex")


def test_role_toggles_and_lane_picker(widget: TimelineWidget) -> None:
    tl = widget.timeline
    widget.role_toggles["subop"].value = False
    widget.role_toggles["op"].value = False
    codes = set(np.asarray(tl.source.data["c"]).tolist())
    assert codes and not codes & {ROLE_NAMES.index("subop"), ROLE_NAMES.index("op")}
    widget.role_toggles["subop"].value = True
    widget.role_toggles["op"].value = True
    labels = [ln.label for ln in tl.layout.lanes]
    widget.lanes.value = (labels.index("MainThread"),)
    assert {tl.names.data["thread"][t] for t in tl.source.data["thread"]} == {"MainThread"}
    assert all(n.startswith("step ") for n in _names(widget))


def test_table_selection_highlights_those_spans(widget: TimelineWidget) -> None:
    tl = widget.timeline
    names = list(tl.table_source.data["name"])
    k = next(i for i, n in enumerate(names) if n.endswith("::pure_python"))
    tl.table_source.selected.indices = [k]
    sel = tl.source.selected.indices
    drawn = _names(widget)
    assert sel and {drawn[i] for i in sel} == {names[k]}
    assert len(sel) == sum(1 for n in drawn if n == names[k])
    # It survives a redraw (a filter that keeps those spans).
    widget.name_filter.value = "pure_python"
    assert {_names(widget)[i] for i in tl.source.selected.indices} == {names[k]}


def test_table_is_sortable_and_split_bars_per_op_type(widget: TimelineWidget, small: Trace) -> None:
    tl = widget.timeline
    assert tl.table.sortable
    totals = list(tl.table_source.data["total_ms"])
    assert totals == sorted(totals, reverse=True)
    (src,) = {r.data_source for r in tl.bars.renderers}
    parents = {s.name for s in small.spans if s.role == "parent"}
    assert set(src.data["op"]) == parents
    for j, op in enumerate(src.data["op"]):
        wall = sum(s.dur for s in small.spans if s.name == op and s.role == "parent") / 1e6
        parts = src.data["python"][j] + src.data["sub-ops"][j] + src.data["waiting"][j]
        assert parts == pytest.approx(wall, rel=1e-6)


def test_range_change_refines_level_of_detail_idempotently(big: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    w = TimelineWidget(big, width=600)
    tl = w.timeline
    assert not tl.full_detail and tl.merged > 0
    xr = tl.figure.x_range
    sent = _sent(w, monkeypatch)
    before = tl.source.data
    # BokehJS echoes the initial range on first render: nothing to recompute.
    xr.start = xr.start
    xr.end = xr.end
    assert tl.source.data is before and not sent
    # Zoom to 1/200 of the trace, as BokehJS reports it over the comm.
    x0, x1 = tl.layout.extent
    c, half = (x0 + x1) / 2, (x1 - x0) / 400
    for attr, value in (("start", c - half), ("end", c + half)):
        w.bokeh._sync_model(
            w.bokeh, {"event": "jsevent", "kind": "ModelChanged", "model": {"id": xr.id}, "attr": attr, "new": value}, []
        )
    assert xr.start == c - half and xr.end == c + half
    assert tl.source.data is not before and tl.merged < 1_000
    lo, hi = tl.window
    assert lo <= c - half and hi >= c + half
    left = np.asarray(tl.source.data["left"])
    right = np.asarray(tl.source.data["right"])
    assert np.all((right >= lo) & (left <= hi))
    assert any(msg.get("msg") == "patch" for msg, _ in sent)
    refined = tl.source.data
    xr.start = c - half * 0.95  # a small pan/zoom inside the computed window: no new data
    assert tl.source.data is refined
    assert "rectangles" in w.status.value


def test_mimebundle_falls_back_to_static_html_and_text(widget: TimelineWidget, small: Trace) -> None:
    bundle = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == summary(small)
    assert re.search(r"2,\d{3} spans on 7 threads", bundle["text/plain"])
    html = bundle["text/html"]
    assert "Bokeh" in html and "cdn.bokeh.org" not in html and "<div" in html
    no_html = TimelineWidget(small, static_html=False)._repr_mimebundle_()
    assert "text/html" not in no_html


def test_save_writes_offline_html(widget: TimelineWidget, tmp_path: Path) -> None:
    path = tmp_path / "timeline.html"
    widget.save(str(path))
    text = path.read_text()
    assert "cdn.bokeh.org" not in text and "opprof timeline" in text


def test_load_bokehjs_needs_a_kernel() -> None:
    assert load_bokehjs() is False  # no IPython kernel in pytest: nothing to load into


def test_load_bokehjs_emits_inline_resources_once_per_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import bokeh.io
    import IPython

    import opprof.jupyter.bokehjs as widget_module

    calls: list[Any] = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(kernel=object()))
    monkeypatch.setattr(bokeh.io, "output_notebook", lambda resources=None, **kw: calls.append(resources))
    monkeypatch.setattr(widget_module, "_loaded", False)
    assert widget_module.load_bokehjs(once=True) is True
    assert widget_module.load_bokehjs(once=True) is False  # opprof.timeline() does not re-emit 8 MB
    assert widget_module.load_bokehjs() is True  # explicit: after a page reload
    assert len(calls) == 2 and all(r.mode == "inline" for r in calls)
