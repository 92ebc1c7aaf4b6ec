"""The live view in a real Notebook 7 page: spans reach the page while the ``%%opprof`` cell runs.

A notebook written into the session's JupyterLab (the ``lab_server`` fixture) runs ~3 s of custom
ops that sleep; a sampler in the page reads, every 50 ms, the live figure's data sources (found
by name in ``Bokeh.documents``). Before the recording stopped (its clock, printed by the next
cell, against the page's: the same machine's) the sources must gain rows, each span arriving
within about half a second of its end, and once the cell is done the full timeline is drawn in
its place and the live figure is gone from the page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

import benchmarks.page_js as js

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SETUP = """\
%load_ext opprof
import time
import opprof as mx

class Sleepy(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        time.sleep(0.05)
        self.assign(out_data[0], req[0], in_data[0] + 1)

@mx.operator.register("LiveSleepy")
class SleepyProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Sleepy()
"""
CELL = """\
%%opprof --var live_prof
x = mx.nd.ones((4, 4))
for i in range(60):  # ~3 s: 50 ms of Python per call, one call at a time
    x = mx.nd.Custom(x, op_type="LiveSleepy")
    x.wait_to_read()
"""
# When the recording started and stopped, as wall time (the page's Date.now() is wall time too).
CLOCK = """\
import json
wall = time.time() - time.perf_counter()
meta = live_prof.trace.metadata
print("CLOCK", json.dumps({"start": meta["t_start_ns"] / 1e9 + wall, "stop": meta["t_stop_ns"] / 1e9 + wall}))
"""

# Every 50 ms: the page's time, the kernel's status (for a reader of samples.json), the live
# sources' rows and latest span end (µs), and whether a live figure is attached to the page.
SAMPLER = """() => {
  window.__live = [];
  const rows = (name) => {
    const models = (window.Bokeh ? Bokeh.documents : []).map((d) => d.get_model_by_name(name)).filter(Boolean);
    let n = 0, right = -Infinity;
    for (const m of models) {
      const r = m.data.right || [];
      n += r.length;
      for (let i = 0; i < r.length; i++) if (r[i] > right) right = r[i];
    }
    return [n, right];
  };
  const liveShown = () => {
    const stack = [...((window.Bokeh && Bokeh.index) || [])];
    while (stack.length) {
      const v = stack.pop();
      const title = v.model.type === "Figure" && v.model.title ? String(v.model.title.text) : "";
      if (title.startsWith("opprof live view") && v.el && v.el.isConnected) return true;
      stack.push(...(v.child_views ?? []));
    }
    return false;
  };
  window.__live_timer = setInterval(() => {
    const nb = window.jupyterapp.shell.currentWidget;
    const kernel = nb && nb.sessionContext.session && nb.sessionContext.session.kernel;
    const [a, ra] = rows("opprof_live_spans"), [b, rb] = rows("opprof_live_outer");
    window.__live.push({t: Date.now() / 1000, status: kernel ? kernel.status : null, rows: a + b,
                        right: Math.max(ra, rb), shown: liveShown()});
  }, 50);
}"""


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (SETUP, CELL, CLOCK)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


# In Notebook 7: the widget code is JupyterLab's in both, and the other browser tests run in
# JupyterLab 4, so this one is the suite's Notebook 7 test too (each front end costs ~25 s here;
# pass "lab/tree" to run it in JupyterLab, which was checked to pass as well).
@pytest.mark.parametrize("front", ["notebooks"], ids=["Notebook 7"])
def test_spans_reach_the_page_while_the_cell_runs(lab_server: Any, chromium_page: Any, tmp_path: Path, front: str) -> None:
    page, console, page_errors = chromium_page
    name = f"live-{front.replace('/', '-')}.ipynb"
    _notebook(lab_server.root / name)
    page.set_viewport_size({"width": 1600, "height": 1000})
    # ?reset: JupyterLab would otherwise restore the session's last workspace (another test's notebook).
    page.goto(f"{lab_server.url}/{front}/{name}" + ("?reset" if front.startswith("lab") else ""))
    page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
    page.evaluate(SAMPLER)
    page.evaluate(js.RUN_ALL)
    page.wait_for_function(js.ALL_RAN, timeout=150_000, polling=250)
    page.wait_for_timeout(300)  # a last sample or two, idle
    samples = page.evaluate("() => { clearInterval(window.__live_timer); return window.__live; }")

    outputs = page.evaluate(js.OUTPUTS)
    errors = [o["error"] for o in outputs if "error" in o]
    assert errors == [], f"cells raised: {errors}"
    text = "".join(o.get("text", "") for o in outputs)
    assert "the live view stopped early" not in text, text
    clock = json.loads(next(line for line in text.splitlines() if line.startswith("CLOCK ")).split(" ", 1)[1])

    (tmp_path / "samples.json").write_text(json.dumps(samples))
    # While the cell ran: the recording's own clock says when; JupyterLab's kernel status does
    # not (in these runs it read "idle" for most of the cell once widget messages flowed).
    during = [s for s in samples if s["t"] < clock["stop"] and s["rows"] > 0]
    counts = sorted({s["rows"] for s in during})
    assert len(counts) >= 5, f"the live sources did not grow while the cell ran: {counts[:20]}"
    assert any(s["shown"] for s in during), "no live figure in the page while the cell ran"
    # Latency: each time the latest span end grows, how long after that end the page had it (an
    # upper bound: it came at most one 50 ms sample earlier).
    lags = []
    seen = -float("inf")
    for s in during:
        if s["right"] > seen:
            seen = s["right"]
            lags.append(s["t"] - (clock["start"] + s["right"] / 1e6))
    lags.sort()
    median, worst = lags[len(lags) // 2], lags[-1]
    first = during[0]["t"] - clock["start"]
    print(
        f"\nlive view ({front}): first spans in the page {first:.2f} s after the cell started; {counts[-1]} rows while it ran; "
        f"lag after a span's end: median {median:.3f} s, worst {worst:.3f} s over {len(lags)} updates"
    )
    assert median <= 0.5, f"spans reach the page {median:.2f} s after they end (median): {lags}"
    # The goal is the median; one late update on this shared 2-core machine (seen: 0.9 s) is load, past 1.5 s a queue.
    assert worst <= 1.5, f"a span reached the page {worst:.2f} s after it ended: {lags}"
    assert first <= 2.5, f"the live view took {first:.2f} s to show its first spans"

    # The cell is done: the full timeline is in the cell, the live figure is gone.
    # (a canvas not laid out yet makes the check throw: that is "not yet", too)
    painted = f"() => {{ try {{ return ({js.painted_timeline()})(); }} catch (e) {{ return false; }} }}"
    page.wait_for_function(painted, timeout=30_000)
    assert not samples[-1]["shown"], "the live figure is still in the page after the cell ended"
    page.evaluate(f"() => {{ ({js.DEFINE_FIND})(); window.__opprof_tl().el.scrollIntoView({{block: 'center'}}); }}")
    page.wait_for_timeout(300)
    page.screenshot(path=str(tmp_path / "live-after.png"))
    # Notebook 7's own (tests/test_notebook_browser.py sees them without any live view too).
    nb7_own = ("reading 'schema'", "'filebrowser:open-path' not registered")
    assert [e for e in page_errors if not any(k in e for k in nb7_own)] == [], page_errors
    console_errors = [t for kind, t in console if kind == "error"]
    assert not [t for t in console_errors if "bokeh" in t.lower() or "widget" in t.lower()], console_errors
