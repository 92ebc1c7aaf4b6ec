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


def test_the_lane_picker_names_each_lanes_process() -> None:
    w = opprof.timeline(synthetic_trace(2_000, seed=2, processes=2), width=800)
    tl = w.timeline
    labels = [label for label, _ in w.lanes.options]
    assert labels[:1] == ["client · MainThread"] and "worker-1 · MainThread" in labels
    w.lanes.value = (labels.index("worker-1 · MainThread"),)
    assert {tl.names.data["thread"][t] for t in tl.source.data["thread"]} == {"worker-1 · MainThread"}


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


def _model_changed(w: TimelineWidget, model: Any, attr: str, value: Any) -> None:
    """A property change as BokehJS reports it over the comm."""
    msg = {"event": "jsevent", "kind": "ModelChanged", "model": {"id": model.id}, "attr": attr, "new": value}
    w.bokeh._sync_model(w.bokeh, msg, [])


def _ranges_update(w: TimelineWidget, x0: float, x1: float) -> None:
    """What BokehJS sends when a zoom, pan or reset ends: one RangesUpdate event with both ends."""
    fig = w.timeline.figure
    entries = [["model", {"id": fig.id}], ["x0", x0], ["x1", x1], ["y0", fig.y_range.start], ["y1", fig.y_range.end]]
    event = {"type": "event", "name": "rangesupdate", "values": {"type": "map", "entries": entries}}
    w.bokeh._sync_model(w.bokeh, {"event": "jsevent", "kind": "MessageSent", "msg_type": "bokeh_event", "msg_data": event}, [])


def test_each_range_change_refines_once_from_its_rangesupdate(big: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    from bokeh.events import RangesUpdate

    w = TimelineWidget(big, width=600)
    tl = w.timeline
    assert not tl.full_detail and tl.merged > 0
    xr = tl.figure.x_range
    calls: list[tuple[float, float]] = []
    refresh = tl.refresh
    monkeypatch.setattr(tl, "refresh", lambda x0, x1, mask=None: (calls.append((x0, x1)), refresh(x0, x1, mask))[1])
    sent = _sent(w, monkeypatch)
    before = tl.source.data
    # BokehJS reports the initial range on first render: nothing to recompute.
    _ranges_update(w, xr.start, xr.end)
    assert tl.source.data is before and not sent and w.refinements == 0 == len(calls)
    # Zoom to 1/200 of the trace. Its start and end, reported as property changes, no longer refine
    # (they came as two messages, the second after the kernel went idle: two refinements)...
    x0, x1 = tl.layout.extent
    c, half = (x0 + x1) / 2, (x1 - x0) / 400
    _model_changed(w, xr, "start", c - half)
    _model_changed(w, xr, "end", c + half)
    assert xr.start == c - half and xr.end == c + half
    assert tl.source.data is before and not calls
    # ...the zoom's RangesUpdate does, once.
    _ranges_update(w, c - half, c + half)
    assert calls == [(c - half, c + half)] and w.refinements == 1
    assert tl.source.data is not before and tl.merged < 1_000
    lo, hi = tl.window
    assert lo <= c - half and hi >= c + half
    left = np.asarray(tl.source.data["left"])
    right = np.asarray(tl.source.data["right"])
    assert np.all((right >= lo) & (left <= hi))
    assert any(msg.get("msg") == "patch" for msg, _ in sent)
    assert "rectangles" in w.status.value
    # Idempotent: the same range again, or a small pan inside the computed window, recomputes nothing.
    refined = tl.source.data
    _ranges_update(w, c - half, c + half)
    _ranges_update(w, c - half * 0.95, c + half * 1.05)
    assert tl.source.data is refined and w.refinements == 1 == len(calls)
    # The event's own pair is used, not a half-updated x_range: a pan far right whose start and end
    # Python has not heard of yet refines that view (one refresh, the whole of it in the window).
    _ranges_update(w, c + 20 * half, c + 22 * half)
    assert calls[-1] == (c + 20 * half, c + 22 * half) and xr.start == c - half and w.refinements == 2
    lo, hi = tl.window
    assert lo <= c + 20 * half and hi >= c + 22 * half
    # Zoomed back out (reset), dispatched through the document as Bokeh does any event: once more.
    tl.figure.document.callbacks.trigger_event(RangesUpdate(tl.figure, x0=x0, x1=x1))
    assert w.refinements == 3 == len(calls) and tl.merged > 0
    # A control's redraw is no range change: it refreshes, uncounted.
    w.role_toggles["subop"].value = False
    assert len(calls) == 4 and w.refinements == 3


def test_mimebundle_falls_back_to_a_small_picture_and_text(widget: TimelineWidget, small: Trace) -> None:
    import base64
    import io

    from PIL import Image

    bundle = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == summary(small)
    assert re.search(r"2,\d{3} spans on 7 threads", bundle["text/plain"])
    assert "text/html" not in bundle  # no second Bokeh document (4-5 MB each, before)
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(b"\x89PNG") and len(png) < 60_000
    img = Image.open(io.BytesIO(png))
    assert img.width == widget.options["width"] and 60 < img.height < 500
    assert len(img.convert("RGB").getcolors(1 << 16) or []) > 8  # the role colours, not a blank
    no_picture = TimelineWidget(small, picture=False)._repr_mimebundle_()
    assert "image/png" not in no_picture


def test_save_writes_offline_html(widget: TimelineWidget, tmp_path: Path) -> None:
    path = tmp_path / "timeline.html"
    widget.save(str(path))
    text = path.read_text()
    assert "cdn.bokeh.org" not in text and "opprof timeline" in text


def test_load_bokehjs_needs_a_kernel() -> None:
    assert load_bokehjs() is False  # no IPython kernel in pytest: nothing to load into


def _fake_kernel(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A kernel for load_bokehjs (IPython's get_ipython), whose published outputs are kept."""
    from types import SimpleNamespace

    import IPython
    import IPython.display

    import opprof.jupyter.bokehjs as loader

    published: list[dict[str, Any]] = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(kernel=object()))
    monkeypatch.setattr(IPython.display, "publish_display_data", lambda data, metadata=None: published.append(data))
    monkeypatch.setattr(loader, "_loaded", False)
    return published


def test_without_a_jupyter_server_the_page_that_opens_the_notebook_serves_bokehjs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """nbclient, papermill, nbconvert: nothing shows the notebook now; the loader stays 2 KB and
    reads the base URL of whichever Jupyter page opens the notebook later."""
    import bokeh

    import opprof.jupyter.bokehjs as loader

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))  # no jpserver-<ppid>.json there
    monkeypatch.delenv("OPPROF_BOKEHJS", raising=False)
    for k in ("VSCODE_PID", "VSCODE_CWD", "VSCODE_IPC_HOOK", "VSCODE_NLS_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    published = _fake_kernel(monkeypatch)
    source = loader.bokehjs_source()
    assert source.mode == "page" and "no Jupyter server" in source.reason
    assert loader.load_bokehjs(once=True) is True
    js = published[0]["application/javascript"]
    assert len(js) < 5_000 and "jupyter-config-data" in js and bokeh.__version__ in js


def test_in_vscode_bokehjs_is_inlined_once_per_kernel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import bokeh

    import opprof.jupyter.bokehjs as loader

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))  # no jpserver-<ppid>.json there
    monkeypatch.delenv("OPPROF_BOKEHJS", raising=False)
    monkeypatch.setenv("VSCODE_PID", "4242")  # VS Code passes its environment to its kernels
    published = _fake_kernel(monkeypatch)
    source = loader.bokehjs_source()
    assert source.mode == "inline" and "VS Code" in source.reason
    assert loader.load_bokehjs(once=True) is True
    assert loader.load_bokehjs(once=True) is False  # opprof.timeline() does not re-emit megabytes
    assert loader.load_bokehjs() is True  # explicit (%opprof_init)
    assert len(published) == 2
    js = published[0]["application/javascript"]
    assert list(published[0]) == ["application/javascript"]  # one copy, not Bokeh's two
    assert bokeh.__version__ in js and "cdn.bokeh.org" not in js and 1_500_000 < len(js) < 3_000_000


def test_the_kernels_server_is_found_and_asked_before_a_light_loader_is_emitted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fake jpserver-<ppid>.json names a tiny HTTP server: serving the file means "served"."""
    import http.server
    import json
    import os
    import threading

    import bokeh

    import opprof.jupyter.bokehjs as loader
    from opprof.jupyter.server import BOKEHJS_FILES, bokehjs_route

    wanted = "/base/" + bokehjs_route(bokeh.__version__) + BOKEHJS_FILES[0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(200 if self.path == wanted else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
        monkeypatch.delenv("OPPROF_BOKEHJS", raising=False)
        info = {"url": f"http://127.0.0.1:{httpd.server_port}/base/", "base_url": "/base/", "pid": os.getppid()}
        (tmp_path / f"jpserver-{os.getppid()}.json").write_text(json.dumps(info))
        published = _fake_kernel(monkeypatch)
        source = loader.bokehjs_source()
        assert source.mode == "served" and source.base_url == "/base/"
        assert loader.load_bokehjs() is True
        js = published[0]["application/javascript"]
        assert len(js) < 4_000 and "/base/" in js and bokehjs_route(bokeh.__version__) in js
        monkeypatch.setenv("OPPROF_BOKEHJS", "inline")  # the user's word wins
        assert loader.bokehjs_source().mode == "inline"
        monkeypatch.delenv("OPPROF_BOKEHJS")
        # A kernel whose bokeh is another release than the server's: not served, so inline.
        monkeypatch.setattr(bokeh, "__version__", "0.0.1")
        assert loader.bokehjs_source().mode == "inline"
    finally:
        httpd.shutdown()


def test_a_redraw_goes_to_the_browser_as_one_patch_whose_columns_decode_back(big: Trace) -> None:
    """BatchedBokehModel: one PATCH-DOC (three comm messages, columns inline) per refinement, and
    applying it to a copy of the document gives the widget's own columns."""
    import json

    from bokeh.document import Document

    w = TimelineWidget(big)
    sent: list[Any] = []
    w.bokeh.send = lambda msg, buffers=None: sent.append((msg, buffers))
    copy = Document.from_json(w.timeline.figure.document.to_json())
    lo, hi = w.timeline.layout.extent
    assert w.redraw(force=True, view=(lo + (hi - lo) * 0.3, lo + (hi - lo) * 0.4))
    assert [m["msg"] for m, _ in sent] == ["patch"] * 3 and all(b is None for _, b in sent)
    header, _, content = (json.loads(m["payload"]) for m, _ in sent)
    assert header["msgtype"] == "PATCH-DOC" and "num_buffers" not in header
    assert len(content["events"]) >= 3  # spans, names, labels... in one message
    copy.apply_json_patch(content)
    theirs = copy.get_model_by_name("spans").data
    ours = w.timeline.source.data
    assert set(theirs) == set(ours)
    for key in ("left", "right", "c", "busy_fraction"):
        assert np.array_equal(np.asarray(theirs[key]), np.asarray(ours[key])), key
    assert w.bokeh.patches_sent == 1


def test_close_closes_every_widget_inside_so_the_timeline_can_be_freed(small: Trace) -> None:
    import gc
    import weakref

    from ipywidgets.widgets.widget import _instances

    before = set(_instances)
    w = TimelineWidget(small)
    figure = weakref.ref(w.timeline.figure)
    inside = set(_instances) - before
    bokeh_id = w.bokeh.model_id
    assert bokeh_id in inside and len(inside) > 10
    w.close()
    w.close()  # twice is fine (jupyter_bokeh's own close fails the second time)
    assert bokeh_id not in _instances
    assert len(inside & set(_instances)) <= len(inside) // 4  # only trait-less style models may stay
    del w
    gc.collect()
    assert figure() is None, "the figure (and its layout) is still referenced after close()"
