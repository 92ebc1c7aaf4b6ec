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

import importlib.util
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import require_chromium
from helpers import free_port, stop_process

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
NOTEBOOK = "01-quickstart.ipynb"


@pytest.fixture
def lab_url(tmp_path: Path) -> Iterator[str]:
    """The base URL of a fresh JupyterLab serving a copy of ``notebooks/``; stopped afterwards."""
    require_chromium()
    if importlib.util.find_spec("jupyterlab") is None:
        msg = "this test needs JupyterLab: pip install -e '.[test,e2e]' (make test does)"
        if os.environ.get("CI"):
            pytest.fail(msg + " [CI is set, so this is a failure, not a skip]")
        pytest.skip(msg)
    root = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    home = tmp_path / "home"
    home.mkdir()
    # User-level dirs are isolated; the venv's share/jupyter (kernelspec, jupyter_bokeh and
    # jupyterlab_widgets labextensions) stays on the path through sys.prefix.
    env = {
        **os.environ,
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
        "JUPYTER_PLATFORM_DIRS": "0",
        "IPYTHONDIR": str(tmp_path / "ipython"),
    }
    env.pop("JUPYTER_PATH", None)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run commands and read models
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    # No "get notified about Jupyter news?" toast over the screenshot.
    settings = tmp_path / "jupyter-config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    log = (tmp_path / "jupyterlab.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{(tmp_path / 'jupyterlab.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer in 60 s:\n{(tmp_path / 'jupyterlab.log').read_text()}")
            time.sleep(0.3)
        yield url
    finally:
        stop_process(proc, grace_s=20)
        log.close()


# The open notebook panel, once its kernel is connected and idle.
_KERNEL_IDLE_JS = """() => {
  const nb = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const kernel = nb && nb.sessionContext && nb.sessionContext.session && nb.sessionContext.session.kernel;
  return !!(kernel && kernel.connectionStatus === "connected" && kernel.status === "idle" && nb.content.widgets.length);
}"""

# Every code cell has run (an execution count, no "[*]" prompt) and the kernel is idle again.
_ALL_RAN_JS = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const kernel = nb.sessionContext.session && nb.sessionContext.session.kernel;
  const code = nb.content.model.toJSON().cells.filter((c) => c.cell_type === "code");
  const prompts = [...nb.content.node.querySelectorAll(".jp-InputArea-prompt")].map((p) => p.textContent);
  return !!kernel && kernel.status === "idle" && code.every((c) => c.execution_count) && !prompts.some((t) => t.includes("*"));
}"""

# Every output of every cell, from the notebook model: errors as "ename: evalue", streams as text.
_OUTPUTS_JS = """() => window.jupyterapp.shell.currentWidget.content.model.toJSON().cells
  .flatMap((c) => c.outputs || [])
  .map((o) => o.output_type === "error" ? {error: `${o.ename}: ${o.evalue}`} : {text: [].concat(o.text || []).join("")})"""

# The main timeline figure's view: found by its title among BokehJS's views (which live in
# shadow roots, out of reach of CSS selectors).
_FIND_JS = """
window.__opprof_tl = () => {
  const stack = [...((window.Bokeh && Bokeh.index) || [])];
  while (stack.length) {
    const v = stack.pop();
    const title = v.model.type === "Figure" && v.model.title ? String(v.model.title.text) : "";
    if (title.startsWith("opprof timeline") && v.canvas_view) return v;
    stack.push(...(v.child_views ?? []));
  }
  return null;
};
"""

# Whether the timeline canvas lies in the output area of the %%opprof cell, and its painted pixels.
_TIMELINE_JS = """() => {
  const view = window.__opprof_tl();
  if (!view) return null;
  const canvas = view.canvas_view.primary.canvas;
  const nb = window.jupyterapp.shell.currentWidget.content;
  const k = nb.model.toJSON().cells.findIndex((c) => [].concat(c.source).join("").startsWith("%%opprof"));
  const output = nb.widgets[k].node.querySelector(".jp-OutputArea");
  let node = canvas;  // climb out of Bokeh's shadow roots
  while (node && !output.contains(node)) node = node.parentNode || node.host;
  const d = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  const colors = new Set();
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) {
      painted++;
      colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    }
  }
  return {cell: k, in_cell: !!node, widget: !!output.querySelector(".jupyter-widgets"),
          width: canvas.width, height: canvas.height, painted, colors: colors.size};
}"""


def test_quickstart_timeline_widget_renders_in_jupyterlab(lab_url: str, chromium_page: Any, tmp_path: Path) -> None:
    page, console, page_errors = chromium_page
    t0 = time.monotonic()
    page.set_viewport_size({"width": 1600, "height": 1000})  # room for the 1000 px timeline and its legend
    page.goto(f"{lab_url}/lab/tree/{NOTEBOOK}")
    page.wait_for_function(_KERNEL_IDLE_JS, timeout=90_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(_ALL_RAN_JS, timeout=150_000, polling=250)

    outputs = page.evaluate(_OUTPUTS_JS)
    errors = [o["error"] for o in outputs if "error" in o]
    assert errors == [], f"cells raised: {errors}"
    text = "".join(o.get("text", "") for o in outputs)
    assert "opprof:" in text and "custom-op calls" in text  # the magic's summary line printed
    page.evaluate(_FIND_JS)
    page.wait_for_function(f"() => {{ const t = ({_TIMELINE_JS})(); return t && t.painted > 2000; }}", timeout=30_000)
    page.wait_for_timeout(500)  # let the last redraw settle
    tl = page.evaluate(_TIMELINE_JS)
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
