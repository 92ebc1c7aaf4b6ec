"""The saved timeline of a notebook executed where no page watches (nbclient): what the output
keeps, what the server extension draws from it, and what it refuses. The page's side (drawn
untrusted, trusted, behind a token and XSRF) is tests/e2e/test_notebook_browser.py."""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from unittest import mock

import numpy as np
import pytest
from IPython.utils.capture import capture_output

import opprof
import opprof as mx
from opprof.jupyter import saved
from opprof.jupyter.saved import RENDER_ROUTE, SavedTimeline
from opprof.jupyter.server import _render
from opprof.trace import Trace, TraceFormatError
from opprof.view.embed import timeline_item, trace_bytes, trace_from_bytes


class SavedTwice(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 2)


@mx.operator.register("SavedTwice")
class SavedTwiceProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return SavedTwice()


@pytest.fixture(scope="module")
def trace() -> Trace:
    with opprof.profile() as prof:
        x = mx.nd.ones((4, 4))
        for _ in range(5):
            x = mx.nd.Custom(x, op_type="SavedTwice")
        x.wait_to_read()
    return prof.trace


def _embedded(js: str) -> bytes:
    """The trace a saved output's script carries."""
    m = re.search(r'var trace = "([A-Za-z0-9+/=]*)";', js)
    assert m is not None, js[:500]
    return base64.b64decode(m.group(1))


def test_the_output_keeps_the_trace_the_picture_and_the_summary(trace: Trace) -> None:
    bundle = SavedTimeline(trace)._repr_mimebundle_()
    assert set(bundle) == {"application/javascript", "image/png", "text/plain"}
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    assert "5 custom-op invocations" in bundle["text/plain"] and "trusted" in bundle["text/plain"]
    back = trace_from_bytes(_embedded(bundle["application/javascript"]))
    # Lossless: the spans, the engine's edges (the exact critical path) and the GIL's states.
    assert back.n_spans == trace.n_spans and np.array_equal(back.table.start, trace.table.start)
    assert back.ops is not None and trace.ops is not None and np.array_equal(back.ops.op, trace.ops.op)
    assert (back.thread_states is None) == (trace.thread_states is None)
    assert json.dumps(RENDER_ROUTE) in bundle["application/javascript"]


def test_a_trace_too_large_to_keep_leaves_the_picture_and_says_why(trace: Trace) -> None:
    with mock.patch.object(saved, "MAX_EMBEDDED_BYTES", 100):
        out = SavedTimeline(trace)
    js = out._repr_mimebundle_()["application/javascript"]
    assert _embedded(js) == b"" and "too large to keep in the notebook" in js and "%%opprof -o" in js


def test_the_server_draws_a_saved_trace_with_its_exact_critical_path(trace: Trace) -> None:
    item = json.loads(_render(trace_bytes(trace)))
    assert {"doc", "root_id", "target_id"} <= set(item)
    text = json.dumps(item["doc"])
    assert '"critical path"' in text and "critical path (approximate)" not in text
    assert "SavedTwice" in text  # the spans' names, drawn
    assert set(timeline_item(trace)) == set(item)


@pytest.mark.parametrize("body", [b"", b"not a zip", b"PK\x03\x04" + b"\x00" * 64])
def test_the_server_refuses_what_is_no_saved_trace_saying_why(body: bytes) -> None:
    with pytest.raises(ValueError, match="not a saved opprof trace"):
        _render(body)
    with pytest.raises(TraceFormatError):
        trace_from_bytes(body)


def test_unwatched_the_magic_shows_the_saved_timeline_and_no_live_view(ip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a kernel (nbclient's) that no page watches: no live view streams to nobody, no widget."""
    from opprof.jupyter import magics

    ip.run_cell("import opprof as mx")
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    monkeypatch.setattr(magics, "unwatched", lambda: True)
    monkeypatch.setattr(magics, "load_bokehjs", lambda once=False: False)
    monkeypatch.setattr(magics, "LiveView", mock.Mock(side_effect=AssertionError("a live view was started")))
    with capture_output() as out:
        result = ip.run_cell("%%opprof\nmx.nd.Custom(mx.nd.ones((2, 2)), op_type='SavedTwice').wait_to_read()")
    assert result.error_in_exec is None, result.error_in_exec
    bundles = [o.data for o in out.outputs]
    assert not any("application/vnd.jupyter.widget-view+json" in b for b in bundles), [list(b) for b in bundles]
    shown = [b for b in bundles if "application/javascript" in b and "image/png" in b]
    assert len(shown) == 1 and trace_from_bytes(_embedded(shown[0]["application/javascript"])).n_spans > 0


def test_unwatched_a_comparison_keeps_both_runs_for_the_page_and_no_widget(ip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from opprof.jupyter import magics

    ip.run_cell("import opprof as mx")
    monkeypatch.setattr(magics, "unwatched", lambda: True)
    monkeypatch.setattr(magics, "load_bokehjs", lambda once=False: False)
    cell = "x = mx.nd.ones((2, 2))\nfor _ in range(3):\n    x = mx.nd.Custom(x, op_type='SavedTwice')\nx.wait_to_read()"
    with capture_output():
        assert ip.run_cell(f"%%opprof --repeat 2 --loops 1 --label A\n{cell}").error_in_exec is None
    with capture_output() as out:
        result = ip.run_cell(f"%%opprof --repeat 2 --loops 1 --compare A\n{cell}")
    assert result.error_in_exec is None, result.error_in_exec
    bundles = [o.data for o in out.outputs]
    assert not any("application/vnd.jupyter.widget-view+json" in b for b in bundles), [list(b) for b in bundles]
    shown = [trace_from_bytes(_embedded(b["application/javascript"])) for b in bundles if "image/png" in b]
    # The last run's own timeline, then the comparison's two runs on one axis (a process each).
    assert len(shown) == 2 and len({th.pid for th in shown[1].threads}) == 2
    assert shown[1].n_spans == 2 * shown[0].n_spans
    assert "the diff chart shows where a page watches" in out.stdout
