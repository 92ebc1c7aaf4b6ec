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

import pytest

import benchmarks.page_js as js
from benchmarks.notebook import live_run

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


# In Notebook 7: the widget code is JupyterLab's in both, and the other browser tests run in
# JupyterLab 4, so this one is the suite's Notebook 7 test too (each front end costs ~25 s here;
# pass "lab/tree" to run it in JupyterLab, which was checked to pass as well).
@pytest.mark.parametrize("front", ["notebooks"], ids=["Notebook 7"])
def test_spans_reach_the_page_while_the_cell_runs(lab_server: Any, chromium_page: Any, tmp_path: Path, front: str) -> None:
    page, console, page_errors = chromium_page
    page.set_viewport_size({"width": 1600, "height": 1000})
    run = live_run(page, lab_server, front, f"live-{front.replace('/', '-')}.ipynb")
    assert run.errors == [], f"cells raised: {run.errors}"
    assert "the live view stopped early" not in run.text, run.text
    (tmp_path / "samples.json").write_text(json.dumps(run.samples))
    counts = sorted({s["rows"] for s in run.during})
    assert len(counts) >= 5, f"the live sources did not grow while the cell ran: {counts[:20]}"
    assert any(s["shown"] for s in run.during), "no live figure in the page while the cell ran"
    print(
        f"\nlive view ({front}): first spans in the page {run.first:.2f} s after the cell started; {counts[-1]} rows while "
        f"it ran; lag after a span's end: median {run.median:.3f} s, worst {run.worst:.3f} s over {len(run.lags)} updates"
    )
    assert run.median <= 0.5, f"spans reach the page {run.median:.2f} s after they end (median): {run.lags}"
    # The goal is the median; one late update on this shared 2-core machine (seen: 0.9 s) is load, past 1.5 s a queue.
    assert run.worst <= 1.5, f"a span reached the page {run.worst:.2f} s after it ended: {run.lags}"
    assert run.first <= 2.5, f"the live view took {run.first:.2f} s to show its first spans"

    # The cell is done: the full timeline is in the cell, the live figure is gone.
    # (a canvas not laid out yet makes the check throw: that is "not yet", too)
    painted = f"() => {{ try {{ return ({js.painted_timeline()})(); }} catch (e) {{ return false; }} }}"
    page.wait_for_function(painted, timeout=30_000)
    assert not run.samples[-1]["shown"], "the live figure is still in the page after the cell ended"
    page.evaluate(f"() => {{ ({js.DEFINE_FIND})(); window.__opprof_tl().el.scrollIntoView({{block: 'center'}}); }}")
    page.wait_for_timeout(300)
    page.screenshot(path=str(tmp_path / "live-after.png"))
    # Notebook 7's own (tests/e2e/test_notebook_browser.py sees them without any live view too).
    nb7_own = ("reading 'schema'", "'filebrowser:open-path' not registered")
    assert [e for e in page_errors if not any(k in e for k in nb7_own)] == [], page_errors
    console_errors = [t for kind, t in console if kind == "error"]
    assert not [t for t in console_errors if "bokeh" in t.lower() or "widget" in t.lower()], console_errors
