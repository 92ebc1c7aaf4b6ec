"""The quickstart notebook in a real JupyterLab: ``%%opprof`` draws its timeline widget.

A ``jupyter lab`` server (from this venv, token off, isolated config/data/runtime dirs and HOME
under the test's tmp dir) serves a copy of ``notebooks/``; headless Debian Chromium (the
``chromium_page`` fixture of conftest) opens ``01-quickstart.ipynb``, runs every cell through the
JupyterLab command ``notebook:run-all-cells``, waits for the kernel to go idle, and checks that a
Bokeh canvas with painted pixels sits in the output of the ``%%opprof`` cell and no cell has an
error output. Without Chromium, playwright or jupyterlab it skips, or fails when ``CI`` is set.
The screenshot stays in the test's tmp dir (``--basetemp`` puts it where you want).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import benchmarks.page_js as js

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
NOTEBOOK = "01-quickstart.ipynb"


def test_quickstart_timeline_widget_renders_in_jupyterlab(lab_server: Any, chromium_page: Any, tmp_path: Path) -> None:
    page, console, page_errors = chromium_page
    skip = shutil.ignore_patterns(".ipynb_checkpoints")
    shutil.copytree(NOTEBOOKS, lab_server.root / "notebooks", ignore=skip, dirs_exist_ok=True)
    lab_url = lab_server.url
    t0 = time.monotonic()
    page.set_viewport_size({"width": 1600, "height": 1000})  # room for the 1000 px timeline and its legend
    page.goto(f"{lab_url}/lab/tree/notebooks/{NOTEBOOK}?reset")
    page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(js.ALL_RAN, timeout=150_000, polling=250)

    outputs = page.evaluate(js.OUTPUTS)
    errors = [o["error"] for o in outputs if "error" in o]
    assert errors == [], f"cells raised: {errors}"
    text = "".join(o.get("text", "") for o in outputs)
    assert "opprof:" in text and "custom-op calls" in text  # the magic's summary line printed
    page.evaluate(js.DEFINE_FIND)
    page.wait_for_function(f"() => {{ const t = ({js.TIMELINE})(); return t && t.painted > 2000; }}", timeout=30_000)
    page.wait_for_timeout(500)  # let the last redraw settle
    tl = page.evaluate(js.TIMELINE)
    assert tl["widget"], "the %%opprof output holds no ipywidget"
    assert tl["in_cell"], f"the timeline canvas is not inside the %%opprof cell's output: {tl}"
    assert tl["painted"] > 2000 and tl["colors"] > 3, f"the timeline canvas looks blank: {tl}"

    # The critical-path toggle works in the notebook too: the outline appears, in the browser alone.
    outline = """() => { const m = Bokeh.documents.map((d) => d.get_model_by_name("critical_path_outline")).find(Boolean);
                         return m ? m.visible : null; }"""
    assert page.evaluate(outline) is False
    page.evaluate("() => window.__opprof_tl().canvas_view.primary.canvas.scrollIntoView({block: 'center'})")
    page.get_by_role("button", name="critical path").first.click()
    page.wait_for_function(f"() => ({outline})() === true", timeout=10_000)
    # The path itself is computed by the kernel on that first click and arrives as data.
    path_rows = """() => { const m = Bokeh.documents.map((d) => d.get_model_by_name("critical_path")).find(Boolean);
                           return m ? m.data.span.length : -1; }"""
    page.wait_for_function(f"() => ({path_rows})() > 0", timeout=30_000)

    # Bring the timeline into view (the notebook panel scrolls, not the page) and screenshot it.
    page.evaluate("() => window.__opprof_tl().canvas_view.primary.canvas.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)
    page.screenshot(path=str(tmp_path / "jupyterlab-timeline.png"))
    elapsed = time.monotonic() - t0

    console_errors = [t for kind, t in console if kind == "error"]
    assert page_errors == [], page_errors
    assert not [t for t in console_errors if "bokeh" in t.lower() or "widget" in t.lower()], console_errors
    print(f"\nJupyterLab e2e: {elapsed:.1f} s in the browser; timeline {tl}; console errors {console_errors}")
    print(f"screenshot: {tmp_path / 'jupyterlab-timeline.png'}")
